"""The Typer app: global options, and registration of every command group."""

from __future__ import annotations

import functools
import os
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
    ui,
    views,
)
from memcli.cli.output import fail
from memcli.service.daemon.paths import root_db


def _version(value: bool) -> None:
    if value:
        print(f"memcli {__version__}")
        raise typer.Exit()


class Commands:
    """What `memcli serve` needs of the app it is part of (it finds it in the context's `obj`,
    set by the root callback): the runner of a forwarded command line, and the warm-up."""

    def __init__(self) -> None:
        self.run = run_forwarded
        self.warm = warm_commands


def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    db: Annotated[str | None, typer.Option(
        "--db", show_default=False,
        help="Database file for the command (its own --db wins).")] = None,
) -> None:
    """Long-term memory for AI agents in one local SQLite file."""
    ctx.obj = Commands()


# Every command group, in help order. Each module's register() adds its commands to an app.
MODULES = (ingest, query, admin, acb, ledger, lifecycle, facts, doctor, keys, rebuild, portable,
           views, serve, ui, mcp, hook, pg)
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
    "ui": ui,
    "mcp": mcp,
    "hook": hook,
    "pg": pg,
}

# `memcli --help` lists the commands in these panels, in this order (Typer's `rich_help_panel`;
# a test checks every command has one).
PANELS: dict[str, tuple[str, ...]] = {
    "Memory": ("ingest", "query", "history", "related", "remember", "correct", "entity",
               "forget", "restore", "artifact"),
    "Context": ("acb", "view", "hook"),
    "Lifecycle": ("consolidate", "decay", "reflect", "insights", "proposals", "confirm", "pin",
                  "unpin"),
    "Ledger": ("decision", "task", "checkpoint"),
    "Service": ("serve", "ui", "mcp"),
    "Admin": ("doctor", "stats", "embed", "reindex", "rebuild", "export", "import", "purge",
              "key", "pg", "demo"),
}
COMMAND_PANELS = {name: panel for panel, names in PANELS.items() for name in names}


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


    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list in its panels, as plain text: Typer draws panels only with rich,
        which `--help` does not import (rich_markup_mode=None keeps start-up cheap)."""
        shown = {name: cmd for name in self.list_commands(ctx)
                 if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden}
        if not shown:
            return
        limit = formatter.width - 6 - max(len(name) for name in shown)
        other = tuple(name for name in shown if name not in COMMAND_PANELS)
        for panel, names in (*PANELS.items(), ("Other", other)):
            rows = [(name, shown[name].get_short_help_str(limit))
                    for name in names if name in shown]
            if rows:
                with formatter.section(f"{panel} commands"):
                    formatter.write_dl(rows)


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
    for info in (*built.registered_commands, *built.registered_groups):
        name = info.name or typer.main.get_command_name(info.callback.__name__)
        info.rich_help_panel = COMMAND_PANELS.get(name)
    return built


app = build_app()


def run_typer(argv: list[str] | None = None) -> None:
    """Parse `argv` (default: sys.argv[1:]) with Typer and run the command: the in-process
    path of `memcli.cli.entry.main`, and what `memcli serve` runs for a forwarded command."""
    args = sys.argv[1:] if argv is None else argv
    rest = root_db(args)[1]
    command = rest[0] if rest else None
    # Typer turns every registered command into a click command before parsing (~60 ms for
    # all of them): a named command only needs its own group. Help, completion and unknown
    # names get the whole app.
    module = COMMAND_MODULES.get(command or "")
    _click_command(module)(args=args, prog_name="memcli")


def run_forwarded(argv: list[str]) -> None:
    """A command line forwarded to `memcli serve`, in the process it forked for it (already the
    caller's: environment, folder, stdio): what `memcli.cli.entry.main` does in-process once
    no daemon answered, its process defaults included."""
    from memcli.config import thread_defaults

    thread_defaults()
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    run_typer(argv)


def warm_commands() -> None:
    """Build every command group's click command now, with each parameter's converter (a
    pydantic TypeAdapter Typer builds on a parameter's first use: ~30 ms of a `query`), so
    that the processes `memcli serve` forks find them built."""
    for module in {*COMMAND_MODULES.values(), None}:
        _prepare_params(_click_command(module))


def _prepare_params(command: Any) -> None:
    # `--help` too: click makes that option on a command's first parse, and Typer then builds
    # its converter (~5 ms for the two of a `memcli query`).
    context = command.context_class(command, **(command.context_settings or {}))
    for param in (*getattr(command, "params", ()), command.get_help_option(context)):
        prepare = getattr(param, "get_runtime_param", None)
        if callable(prepare):
            try:
                prepare()
            except Exception:  # noqa: BLE001, S112 - the command reports it when it runs
                continue
    for sub in getattr(command, "commands", {}).values():
        _prepare_params(sub)


@functools.cache
def _click_command(module: ModuleType | None) -> Any:
    """The click command of one command group's app (None: the whole app), built once per
    process: what `Typer.__call__` does on every call, kept for `memcli serve`, which runs
    many commands (building one took ~40-75 ms a request)."""
    target = build_app((module,)) if module is not None else app
    if sys.excepthook is not typer.main.except_hook:  # as Typer.__call__ does
        sys.excepthook = typer.main.except_hook
    return typer.main.get_command(target)
