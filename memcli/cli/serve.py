"""`memcli serve` (the daemon, memcli.service.daemon) and `memcli serve status`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from memcli.cli.options import DbOpt
from memcli.cli.output import emit, errors, fail, resolve_format

SocketOpt = Annotated[Path | None, typer.Option(
    "--socket", help="CLI socket path (default: in $XDG_RUNTIME_DIR/memcli/, named after the "
    "database; clients find it through MEMCLI_SOCKET). Its folder must be yours and closed to "
    "others (created 0700 when missing).", show_default=False)]


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
) -> None:
    """Run one warm process for the database: the CLI forwards commands to it, and it
    serves the HTTP API (and MCP). Stop it with SIGTERM or Ctrl-C."""
    if ctx.invoked_subcommand is not None:
        return
    from memcli.service.daemon import HttpOptions
    from memcli.service.daemon import serve as run

    code = 1
    with errors():
        settings, ep = _endpoint(db, socket, create=True)
        http = HttpOptions(port=port, host=host, token_file=token_file, no_token=no_token)
        commands = ctx.obj  # memcli.cli.app.Commands: the app this command is part of
        code = run(settings, ep, commands.run, commands.warm, idle_exit=idle_exit,
                   grace=grace, http=http, pool_size=pool_size, auto_started=auto_started)
    # Nothing of the daemon's is left to tear down (its commands ran in processes of
    # their own); the pipes its forks watch close with this process.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def status_cmd(db: DbOpt = None, socket: SocketOpt = None) -> None:
    """Whether a daemon serves the database: pid, since when, sockets, models loaded,
    requests answered, started by hand or by the CLI, idle exit (JSON). Exit 0 when one
    runs, 1 when none does."""
    from memcli.service import daemon

    with errors():
        settings, ep = _endpoint(db, socket, create=False)
        state = daemon.status(ep)
        emit(state, resolve_format(None, True))
        if not state["running"]:
            raise SystemExit(1)


def register(app: typer.Typer) -> None:
    serve = typer.Typer(
        help="One warm process for the database: the CLI forwards commands to it, and it "
        "serves the HTTP API (and MCP). Stop it with SIGTERM or Ctrl-C.",
        invoke_without_command=True, no_args_is_help=False)
    app.add_typer(serve, name="serve")

    serve.callback(invoke_without_command=True)(serve_cmd)
    serve.command("status")(status_cmd)


def _endpoint(db: str | None, socket: Path | None, *, create: bool):
    """The settings and the daemon files for `--db` / `--socket`."""
    from memcli.config import load_settings
    from memcli.service import paths

    settings = load_settings(db)
    given = socket is not None
    ep = (paths.endpoint_for_socket(socket.absolute()) if socket is not None
          else paths.endpoint(settings.db))
    if create:
        # Clients use only a socket in a folder that is the user's and closed to others.
        hint = ("choose a --socket folder only you can enter" if given
                else "set XDG_RUNTIME_DIR, or pass --socket")
        try:
            paths.ensure_private_dir(os.path.dirname(ep.socket))
        except paths.RuntimeDirError as exc:
            raise fail(f"{exc} ({hint})", 1) from None
    return settings, ep
