"""`memcli serve`: one long-running process per database, owning it and keeping models warm.

Start: take the lock beside the socket (flock; a second `serve` on the same database exits 75
naming the pid; a lock left by a killed daemon is free again, so its stale socket is simply
replaced), write the pidfile, bind the CLI socket (0600) and, when the HTTP app is available,
its unix socket (and TCP with `--port`), then load the configured models in the background.
Stop (SIGTERM, SIGINT or `--idle-exit`): stop accepting, let requests in flight finish (at most
`grace` seconds), checkpoint the WAL (TRUNCATE, bounded), remove socket and pidfile, exit 0.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memcli.errors import MemcliError, UsageError
from memcli.service import paths, runctx
from memcli.service.server import CliServer, bind_unix

CHECKPOINT_WAIT = 5.0  # seconds the exit's WAL checkpoint may wait for other connections


class AlreadyServing(MemcliError):
    exit_code = 75


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

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        with self._lock:
            self.running += 1
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


def warm_up(settings: Any, log: Callable[[str], None]) -> None:
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


def _tcp_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}",
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
              grace: float) -> HttpServer | None:
        try:
            import uvicorn

            from memcli.service.auth import load_auth
            from memcli.service.http import build_app
        except ImportError as exc:
            if opts.port is not None:
                raise UsageError(f"the HTTP API is not available ({exc})",
                                 "install memcli with its service dependencies") from exc
            return None
        auth = load_auth(host=opts.host, port=opts.port, token_file=opts.token_file,
                         no_token=opts.no_token, settings=settings)
        app = _tracked(build_app(settings, auth), activity)
        sockets = [bind_unix(Path(ep.http_socket))]
        if opts.port is not None:
            sockets.append(_tcp_socket(opts.host, opts.port))
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
          ) -> int:
    """Run the daemon until a signal or the idle timeout; the exit code (0)."""
    lock_fd = take_lock(ep)
    stop = threading.Event()
    activity = Activity()
    cli: CliServer | None = None
    web: HttpServer | None = None
    try:
        runctx.install()
        cli = CliServer(Path(ep.socket), on_request=activity.touch)
        web = HttpServer.build(settings, ep, http or HttpOptions(), activity, grace)
        threading.Thread(target=warm_up, args=(settings, log), name="memcli-warm-up",
                         daemon=True).start()

        def on_signal(signum: int, _frame: Any) -> None:
            stop.set()
            if web is not None:
                web.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        cli.start()
        where = f"{ep.socket}" + (f" and {web.tcp_address}" if web and web.tcp_address else "")
        log(f"memcli: serving {settings.db} on {where} (pid {os.getpid()})")
        idle = threading.Thread(target=_idle_watch, name="memcli-idle", daemon=True,
                                args=(stop, web, cli, activity, idle_exit))
        idle.start()
        if web is not None:
            web.run()
            stop.set()
        while not stop.wait(0.5):
            pass
        return _shutdown(settings, ep, cli, grace, log)
    finally:
        if cli is not None:
            cli.close()
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


def _shutdown(settings: Any, ep: paths.Endpoint, cli: CliServer, grace: float,
              log: Callable[[str], None]) -> int:
    from memcli.store.writers import checkpoint_wal

    cli.close()
    if not cli.wait_idle(grace):
        log(f"memcli: warning: {cli.active} request(s) still running after {grace:g} s; "
            "exiting anyway (their transactions roll back)")
    if Path(settings.db).exists():
        checkpoint_wal(str(settings.db), CHECKPOINT_WAIT)
    log("memcli: serve stopped")
    return 0
