"""The databases the daemon's HTTP process holds open, and which one an HTTP request is for.

A request names its database with the header `X-Memcli-Db: <location>`: a file's absolute
path (its real path is what counts, so a link and its target are one database) or a
PostgreSQL location; without it, the daemon's default database (`load_settings()` in the
daemon's environment). Per database this process keeps, made on first use from that
database's settings (`load_settings(location)`):

- its holder (memcli/service/holder.py): the idle SQLite connection that keeps the WAL, or the
  PostgreSQL pool its requests borrow from;
- its app (memcli.service.http.fastapi_app: the API, MCP over HTTP, the pages), with its own
  open Service; the app's lifespan (the MCP session manager) runs in this process's task group.

Two ways to serve (`all_databases`):

- per database (`memcli serve [--db X]`): one database for the process's life; a header naming
  another database is refused with 421 Misdirected Request (the request reached a daemon that
  cannot answer for it; the client's rule sends it to that database's daemon or the user's).
- every database (`memcli serve --all-databases`): any database a request names, on the
  0600 unix socket only; a TCP port (token-guarded) serves only the default database, as a
  per-database daemon does (421 for another). A database is closed (its app stopped after the
  requests in flight, its holder closed: WAL checkpoint) when the main process says so
  (`close`), or when neither a command (`touch`) nor an HTTP request used it for `idle_close`
  seconds: one rule, whichever comes first.

A header that is not a location (relative path, NUL byte, another URL scheme, repeated) is 400;
a database that cannot be opened (no such folder, not a database, unreadable) 404; both with
the one-line JSON error of every other refusal, never a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
from starlette.responses import JSONResponse
from starlette.routing import Router

from memcli.config import load_settings
from memcli.core.locations import is_postgres, is_url, shown
from memcli.errors import DatabaseBusyError, MemcliError
from memcli.service.daemon import paths
from memcli.service.holder import FileHolder, PoolHolder, check_openable, hold

HEADER = b"x-memcli-db"
IDLE_CLOSE = 15 * 60.0  # seconds a database of the user's daemon stays open unused
SWEEP_EVERY = 30.0  # seconds between two looks for databases unused that long


class Refused(Exception):
    """A request this process cannot answer for its database: the status and one line."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.error, "exit_code": 2}, status_code=self.status)


def location(value: str) -> str:
    """The database a header names, as this process keys it: a file's real path, a
    PostgreSQL location as given. Refused (400) when it is not a location at all."""
    if "\x00" in value:
        raise Refused(400, "the X-Memcli-Db header holds a NUL byte")
    if not value.strip():
        raise Refused(
            400, "the X-Memcli-Db header is empty (leave it out for the default database)"
        )
    if is_postgres(value):
        return value
    if is_url(value):
        raise Refused(
            400,
            f"X-Memcli-Db names a URL memcli cannot open: {shown(value)} (a file's "
            "absolute path or a postgresql:// location)",
        )
    if not os.path.isabs(value):
        raise Refused(400, f"X-Memcli-Db must be an absolute path, not {value!r}")
    return os.path.realpath(value)


def _named(scope: dict[str, Any]) -> str | None:
    """The request's X-Memcli-Db header (its bytes as a file name's), None when absent."""
    found = [value for name, value in scope.get("headers", ()) if name.lower() == HEADER]
    if len(found) > 1:
        raise Refused(400, "more than one X-Memcli-Db header")
    return os.fsdecode(found[0]) if found else None


def _on_unix_socket(scope: dict[str, Any]) -> bool:
    # uvicorn gives a unix socket's server as (path, None), a TCP one as (host, port).
    server = scope.get("server")
    return server is not None and server[1] is None


