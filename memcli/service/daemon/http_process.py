"""The daemon's second process: the HTTP API (and MCP, and the pages) and what it holds open.

`memcli serve`'s main process forks commands (memcli/service/daemon/server.py), so it must stay
single-threaded and hold no database connection. Everything that has threads or connections
lives here instead, in one process forked once at start (after the models are loaded, so it
shares them):

- uvicorn serving the daemon's HTTP unix socket (and TCP with `--port`). The sockets are bound
  and the access rules decided by the main process before it forks (`HttpPlan.prepare`), so a
  taken port or a missing dependency fails `serve` itself.
- per database, its holder (memcli/service/holder.py: the idle SQLite connection that keeps the
  WAL, or the PostgreSQL pool the HTTP requests borrow from; a forwarded command, a process of
  its own, opens its own connection, as the in-process command does) and its app
  (memcli.service.http.fastapi_app). A per-database daemon holds its one database; the user's
  daemon (`all_databases`) every database a command or a request names, each request by its
  `X-Memcli-Db` header (memcli/service/daemon/databases.py: which database, when one closes).

Control, lines on a pipe from the main process: `e<location>` (a command used that database:
hold it open; `e` alone: the default database), `c<location>` (close that database once its
requests in flight are done: app stopped, WAL checkpointed) and `s` (stop serving HTTP);
closing its end means "close every holder (WAL checkpoint) and exit", which it does once the
commands in flight are done. This process reports `+` / `-` around each HTTP request,
`P<json>` (the PostgreSQL pools' figures, summed) for the idle exit and `serve status`,
`Q<json>` once (the runtime that encodes its queries, memcli/service/daemon/warm.py), and
`O<location>` / `C<location>` when it opens or closes a database of its own accord (a
request named it; unused for a while).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from memcli.errors import MemcliError, UsageError
from memcli.service.daemon import paths
from memcli.service.daemon.server import bind_unix
from memcli.service.daemon.warm import warm_http_queries
from memcli.service.http.auth import load_auth


@dataclass
class HttpOptions:
    port: int | None = None
    host: str = "127.0.0.1"
    token_file: Path | None = None
    no_token: bool = False


def _tcp_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # TCP by name: asyncio turns Nagle off only on sockets whose proto says TCP (a plain
    # SOCK_STREAM's is 0), and the accepted sockets inherit the listener's. With Nagle on, a
    # response's body waited for the ACK of its headers, which the client delays: 40 ms on
    # every request of a kept-alive connection (a browser's second page, measured).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        # The environment refuses it (the port is taken, the address is not this host's):
        # a runtime failure, exit 1, like a database the environment refuses.
        raise MemcliError(f"cannot listen on {host}:{port}: {exc.strerror}",
                          "choose another --port or --host") from exc
    sock.listen(128)
    return sock


class HttpPlan:
    """The HTTP server to run: its access rules and bound sockets (made in the main process);
    `prepare()` returns None when the HTTP app is not installed (then `--port` is refused)."""

    def __init__(self, auth: Any, sockets: list[socket.socket], grace: float) -> None:
        self.auth = auth
        self.sockets = sockets
        self.grace = grace

    @classmethod
    def prepare(cls, settings: Any, ep: paths.Endpoint, opts: HttpOptions, grace: float,
                log: Callable[[str], None]) -> HttpPlan | None:
        try:
            import uvicorn  # noqa: F401, PLC0415 - imported here so that its absence is known now

            from memcli.service.http.fastapi_app import build_app  # noqa: F401, PLC0415 - the same
        except ImportError as exc:
            if opts.port is not None:
                raise UsageError(f"the HTTP API is not available ({exc})",
                                 "install memcli with its service dependencies") from exc
            return None
        # Only the 0600 unix socket: no token to make (the socket's mode is the access rule).
        unix_only = opts.port is None and opts.token_file is None
        auth = load_auth(host="127.0.0.1" if unix_only else opts.host, port=opts.port,
                         token_file=opts.token_file, no_token=opts.no_token or unix_only,
                         settings=settings)
        notice = getattr(auth, "notice", None)
        if notice and opts.port is not None:  # the unix socket needs no token
            log(f"memcli: {notice}")
        sockets = [bind_unix(Path(ep.http_socket))]
        if opts.port is not None:
            try:
                sockets.append(_tcp_socket(opts.host, opts.port))
            except MemcliError:
                sockets[0].close()  # serve() removes its file
                raise
        return cls(auth, sockets, grace)

    @property
    def tcp_address(self) -> str | None:
        for sock in self.sockets:
            if sock.family != socket.AF_UNIX:
                host, port = sock.getsockname()[:2]
                return f"http://{host}:{port}"
        return None

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


class Reporter:
    """Writes this process's reports to the main process (whole lines: atomic on a pipe)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.databases: Any = None

    def send(self, line: bytes) -> None:
        try:
            os.write(self.fd, line + b"\n")
        except OSError:  # the main process is gone
            pass

    def pool(self) -> None:
        stats = self.databases.stats() if self.databases is not None else None
        if stats:
            self.send(b"P" + json.dumps(stats).encode())


