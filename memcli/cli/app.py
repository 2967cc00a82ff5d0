"""The Typer app: global options, and registration of every command group."""

from __future__ import annotations

import functools
import sys
from types import ModuleType
from typing import Annotated, Any

import typer
import typer.core
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
from memcli.cli.output import fail


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


class _OneLineErrors(typer.core.TyperGroup):
    """The root command: a usage error (missing argument, unknown option, bad value) is one
    line, `memcli: error: <what> (try 'memcli CMD --help')`, exit 2, like every other error;
    Typer would print its usage box (3-4 lines). Runs the command in Typer's non-standalone
    mode, which raises those errors instead of printing them."""

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.TyperException as exc:
            raise _usage_exit(exc) from None
        except typer.Abort:
            raise fail("aborted", 1) from None
        # Non-standalone mode returns what the command returned (None), or an Exit's code.
        raise SystemExit(code if isinstance(code, int) else 0)


def _usage_exit(exc: typer.TyperException) -> SystemExit:
    """The one line (and exit code) of a usage error Typer raised."""
    code = getattr(exc, "exit_code", 2)
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError":  # `memcli` or `memcli task` alone: the help
        print(exc.format_message(), file=sys.stderr)
        return SystemExit(code)
    what = exc.format_message().replace("Value error, ", "").strip().rstrip(".") or "bad usage"
    what = what[:1].lower() + what[1:]
    hint = f"try '{ctx.command_path if ctx is not None else 'memcli'} --help'"
    if what.endswith(")") and "(" in what:  # "... (Possible options: --legs)": one hint
        return fail(f"{what[:-1]}; {hint})", code)
    return fail(f"{what} ({hint})", code)


def build_app(modules: tuple[ModuleType, ...] = MODULES) -> typer.Typer:
    """The Typer app with the given command groups (all of them by default)."""
    built = typer.Typer(
        name="memcli",
        cls=_OneLineErrors,
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
