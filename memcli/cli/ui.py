"""`memcli ui`: the address of the running daemon's web pages, with a one-time login.

It starts nothing. It asks the daemon of the database, over its HTTP Unix socket (0600: only
this user reaches it, so no token is needed there), for a login link (`POST /ui/login-link`):
the daemon's TCP address with a one-time code that logs a browser in (memcli.viewer.access).
A browser cannot open a Unix socket, so the pages need the TCP listener: without a daemon the
command says to run `memcli serve --port 8765`; with one that has no `--port` (one the CLI
started, say), to stop it first. `--socket` / `MEMCLI_SOCKET` name the daemon as for every
client.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from memcli.cli.options import DbOpt, FormatOpt, JsonOpt
from memcli.cli.output import emit, errors, resolve_format
from memcli.cli.serve import SocketOpt
from memcli.errors import MemcliError

START_HINT = "start one with `memcli serve --port 8765`, then run `memcli ui` again"
RESTART_HINT = ("stop it with `memcli serve stop`, then start `memcli serve --port 8765` and run "
                "`memcli ui` again")


def ui_cmd(
    db: DbOpt = None,
    socket: SocketOpt = None,
    open_browser: Annotated[bool, typer.Option(
        "--open", help="Open the page in the web browser too.")] = False,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the address of the running daemon's web pages (a one-time login link, valid for
    two minutes); `--open` opens it in the browser. Needs `memcli serve --port N`."""
    with errors():
        link = login_link(db, socket)
        if open_browser:
            import webbrowser

            webbrowser.open(str(link["url"]))
        emit(link, resolve_format(fmt, as_json), lambda p: print(p["url"]))


def login_link(db: str | None, socket: Path | None = None) -> dict[str, object]:
    """`{"url", "expires_in"}` from the daemon serving `db` (the one of `socket`, its CLI
    socket, when given); MemcliError (exit 1) without one."""
    import http.client

    from memcli.cli.mcp_bridge import UnixHTTPConnection
    from memcli.config import load_settings
    from memcli.core.locations import shown
    from memcli.service.daemon import paths

    settings = load_settings(db)
    ep = (paths.endpoint_for_socket(socket.absolute()) if socket is not None
          else paths.endpoint(settings.db))
    where = f" on {ep.socket}" if socket is not None else ""
    conn = UnixHTTPConnection(ep.http_socket, timeout=10.0)
    try:
        conn.request("POST", "/ui/login-link", body=b"", headers={"Host": "localhost"})
        response = conn.getresponse()
        status, body = response.status, response.read()
    except paths.UntrustedSocket as exc:
        raise MemcliError(str(exc), "only a daemon of yours is asked") from None
    except OSError:
        raise _no_answer(ep, f"{shown(settings.db)}{where}") from None
    except http.client.HTTPException as exc:
        raise MemcliError(f"the daemon did not answer: {exc}", START_HINT) from None
    finally:
        conn.close()
    try:
        answer = json.loads(body)
    except ValueError:
        answer = {}
    if status == 409:  # it runs, without a TCP port: a browser cannot reach it
        raise MemcliError("the daemon serves no TCP port, and a browser cannot open its Unix "
                          "socket", RESTART_HINT)
    if status != 200 or not isinstance(answer, dict) or "url" not in answer:
        error = answer.get("error") if isinstance(answer, dict) else None
        raise MemcliError(str(error or f"the daemon answered HTTP {status}"))
    return answer


def _no_answer(ep, what: str) -> MemcliError:
    """Nothing answered on the HTTP socket: no daemon, or one still starting (it holds the
    lock before it binds): never "start one" while one runs."""
    from memcli.service.daemon import main_process

    state = main_process.status(ep)
    if state["running"]:
        return MemcliError(f"the daemon serving {what} (pid {state['pid']}) is not answering "
                           "yet", "it is starting or stopping; run `memcli ui` again in a moment")
    return MemcliError(f"no daemon serves {what}", START_HINT)


def register(app: typer.Typer) -> None:
    app.command("ui")(ui_cmd)
