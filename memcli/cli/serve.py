"""`memcli serve` (the daemon, memcli.service.daemon.main_process), `memcli serve status` and
`memcli serve stop`. `serve` alone serves one database; `serve --all-databases` is the user's
daemon, the one the CLI starts by itself. `status` and `stop` act on the daemon that would
answer a command for `--db`: the one started for that database when it runs, else the user's."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from memcli.cli.options import DbOpt, Format, JsonOpt
from memcli.cli.output import emit, errors, fail, resolve_format

SocketOpt = Annotated[Path | None, typer.Option(
    "--socket", envvar="MEMCLI_SOCKET", show_envvar=True,
    help="The daemon's CLI socket (default: in $XDG_RUNTIME_DIR/memcli/, named after the "
    "database, or `u-<key>.sock` for the user's daemon). Its folder must be yours and closed "
    "to others (created 0700 when missing).",
    show_default=False)]
JsonFormatOpt = Annotated[Format | None, typer.Option(
    "--format", "-f", help="Output format (default: json).", show_default=False)]
StopWaitOpt = Annotated[float, typer.Option(
    "--wait", min=0, metavar="SECONDS",
    help="How long to wait for the daemon to finish its requests in flight and exit.")]


def serve_cmd(
    ctx: typer.Context,
    db: DbOpt = None,
    socket: SocketOpt = None,
    idle_exit: Annotated[float | None, typer.Option(
        "--idle-exit", min=0, metavar="MINUTES",
        help="Exit after this many minutes without a request (a daemon a command started "
        "itself: 15, config `daemon_idle_exit`).", show_default=False)] = None,
    grace: Annotated[float, typer.Option(
        "--grace", min=0, help="Seconds requests in flight get to finish on shutdown.")
    ] = 30.0,
    port: Annotated[int | None, typer.Option(
        "--port", min=0, max=65535, help="Also serve the HTTP API on this TCP port.",
        show_default=False)] = None,
    host: Annotated[str, typer.Option(
        "--host", help="Address for --port (anything but loopback needs a token).")
    ] = "127.0.0.1",
    token_file: Annotated[Path | None, typer.Option(
        "--token-file", help="Bearer token file for HTTP (created 0600 if missing).",
        show_default=False)] = None,
    no_token: Annotated[bool, typer.Option(
        "--no-token", help="Allow HTTP on loopback without a token.")] = False,
    pool_size: Annotated[int | None, typer.Option(
        "--pool-size", min=1, max=1000, help="PostgreSQL: connections the daemon keeps at "
        "most (default: config `pool_size`, 10).", show_default=False)] = None,
    auto_started: Annotated[bool, typer.Option(
        "--auto-started", hidden=True,
        help="Started by the CLI when no daemon answered (`serve status` says so).")] = False,
    all_databases: Annotated[bool, typer.Option(
        "--all-databases", help="Serve every database the user's commands name (the daemon "
        "the CLI starts by itself), not one: each opened by the command that needs it and "
        "closed after 10 minutes unused (--db-idle-close).")] = False,
    db_idle_close: Annotated[float | None, typer.Option(
        "--db-idle-close", min=0, metavar="SECONDS",
        help="With --all-databases: seconds a database stays open unused (default 600).",
        show_default=False)] = None,
    lock_fd: Annotated[int | None, typer.Option(
        "--lock-fd", hidden=True, min=0,
        help="The daemon lock, held already by the CLI that started this daemon.")] = None,
) -> None:
    """Run one warm process for the database (or, with `--all-databases`, for every
    database): the CLI forwards commands to it, and it serves the HTTP API (and MCP). Stop
    it with `memcli serve stop`, SIGTERM or Ctrl-C."""
    if ctx.invoked_subcommand is not None:
        return
    from memcli.service.daemon.main_process import HttpOptions
    from memcli.service.daemon.main_process import serve as run

    code = 1
    with errors():
        if all_databases and db is not None:
            raise fail("--db and --all-databases cannot be given together (the user's "
                       "daemon serves the database each command names)", 2)
        settings, ep = _endpoint(db, socket, create=True, all_databases=all_databases)
        http = HttpOptions(port=port, host=host, token_file=token_file, no_token=no_token)
        commands = ctx.obj  # memcli.cli.app.Commands: the app this command is part of
        code = run(settings, ep, commands.run, commands.warm, idle_exit=idle_exit,
                   grace=grace, http=http, pool_size=pool_size, auto_started=auto_started,
                   all_databases=all_databases, db_idle_close=db_idle_close,
                   lock_fd=lock_fd)
    # Nothing of the daemon's is left to tear down (its commands ran in processes of
    # their own); the pipes its forks watch close with this process.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def status_cmd(db: DbOpt = None, socket: SocketOpt = None, fmt: JsonFormatOpt = None,
               as_json: JsonOpt = False) -> None:
    """Whether a daemon serves the database (the one started for it, else the user's): pid,
    since when, sockets, models loaded, requests answered, started by hand or by the CLI,
    idle exit; the user's daemon lists the databases open, each with its backlog (JSON unless
    `--format text`). Exit 0 when one runs, 1 when none does."""
    from memcli.service.daemon import main_process

    with errors():
        settings, ep = _endpoint(db, socket, create=False)
        state = main_process.status(ep)
        emit(state, resolve_format(fmt or Format.json, as_json), _status_line)
        if not state["running"]:
            raise SystemExit(1)


def stop_cmd(db: DbOpt = None, socket: SocketOpt = None, wait: StopWaitOpt = 60.0,
             fmt: JsonFormatOpt = None, as_json: JsonOpt = False) -> None:
    """Stop the daemon that answers for the database (the one started for it, else the
    user's; SIGTERM: requests in flight finish first) and wait until it has exited. Exit 0
    when it stopped or none ran, 1 when it is still running after `--wait` seconds."""
    from memcli.service.daemon import main_process

    with errors():
        _settings, ep = _endpoint(db, socket, create=False)
        result = main_process.stop(ep, wait)
        emit(result, resolve_format(fmt or Format.json, as_json), _stop_line)
        if result["running"]:
            raise fail(f"the daemon (pid {result['pid']}) is still running after {wait:g} s "
                       f"(its log: {ep.log}; `kill -9 {result['pid']}` ends it at once)")


def _status_line(state: dict) -> None:
    if state["running"]:
        print(f"memcli serve: running (pid {state['pid']}) on {state['socket']}")
    else:
        print(f"memcli serve: not running ({state['socket']})")


def _stop_line(result: dict) -> None:
    if result["stopped"]:
        print(f"memcli serve: stopped (pid {result['pid']})")
    elif not result["running"]:
        print("memcli serve: not running")


def register(app: typer.Typer) -> None:
    serve = typer.Typer(
        help="One warm process for the database: the CLI forwards commands to it, and it "
        "serves the HTTP API (and MCP). Stop it with `memcli serve stop`, SIGTERM or Ctrl-C.",
        invoke_without_command=True, no_args_is_help=False)
    app.add_typer(serve, name="serve")

    serve.callback(invoke_without_command=True)(serve_cmd)
    serve.command("status")(status_cmd)
    serve.command("stop")(stop_cmd)


def _endpoint(db: str | None, socket: Path | None, *, create: bool,
              all_databases: bool = False):
    """The settings (a database file by its real path) and the daemon files for `--db` /
    `--socket`: to serve (`create`), the database's own (the user's with `all_databases`);
    for status and stop, the daemon that would answer a command for the database."""
    from memcli.config import load_settings
    from memcli.service.daemon import main_process, paths

    settings = load_settings(db)
    if not paths._is_server_location(settings.db):
        # One database, one daemon: the file itself, never a link someone may re-point.
        settings = settings.model_copy(update={"db": os.path.realpath(settings.db)})
    given = socket is not None
    if socket is not None:
        ep = paths.endpoint_for_socket(socket.absolute())
    elif all_databases:
        ep = paths.user_endpoint()
    elif create:
        ep = paths.endpoint(settings.db)
    else:
        ep = main_process.answering(settings.db)
    if create:
        if not paths.fits(ep.http_socket):
            raise fail(f"the socket path {ep.http_socket} is too long for a unix socket "
                       f"({len(os.fsencode(ep.http_socket))} bytes, at most "
                       f"{paths.SUN_PATH - 1} here) (pass a shorter --socket)", 2)
        # Clients use only a socket in a folder that is the user's and closed to others.
        hint = ("choose a --socket folder only you can enter" if given
                else "set XDG_RUNTIME_DIR, or pass --socket")
        try:
            paths.ensure_private_dir(os.path.dirname(ep.socket))
        except paths.RuntimeDirError as exc:
            raise fail(f"{exc} ({hint})", 1) from None
    return settings, ep
