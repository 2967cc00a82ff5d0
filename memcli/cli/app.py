"""The Typer app: global options, and registration of every command group."""

from __future__ import annotations

import functools
import sys
from types import ModuleType
from typing import Annotated, Any

import typer
import typer.main

from memcli import __version__
from memcli.cli import (
    acb,
    admin,
    doctor,
    facts,
    hook,
    ingest,
    keys,
    ledger,
    lifecycle,
    mcp,
    pg,
    portable,
    query,
    rebuild,
    serve,
    views,
)


def _version(value: bool) -> None:
    if value:
        print(f"memcli {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Long-term memory for AI agents in one local SQLite file."""


# Every command group, in help order. Each module's register() adds its commands to an app.
MODULES = (ingest, query, admin, acb, ledger, lifecycle, facts, doctor, keys, rebuild, portable,
           views, serve, mcp, hook, pg)
# Top-level command name -> the module registering it (tests check this matches the modules).
COMMAND_MODULES: dict[str, ModuleType] = {
    **dict.fromkeys(("ingest", "embed", "reindex"), ingest),
    "query": query,
    **dict.fromkeys(("history", "purge", "forget", "restore", "stats", "artifact", "demo"),
                    admin),
    **dict.fromkeys(("acb", "related"), acb),
    **dict.fromkeys(("decision", "task", "checkpoint"), ledger),
    **dict.fromkeys(("consolidate", "decay", "reflect", "insights", "remember", "confirm", "pin",
                     "unpin", "proposals"), lifecycle),
    **dict.fromkeys(("correct", "entity"), facts),
    "doctor": doctor,
    "key": keys,
    "rebuild": rebuild,
    **dict.fromkeys(("export", "import"), portable),
    "view": views,
    "serve": serve,
    "mcp": mcp,
    "hook": hook,
    "pg": pg,
}


def build_app(modules: tuple[ModuleType, ...] = MODULES) -> typer.Typer:
    """The Typer app with the given command groups (all of them by default)."""
    built = typer.Typer(
        name="memcli",
        help="Long-term memory for AI agents in one local SQLite file.",
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    built.callback()(_root)
    for module in modules:
        module.register(built)
    return built


app = build_app()


def run_typer(argv: list[str] | None = None) -> None:
    """Parse `argv` (default: sys.argv[1:]) with Typer and run the command: the in-process
    path of `memcli.cli.entry.main`, and what `memcli serve` runs for a forwarded command."""
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else None
    # Typer turns every registered command into a click command before parsing (~60 ms for
    # all of them): a named command only needs its own group. Help, completion and unknown
    # names get the whole app.
    module = COMMAND_MODULES.get(command or "")
    _click_command(module)(args=args, prog_name="memcli")


@functools.cache
def _click_command(module: ModuleType | None) -> Any:
    """The click command of one command group's app (None: the whole app), built once per
    process: what `Typer.__call__` does on every call, kept for `memcli serve`, which runs
    many commands (building one took ~40-75 ms a request)."""
    target = build_app((module,)) if module is not None else app
    if sys.excepthook is not typer.main.except_hook:  # as Typer.__call__ does
        sys.excepthook = typer.main.except_hook
    return typer.main.get_command(target)