@dataclass(eq=False)
class Served:
    """One database this process holds: its holder, its app once HTTP used it."""

    key: str  # memcli/service/daemon/paths.py's db_key: one per database, whatever the spelling
    location: str
    settings: Any
    holder: FileHolder | PoolHolder
    app: Any = None
    running: int = 0  # HTTP requests in flight
    last: float = field(default_factory=time.monotonic)  # last use: a command or a request
    ready: bool = False  # its app's lifespan has started
    closing: bool = False
    finishing: bool = False
    stop: anyio.Event | None = None  # set: the app's lifespan ends
    ended: anyio.Event | None = None
    starting: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed: threading.Event = field(default_factory=threading.Event)


class Databases:
    """The ASGI app of the HTTP process: each request handed to its database's app.

    `make_app(settings, default)`: the app of one database (None: this process serves no HTTP
    and only holds). `report(line)`: `O<location>` when a database is opened here, `C<location>`
    when closed (the main process may list them in `serve status`). Thread-safe: the control
    thread calls `touch` and `close`, uvicorn's loop serves the requests."""

    def __init__(
        self,
        settings: Any,
        make_app: Callable[[Any, bool], Any] | None,
        *,
        all_databases: bool = False,
        pool_size: int | None = None,
        idle_close: float | None = IDLE_CLOSE,
        report: Callable[[bytes], None] = lambda _line: None,
        log: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self.make_app, self.all_databases, self.pool_size = make_app, all_databases, pool_size
        self.idle_close = idle_close if all_databases else None
        self.report, self.log = report, log
        self._lock = threading.Lock()
        self._served: dict[str, Served] = {}
        self._closing: dict[str, Served] = {}
        self._making: dict[str, threading.Lock] = {}
        self._tasks: anyio.abc.TaskGroup | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._router = Router(lifespan=lambda _app: self.running())
        # The default database as today: held from the start (a PostgreSQL server that cannot
        # be reached ends a per-database daemon's HTTP process now, not at the first request;
        # the user's daemon serves the other databases on, and tries it again when named).
        default = os.fspath(settings.db)
        if not is_postgres(default):
            default = os.path.realpath(default)
        self.default_location, self.default_key = default, paths.db_key(default)
        self.default_settings = settings
        try:
            served = self._add(
                Served(self.default_key, default, settings, hold(settings, pool_size))
            )
        except MemcliError as exc:
            if not all_databases:
                raise
            log(f"memcli: warning: not holding {shown(default)}: {exc}".splitlines()[0])
        else:
            if make_app is not None:
                served.app = make_app(settings, True)

    # -- what the main process says (any thread) ---------------------------------------------
    def touch(self, where: str | None) -> None:
        """A command used the database (`e<location>`): hold it open, mark it used."""
        try:
            served = self.held(where) if where else self._default()
        except Refused as exc:
            # Another database's command (421), or one the command itself reports (400, 404):
            # only what the command cannot have said goes to the daemon's log.
            if exc.status >= 500:
                named = shown(where or self.default_location)
                self.log(f"memcli: warning: not holding {named}: {exc.error}")
            return
        served.holder.ensure()
        served.last = time.monotonic()

    def close(self, where: str) -> None:
        """Close a database (`c<location>`) once its requests in flight are done: its app
        stopped, its holder closed (WAL checkpoint). The per-database daemon keeps its one."""
        try:
            key = paths.db_key(location(where) if not is_postgres(where) else where)
        except Refused:
            return
        self._close_key(key)

    def close_all(self) -> None:
        """At the process's end, after the server stopped: every holder closed."""
        with self._lock:
            served = [*self._served.values(), *self._closing.values()]
            self._served.clear()
        for entry in served:
            self._close_holder(entry)

    def stats(self) -> dict[str, int] | None:
        """The PostgreSQL pools' figures, summed (None: no pool)."""
        with self._lock:
            figures = [s for e in self._served.values() if (s := e.holder.stats())]
        if not figures:
            return None
        return {key: sum(f.get(key, 0) for f in figures) for key in figures[0]}

    def open_locations(self) -> list[str]:
        with self._lock:
            return sorted(e.location for e in self._served.values())

    # -- holding -------------------------------------------------------------------------------
    def held(self, where: str) -> Served:
        """The database `where` (a header's or a control line's location), held open; made
        now when it is not (blocking: call it off the event loop)."""
        found, key, served = self._lookup(where)
        if served is not None:
            return served
        with self._lock:
            making = self._making.setdefault(key, threading.Lock())
        try:
            with making:
                with self._lock:
                    served, closing = self._served.get(key), self._closing.get(key)
                if served is not None:
                    return served
                if closing is not None:  # its checkpoint first: one holder at a time
                    closing.closed.wait()
                served = self._add(Served(key, found, *self._open(where, found)))
        finally:
            with self._lock:
                if self._making.get(key) is making:
                    del self._making[key]
        self.report(b"O" + os.fsencode(found))
        return served

    def _lookup(self, where: str) -> tuple[str, str, Served | None]:
        """(location, key, the database when it is held): quick, for the event loop too."""
        found = location(where)
        key = paths.db_key(found)
        if not self.all_databases and key != self.default_key:
            raise Refused(
                421,
                f"this daemon serves {shown(self.default_settings.db)} only, not "
                f"{shown(where)} (a per-database `memcli serve`)",
            )
        with self._lock:
            return found, key, self._served.get(key)

    def _open(self, where: str, found: str) -> tuple[Any, FileHolder | PoolHolder]:
        """A database's settings and holder, or why it cannot be opened (404; busy 503)."""
        try:
            settings = load_settings(found)
            check_openable(settings)
            return settings, hold(settings, self.pool_size)
        except DatabaseBusyError as exc:
            raise Refused(503, f"cannot open {shown(where)}: {exc}") from None
        except (MemcliError, OSError) as exc:
            raise Refused(404, f"cannot open {shown(where)}: {str(exc).splitlines()[0]}") from None

    def _default(self) -> Served:
        with self._lock:
            served = self._served.get(self.default_key)
        return served if served is not None else self.held(self.default_location)

    def _add(self, served: Served) -> Served:
        with self._lock:
            self._served[served.key] = served
        return served

    def _close_key(self, key: str) -> None:
        with self._lock:
            served = self._served.get(key)
            if served is None or not self.all_databases:
                return
            del self._served[key]
            self._closing[key] = served
            served.closing = True
            finish = served.running == 0 and not served.finishing
            served.finishing = served.finishing or finish
        if finish:
            self._finish_soon(served)

    def _finish_soon(self, served: Served) -> None:
        """Stop its app and close its holder: in the event loop when one runs, else here."""
        loop = self._loop
        if loop is not None:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop and self._tasks is not None:
                self._tasks.start_soon(self._finish, served)
                return
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: below
                asyncio.run_coroutine_threadsafe(self._finish_in_loop(served), loop)
                return
        self._close_holder(served)

    async def _finish_in_loop(self, served: Served) -> None:
        # A task of the loop now (anyio's task group takes new tasks from tasks only).
        if self._tasks is not None:
            self._tasks.start_soon(self._finish, served)
        else:  # the server stopped meanwhile: its app with it
            await anyio.to_thread.run_sync(self._close_holder, served)

    async def _finish(self, served: Served) -> None:
        async with served.starting:  # an app being started is stopped once it runs
            if served.stop is not None and served.ended is not None:
                served.stop.set()
                await served.ended.wait()
        await anyio.to_thread.run_sync(self._close_holder, served)

    def _close_holder(self, served: Served) -> None:
        try:
            served.holder.close()
        except Exception as exc:  # noqa: BLE001 - one database's failure ends no other's
            self.log(f"memcli: warning: closing {shown(served.location)}: {exc}".splitlines()[0])
        with self._lock:
            if self._closing.get(served.key) is served:
                del self._closing[served.key]
        served.closed.set()
        if served.closing:
            self.report(b"C" + os.fsencode(served.location))

    # -- serving -------------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._router.lifespan(scope, receive, send)
            return
        try:
            served = await self._acquire(scope)
        except Refused as exc:
            if scope["type"] == "http":
                await exc.response()(scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        try:
            await served.app(scope, receive, send)
        finally:
            self._release(served)

    async def _acquire(self, scope: dict[str, Any]) -> Served:
        """The database of a request, its app running, counted in flight."""
        named = _named(scope)
        if named is None:
            where = self.default_location
        elif self.all_databases and not _on_unix_socket(scope):
            where = location(named)
            if paths.db_key(where) != self.default_key:
                raise Refused(
                    421,
                    "a TCP port serves its own database only (send the request "
                    "to the daemon's unix socket)",
                )
        else:
            where = named
        while True:
            if named is None:  # the common case of a per-database daemon: no path to resolve
                with self._lock:
                    served = self._served.get(self.default_key)
            else:
                served = self._lookup(where)[2]
            if served is None:
                served = await anyio.to_thread.run_sync(self.held, where)
            if not served.ready:
                await self._start(served)
            with self._lock:
                if not served.closing:
                    served.running += 1
                    served.last = time.monotonic()
                    return served

    def _release(self, served: Served) -> None:
        with self._lock:
            served.running -= 1
            served.last = time.monotonic()
            finish = served.closing and served.running == 0 and not served.finishing
            served.finishing = served.finishing or finish
        if finish:
            self._finish_soon(served)

    async def _start(self, served: Served) -> None:
        """Make the database's app and run its lifespan in this process's task group."""
        async with served.starting:
            if served.ready or served.closing:
                return
            if self._tasks is None:
                raise Refused(503, "the HTTP server is not running (starting or stopping)")
            try:
                if served.app is None and self.make_app is not None:
                    served.app = await anyio.to_thread.run_sync(
                        self.make_app, served.settings, served.key == self.default_key
                    )
                await self._tasks.start(self._life, served)
            except Exception as exc:  # noqa: BLE001 - this database's; one line, not a 500
                raise Refused(
                    503, f"cannot serve {shown(served.location)}: {exc}".splitlines()[0]
                ) from None
            served.ready = True

    async def _life(
        self, served: Served, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        served.stop, served.ended = anyio.Event(), anyio.Event()
        started = False
        try:
            async with served.app.router.lifespan_context(served.app):
                task_status.started()
                started = True
                await served.stop.wait()
        except Exception as exc:
            if not started:  # its start failed: the request that started it says so
                raise
            self.log(  # its database closes; the others serve on
                f"memcli: warning: the app of {shown(served.location)} stopped: {exc}".splitlines()[
                    0
                ]
            )
        finally:
            served.ended.set()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The server's lifespan: the default database's app started, the others on first
        use; on the way out every app stopped (their holders close in `close_all`)."""
        async with anyio.create_task_group() as tasks:
            self._tasks, self._loop = tasks, asyncio.get_running_loop()
            sweeper = anyio.CancelScope()
            if self.idle_close:
                tasks.start_soon(self._sweep, sweeper)
            try:
                default = self._served.get(self.default_key)
                if default is not None:
                    await self._start(default)
                yield
            finally:
                sweeper.cancel()
                with self._lock:
                    served = [*self._served.values()]
                for entry in served:
                    if entry.stop is not None:
                        entry.stop.set()
                self._tasks = None
        self._loop = None

    async def _sweep(self, scope: anyio.CancelScope) -> None:
        """Close the databases unused for `idle_close` seconds (no request in flight)."""
        assert self.idle_close
        with scope:
            while True:
                await anyio.sleep(min(SWEEP_EVERY, self.idle_close / 4))
                now = time.monotonic()
                with self._lock:
                    idle = [
                        key
                        for key, s in self._served.items()
                        if s.running == 0 and now - s.last >= self.idle_close
                    ]
                for key in idle:
                    self._close_key(key)
