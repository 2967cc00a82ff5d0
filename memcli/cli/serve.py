"""`memcli serve`: the long-running daemon (memcli.service.daemon) for one database."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from memcli.cli.options import DbOpt
from memcli.cli.output import errors, fail


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve_cmd(
        db: DbOpt = None,
        socket: Annotated[Path | None, typer.Option(
            "--socket", help="CLI socket path (default: in $XDG_RUNTIME_DIR/memcli/, named "
            "after the database; clients find it through MEMCLI_SOCKET).",
            show_default=False)] = None,
        idle_exit: Annotated[float | None, typer.Option(
            "--idle-exit", min=0, metavar="MINUTES",
            help="Exit after this many minutes without a request.", show_default=False)] = None,
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
    ) -> None:
        """Run one warm process for the database: the CLI forwards commands to it, and it
        serves the HTTP API (and MCP). Stop it with SIGTERM or Ctrl-C."""
        from memcli.config import load_settings
        from memcli.service import paths
        from memcli.service.daemon import HttpOptions
        from memcli.service.daemon import serve as run

        code = 1
        with errors():
            settings = load_settings(db)
            if socket is not None:
                ep = paths.endpoint_for_socket(socket.absolute())
                socket.absolute().parent.mkdir(parents=True, exist_ok=True)
            else:
                ep = paths.endpoint(settings.db)
                try:
                    paths.ensure_private_dir(os.path.dirname(ep.socket))
                except paths.RuntimeDirError as exc:
                    raise fail(f"{exc} (set XDG_RUNTIME_DIR, or pass --socket)", 1) from None
            http = HttpOptions(port=port, host=host, token_file=token_file, no_token=no_token)
            code = run(settings, ep, idle_exit=idle_exit, grace=grace, http=http)
        # Threads of requests that outlived the grace period must not hold up the exit.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
