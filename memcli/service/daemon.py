"""`memcli serve`: one long-running process per database, owning it and keeping models warm.

Start: take the lock beside the socket (flock; a second `serve` on the same database exits 75
naming the pid; a lock left by a killed daemon is free again, so its stale socket is simply
replaced), write the pidfile, bind the CLI socket (0600) and, when the HTTP app is available,
its unix socket (and TCP with `--port`), then load the configured models in the background.
Stop (SIGTERM, SIGINT or `--idle-exit`): stop accepting, let requests in flight finish (at most
`grace` seconds), checkpoint the WAL (TRUNCATE, bounded; a SQLite file) or close the
connection pool (PostgreSQL), remove socket and pidfile, exit 0. What the daemon holds open for
its database, per engine, is memcli/service/holder.py.

The main thread runs the HTTP server (uvicorn needs it for its signal handling), or just waits;
the CLI socket is served by threads.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcli.errors import MemcliError, UsageError
from memcli.service import paths, runctx
from memcli.service.holder import FileHolder, PoolHolder, hold
from memcli.service.server import CliServer, bind_unix


class AlreadyServing(MemcliError):
    exit_code = 75


@dataclass
class State:
    """What `memcli serve status` reports, kept by the running daemon (None elsewhere)."""

    db: str
    ep: paths.Endpoint
    started: float = field(default_factory=time.time)
    models_ready: threading.Event = field(default_factory=threading.Event)
    cli: CliServer | None = None
    activity: Activity | None = None
    http: str | None = None
    holder: FileHolder | PoolHolder | None = None


_STATE: State | None = None


def status(ep: paths.Endpoint) -> dict[str, Any]:
    """The state of the daemon of `ep`: this process's own when it is that daemon (`serve
    status` is forwarded to it), else whether another process holds its lock."""
    state = _STATE
    if state is not None and state.ep.socket == ep.socket:
        served = (state.cli.served if state.cli else 0) + (
            state.activity.http_requests if state.activity else 0)
        return {"running": True, "pid": os.getpid(), "db": state.db, "socket": ep.socket,
                "http_socket": ep.http_socket if state.http is not None else None,
                "http_url": state.http or None, "models_ready": state.models_ready.is_set(),
                "requests": served, "uptime_s": round(time.time() - state.started, 1),
                **({"pool": pool} if (pool := state.holder and state.holder.stats()) else {})}
    pid = _lock_holder(ep)
    return {"running": pid is not None, "pid": pid, "socket": ep.socket, "answered": False}


def _lock_holder(ep: paths.Endpoint) -> int | None:
    """The pid in the pidfile when a process holds the daemon lock, else None."""
    try:
        fd = os.open(ep.lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            return int(Path(ep.pid).read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return -1
    finally:
        os.close(fd)
    return None


@dataclass
class HttpOptions:
    port: int | None = None
    host: str = "127.0.0.1"
    token_file: Path | None = None
    no_token: bool = False


class Activity:
    """When the last request ended, and how many run now (CLI socket and HTTP together)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last = time.monotonic()
        self.running = 0
        self.http_requests = 0

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        with self._lock:
            self.running += 1
            self.http_requests += 1
        try:
            yield
        finally:
            with self._lock:
                self.running -= 1
                self.last = time.monotonic()

    def touch(self) -> None:
        with self._lock:
            self.last = time.monotonic()

    def idle_for(self) -> float:
        with self._lock:
            return 0.0 if self.running else time.monotonic() - self.last


def take_lock(ep: paths.Endpoint) -> int:
    """Hold the daemon lock of `ep` (an open fd, kept until exit) and write the pidfile."""
    fd = os.open(ep.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:
            pid = Path(ep.pid).read_text(encoding="ascii").strip() or "?"
        except OSError:
            pid = "?"
        raise AlreadyServing(f"memcli serve is already running for this database (pid {pid})",
                             f"socket {ep.socket}; stop it with `kill {pid}`") from None
    tmp = Path(ep.pid + ".tmp")
    tmp.write_text(f"{os.getpid()}\n", encoding="ascii")
    os.replace(tmp, ep.pid)
    return fd


def warm_up(settings: Any, log: Callable[[str], None], ready: threading.Event) -> None:
    """Import the command modules and load the configured models, so the first request is
    warm. Failures are left to the request that needs the model (it reports them)."""
    try:
        import memcli.cli.app  # noqa: F401 - every command group
        import memcli.cli.run  # noqa: F401
        from memcli.memory import make_embedder, make_sparse
        from memcli.tokens import get_encoding

        for model in (make_sparse(settings), make_embedder(settings)):
            load = getattr(model, "load", None)
            if callable(load):
                load()
        get_encoding(settings.encoding)
    except Exception as exc:  # noqa: BLE001 - a warm-up only
        log(f"memcli: warning: warm-up incomplete: {exc}".splitlines()[0])
    ready.set()


def _tcp_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
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


class HttpServer:
    """uvicorn serving memcli.service.http's app on the daemon's HTTP unix socket (and TCP).
    Everything HTTP is behind this class: `build()` returns None when the HTTP app is not
    installed (then `--port` is refused)."""

    def __init__(self, server: Any, sockets: list[socket.socket]) -> None:
        self.server = server
        self.sockets = sockets

    @classmethod
    def build(cls, settings: Any, ep: paths.Endpoint, opts: HttpOptions, activity: Activity,
              grace: float, log: Callable[[str], None]) -> HttpServer | None:
        try:
            import uvicorn

            from memcli.service.auth import load_auth
            from memcli.service.http import build_app
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
        app = _tracked(build_app(settings, auth), activity)
        sockets = [bind_unix(Path(ep.http_socket))]
        if opts.port is not None:
            try:
                sockets.append(_tcp_socket(opts.host, opts.port))
            except MemcliError:
                sockets[0].close()  # serve() removes its file
                raise
        config = uvicorn.Config(app, log_level="warning", lifespan="auto",
                                timeout_graceful_shutdown=int(grace) or 1)
        return cls(uvicorn.Server(config), sockets)

    @property
    def tcp_address(self) -> str | None:
        for sock in self.sockets:
            if sock.family != socket.AF_UNIX:
                host, port = sock.getsockname()[:2]
                return f"http://{host}:{port}"
        return None

    def run(self) -> None:
        import asyncio

        asyncio.run(self.server.serve(sockets=self.sockets))

    def stop(self) -> None:
        self.server.should_exit = True


def _tracked(app: Any, activity: Activity) -> Any:
    """The ASGI app, counting HTTP requests as activity (for --idle-exit)."""
    async def tracked(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await app(scope, receive, send)
            return
        with activity.request():
            await app(scope, receive, send)

    return tracked


def serve(settings: Any, ep: paths.Endpoint, *, idle_exit: float | None = None,
          grace: float = 30.0, http: HttpOptions | None = None,
          log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
          pool_size: int | None = None) -> int:
    """Run the daemon until a signal or the idle timeout; the exit code (0)."""
    lock_fd = take_lock(ep)
    stop = threading.Event()
    activity = Activity()
    cli: CliServer | None = None
    web: HttpServer | None = None
    keeper: FileHolder | PoolHolder | None = None

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()
        if web is not None:  # read when the signal comes: None until the server is built
            web.stop()

    # Before anything listens: a SIGTERM during start-up is a clean stop, never the default
    # abrupt exit (a client may already be connected once the socket exists).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        runctx.install()
        keeper = hold(settings, pool_size)

        def on_request() -> None:
            activity.touch()
            keeper.ensure()

        cli = CliServer(Path(ep.socket), on_request=on_request)
        web = HttpServer.build(settings, ep, http or HttpOptions(), activity, grace, log)
        if stop.is_set() and web is not None:
            # A signal came while the server was being built (importing uvicorn takes
            # seconds on a loaded machine, and clients may already see the CLI socket): the
            # handler found no server to stop, so stop it now, or uvicorn would serve on.
            web.stop()
        global _STATE
        _STATE = State(db=_shown_db(settings.db), ep=ep, cli=cli, activity=activity,
                       http=(web.tcp_address or "") if web is not None else None, holder=keeper)
        threading.Thread(target=warm_up, args=(settings, log, _STATE.models_ready),
                         name="memcli-warm-up", daemon=True).start()
        cli.start()
        where = f"{ep.socket}" + (f" and {web.tcp_address}" if web and web.tcp_address else "")
        log(f"memcli: serving {_shown_db(settings.db)} on {where} (pid {os.getpid()})")
        idle = threading.Thread(target=_idle_watch, name="memcli-idle", daemon=True,
                                args=(stop, web, cli, activity, idle_exit))
        idle.start()
        if web is not None:
            web.run()
            stop.set()
        while not stop.wait(0.5):
            pass
        return _shutdown(cli, grace, log, keeper)
    finally:
        if cli is not None:
            cli.close()
        if keeper is not None:
            keeper.close()  # a second close is a no-op; here for a start that failed midway
        for path in (ep.socket, ep.http_socket, ep.pid):
            with contextlib.suppress(OSError):
                os.unlink(path)
        os.close(lock_fd)


def _idle_watch(stop: threading.Event, web: HttpServer | None, cli: CliServer,
                activity: Activity, minutes: float | None) -> None:
    if not minutes:
        return
    while not stop.wait(min(1.0, minutes * 60 / 4)):
        if cli.active == 0 and activity.idle_for() >= minutes * 60:
            stop.set()
            if web is not None:
                web.stop()
            return


def _shown_db(location: str) -> str:
    """The database as logs and `serve status` show it (a server URL's password masked)."""
    from memcli.service.holder import is_server

    if not is_server(location):
        return location
    from memcli.store.postgres.connection import masked

    return masked(location)


def _shutdown(cli: CliServer, grace: float, log: Callable[[str], None],
              keeper: FileHolder | PoolHolder) -> int:
    cli.close()
    if not cli.wait_idle(grace):
        log(f"memcli: warning: {cli.active} request(s) still running after {grace:g} s; "
            "exiting anyway (their transactions roll back)")
    keeper.close()
    log("memcli: serve stopped")
    return 0