def _warm_queries(settings: Any, report: Reporter) -> None:
    """Build e5-small's onnxruntime session for this process's queries (HTTP and MCP), after
    the fork: the forked commands keep the engine (memcli/service/daemon/warm.py says why). A
    request that comes meanwhile waits for the model's lock, at most the ~0.4 s of the build."""

    report.send(b"Q" + json.dumps(warm_http_queries(settings)).encode())


def _tracked(app: Any, report: Reporter) -> Any:
    """The ASGI app, reporting HTTP requests (for the idle exit and `serve status`)."""
    async def tracked(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await app(scope, receive, send)
            return
        report.send(b"+")
        try:
            await app(scope, receive, send)
        finally:
            report.send(b"-")
            report.pool()

    return tracked


def run(settings: Any, plan: HttpPlan | None, pool_size: int | None, control: int,
        report_fd: int, log: Callable[[str], None], *, all_databases: bool = False,
        idle_close: float | None = None) -> NoReturn:
    """The whole life of the HTTP process (forked by the daemon); never returns.

    `all_databases`: serve every database a request names (the user's daemon), else only
    `settings.db`; `idle_close`: seconds after which the user's daemon closes a database
    nothing used (None: memcli/service/daemon/databases.py's IDLE_CLOSE; 0: only on the main
    process's `c` line)."""
    code = 0
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    os.setpgid(0, 0)  # a Ctrl-C at the daemon's terminal is the main process's to handle
    try:
        # Starlette and anyio: only this process needs them (`memcli stats` imports this module)
        from memcli.service.daemon.databases import Databases  # noqa: PLC0415

        report = Reporter(report_fd)
        databases = report.databases = Databases(
            settings, _app_maker(plan) if plan is not None else None,
            all_databases=all_databases, pool_size=pool_size, report=report.send, log=log,
            **({} if idle_close is None else {"idle_close": idle_close}))
        report.pool()
        server = None
        if plan is not None:
            threading.Thread(target=_warm_queries, args=(settings, report),
                             name="memcli-warm-queries", daemon=True).start()
            server = _uvicorn(databases, plan, report)
        stopping = threading.Event()
        closing = threading.Event()
        threading.Thread(target=_listen, args=(control, databases, server, stopping, closing),
                         name="memcli-control", daemon=True).start()
        if server is not None:
            asyncio.run(server.serve(sockets=plan.sockets))  # type: ignore[union-attr]
        closing.wait()
        databases.close_all()
    except BaseException as exc:  # noqa: BLE001 - reported in the daemon's log, one line
        log(f"memcli: warning: the HTTP process stopped: {exc}".splitlines()[0])
        code = 1
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


def _app_maker(plan: HttpPlan) -> Callable[[Any, bool], Any]:
    """The app of one database: the daemon's access rules; the pages' login links point at
    the TCP address, which serves the default database only."""
    # FastAPI: only a daemon that serves HTTP imports it
    from memcli.service.http.fastapi_app import build_app  # noqa: PLC0415

    def make(settings: Any, default: bool) -> Any:
        return build_app(settings, plan.auth, ui_url=plan.tcp_address if default else None)

    return make


def _uvicorn(app: Any, plan: HttpPlan, report: Reporter) -> Any:
    import uvicorn  # noqa: PLC0415 - only a daemon that serves HTTP imports it

    config = uvicorn.Config(_tracked(app, report),
                            log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=int(plan.grace) or 1)
    return uvicorn.Server(config)


def _listen(control: int, databases: Any, server: Any, stopping: threading.Event,
            closing: threading.Event) -> None:
    """Follow the main process's orders until it closes the pipe (or dies)."""
    buffer = b""
    while True:
        try:
            data = os.read(control, 65536)
        except OSError:
            data = b""
        *lines, buffer = (buffer + data).split(b"\n")
        for line in lines:
            order, where = line[:1], os.fsdecode(line[1:])
            if order == b"e":
                databases.touch(where or None)
            elif order == b"c" and where:
                databases.close(where)
            elif order == b"s":
                _stop_serving(server, stopping)
        if not data:
            _stop_serving(server, stopping)
            closing.set()
            return


def _stop_serving(server: Any, stopping: threading.Event) -> None:
    if not stopping.is_set():
        stopping.set()
        if server is not None:
            server.should_exit = True
