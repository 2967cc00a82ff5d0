"""`memcli serve`: one long-running process per database, keeping models warm.

Start: take the lock beside the socket (flock; a second `serve` on the same database exits 75
naming the pid; a lock left by a killed daemon is free again, so its stale socket is simply
replaced), write the pidfile, open the database once (migrated; one that cannot be opened, or
made, ends the start with exit 1 and one line), bind the HTTP sockets (when the HTTP app is
available: its unix socket, and TCP with `--port`) and the CLI socket (0600), import every
command and load the configured models, then start the indexer's supervisor
(memcli/service/daemon/indexer.py: an indexer process, forked while a backlog exists, writes
vectors and sparse terms in the background and consolidates sessions on a switch), fork the
HTTP process (memcli/service/daemon/http_process.py) and serve the CLI socket, one forked process
per command (memcli/service/daemon/server.py, memcli/service/daemon/worker.py).
Stop (SIGTERM, as `memcli serve stop` sends it, SIGINT or `--idle-exit`): stop accepting and
serving HTTP, let commands in flight finish (at most `grace` seconds; then they are killed and
their transactions roll back), then the HTTP process checkpoints the WAL (TRUNCATE, bounded; a
SQLite file) or closes the connection pool (PostgreSQL) and exits; socket and pidfile are
removed, exit 0.

The main process is one select loop on one thread, so that it can fork: the CLI socket, the
HTTP process's reports, and the signals (`signal.set_wakeup_fd`). docs/design/daemon.md says
why a fork per command, and what it costs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcli.errors import MemcliError
from memcli.service.daemon import http_process, indexer, paths, worker
from memcli.service.daemon.http_process import HttpOptions, HttpPlan
from memcli.service.daemon.server import CliServer
from memcli.service.daemon.warm import status_models, warm_command, warm_up
from memcli.service.holder import is_server
from memcli.store.opener import open_database

__all__ = ["AlreadyServing", "HttpOptions", "serve", "status", "stop"]


class AlreadyServing(MemcliError):
    exit_code = 75


@dataclass
class State:
    """What `memcli serve status` reports, kept by the running daemon (None elsewhere). A
    command's process is a fork of the daemon: it reads the figures as they were at its start."""

    db: str
    ep: paths.Endpoint
    pid: int = field(default_factory=os.getpid)
    started: float = field(default_factory=time.time)
    models_ready: bool = False
    cli: CliServer | None = None
    http: str | None = None
    http_requests: int = 0
    http_running: int = 0
    last: float = field(default_factory=time.monotonic)
    pool: dict[str, Any] | None = None
    http_models: dict[str, str | None] | None = None  # role: query runtime, HTTP process's
    auto_started: bool = False  # by the CLI (memcli/service/daemon/autostart.py), not by hand
    idle_exit: float | None = None  # minutes
    settings: Any = None
    indexer: indexer.Supervisor | None = None

    def idle_for(self) -> float:
        busy = (self.http_running or (self.cli is not None and self.cli.active)
                or (self.indexer is not None and self.indexer.busy()))
        return 0.0 if busy else time.monotonic() - self.last


_STATE: State | None = None


def status(ep: paths.Endpoint) -> dict[str, Any]:
    """The state of the daemon of `ep`: the daemon's own when this process is a command it
    runs (`serve status` is forwarded to it), else whether another process holds its lock."""
    state = _STATE
    if state is not None and state.ep.socket == ep.socket:
        served = (state.cli.served if state.cli else 0) + state.http_requests
        return {"running": True, "answered": True, "pid": state.pid, "db": state.db,
                "socket": ep.socket,
                "http_socket": ep.http_socket if state.http is not None else None,
                "http_url": state.http or None,
                # Warm in every process: loaded by the main one, and the HTTP process's query
                # session built (memcli/service/daemon/warm.py), which costs CPU while it is built.
                "models_ready": state.models_ready and (state.http is None
                                                        or state.http_models is not None),
                "requests": served, "started_at": _iso(state.started),
                "uptime_s": round(time.time() - state.started, 1),
                "auto_started": state.auto_started, "idle_exit_min": state.idle_exit,
                "log": ep.log if state.auto_started else None,
                "models": status_models(state.settings, None if state.http is None
                                                else state.http_models or {}),
                **({"pool": state.pool} if state.pool else {}),
                **({"backlog": _backlog(state)} if state.indexer is not None else {})}
    pid = _lock_holder(ep)
    return {"running": pid is not None, "pid": pid, "socket": ep.socket, "answered": False}


def summary(ep: paths.Endpoint) -> dict[str, Any]:
    """The daemon as `memcli stats` shows it: whether one answers, and since when."""
    full = status(ep)
    keys = ("running", "answered", "pid", "started_at", "auto_started", "idle_exit_min")
    return {key: full.get(key) for key in keys}


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _backlog(state: State) -> dict[str, Any]:
    """The indexing backlog (memcli.service.daemon.indexer), read from the database by the command
    that asks (its counts are None when the database cannot be read yet)."""

    try:
        db = open_database(state.settings.db, readonly=True)
    except Exception:  # noqa: BLE001 - status answers anyway
        return indexer.backlog_status(None, state.settings, location=state.settings.db)
    try:
        return indexer.backlog_status(db, state.settings)
    finally:
        db.close()


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


def stop(ep: paths.Endpoint, wait: float) -> dict[str, Any]:
    """`memcli serve stop`: SIGTERM to the daemon of `ep` (its requests in flight finish, as
    on any stop), then wait at most `wait` seconds until it has released its lock. The pid
    comes from the pidfile, so only from a folder the trust rule accepts (another user's
    folder could name any process of this user's)."""
    folder = os.path.dirname(ep.pid)
    try:
        why = paths.folder_problem(folder)
    except OSError:
        why = None  # no folder: no daemon
    if why is not None:
        raise MemcliError(f"not using the daemon files in {folder} ({why})",
                          paths.remedy(folder))
    pid = _lock_holder(ep)
    if pid is not None and pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while pid is not None and _lock_holder(ep) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    running = pid is not None and _lock_holder(ep) is not None
    return {"stopped": pid is not None and not running, "running": running, "pid": pid,
            "socket": ep.socket}


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
                             f"socket {ep.socket}; stop it with `memcli serve stop` or "
                             f"`kill {pid}`") from None
    tmp = Path(ep.pid + ".tmp")
    tmp.write_text(f"{os.getpid()}\n", encoding="ascii")
    os.replace(tmp, ep.pid)
    return fd




def _check_database(settings: Any) -> None:
    """Before anything binds, say plainly why the database cannot be used (exit 1), rather
    than serve nothing: a PostgreSQL server gets memcli's tables (one plain connection), an
    existing file is opened (and migrated); a file not made yet is left to the first write,
    as in-process (a daemon started by a read creates no empty database), once its folder is
    there and a file can be made in it. Closed again: the main process forks and must hold no
    connection."""

    if is_server(settings.db) or os.path.exists(settings.db):
        open_database(settings.db, busy_timeout=settings.busy_timeout).close()
        return
    folder = os.path.dirname(os.path.abspath(settings.db))
    try:
        os.makedirs(folder, exist_ok=True)  # as the first write would
    except OSError as exc:
        raise MemcliError(f"cannot open {settings.db}: cannot create its folder "
                          f"({exc.strerror})", "check --db and the folder's permissions") from None
    probe = os.path.join(folder, f".{os.path.basename(settings.db)}.{os.getpid()}.probe")
    try:  # a file can be made there (root passes every permission check, not /proc's)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        os.unlink(probe)
    except OSError as exc:
        raise MemcliError(f"cannot open {settings.db}: cannot create a file in its folder "
                          f"({exc.strerror})", "check --db and the folder's permissions") from None


class _Signals:
    """SIGTERM and SIGINT as a flag, every signal as a byte on a pipe the loop selects on."""

    def __init__(self) -> None:
        self.stop = False
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)
        signal.set_wakeup_fd(self.write_fd)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_stop)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the loop to reap

    def _on_stop(self, _signum: int, _frame: Any) -> None:
        self.stop = True

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self.read_fd, 512):
                pass


class _WebProcess:
    """The HTTP process (memcli/service/daemon/http_process.py) seen from the main process."""

    def __init__(self, pid: int, control: int, reports: int) -> None:
        self.pid, self.control, self.reports = pid, control, reports
        self.buffer = b""

    def order(self, what: bytes) -> None:
        if self.control >= 0:
            with contextlib.suppress(OSError):
                os.write(self.control, what)

    def read_reports(self, state: State) -> None:
        try:
            data = os.read(self.reports, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            os.close(self.reports)
            self.reports = -1
            return
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line == b"+":
                state.http_requests += 1
                state.http_running += 1
            elif line == b"-":
                state.http_running = max(0, state.http_running - 1)
                state.last = time.monotonic()
            elif line.startswith(b"P"):
                with contextlib.suppress(ValueError):
                    state.pool = json.loads(line[1:])
            elif line.startswith(b"Q"):
                with contextlib.suppress(ValueError):
                    state.http_models = json.loads(line[1:])

    def finish(self, wait: float, log: Callable[[str], None]) -> None:
        """Close the control pipe (the holder closes, the process exits) and wait for it."""
        if self.control >= 0:
            os.close(self.control)
            self.control = -1
        if self.pid <= 0:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    self.pid = 0
                    return
            except ChildProcessError:
                self.pid = 0
                return
            time.sleep(0.05)
        log("memcli: warning: the HTTP process did not stop in time; killed")
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        self.pid = 0


def _fork_web(settings: Any, plan: HttpPlan | None, pool_size: int | None, cli: CliServer,
              log: Callable[[str], None], *, all_databases: bool = False) -> _WebProcess:
    control_r, control_w = os.pipe()
    reports_r, reports_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    pid = os.fork()
    if pid == 0:
        try:
            cli.sock.close()
            for fd in (*cli.parent_fds, control_w, reports_r, cli.life_w, cli.life_r):
                with contextlib.suppress(OSError):
                    os.close(fd)
        finally:
            http_process.run(settings, plan, pool_size, control_r, reports_w, log,
                             all_databases=all_databases)
    os.close(control_r)
    os.close(reports_w)
    if plan is not None:
        plan.close()  # the HTTP process serves them; the commands' processes must not hold them
    os.set_blocking(reports_r, False)
    return _WebProcess(pid, control_w, reports_r)


def serve(settings: Any, ep: paths.Endpoint, runner: worker.Runner, warm: Callable[[], None],
          *, idle_exit: float | None = None, grace: float = 30.0,
          http: HttpOptions | None = None,
          log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
          pool_size: int | None = None, auto_started: bool = False) -> int:
    """Run the daemon until a signal or the idle timeout; the exit code (0). `runner` runs one
    command line (the CLI's in-process path), `warm` imports what it needs."""
    lock_fd = take_lock(ep)
    # Before anything listens: a SIGTERM during start-up is a clean stop, never the default
    # abrupt exit (a client may already be connected once the socket exists).
    signals = _Signals()
    cli: CliServer | None = None
    plan: HttpPlan | None = None
    web_proc: _WebProcess | None = None
    state: State | None = None
    try:
        _check_database(settings)
        plan = HttpPlan.prepare(settings, ep, http or HttpOptions(), grace, log)
        global _STATE
        state = _STATE = State(db=_shown_db(settings.db), ep=ep, settings=settings,
                               http=(plan.tcp_address or "") if plan is not None else None,
                               auto_started=auto_started, idle_exit=idle_exit or None)

        def on_request() -> None:
            state.last = time.monotonic()
            if web_proc is not None:
                web_proc.order(b"e\n")

        cli = state.cli = CliServer(Path(ep.socket), runner, on_request=on_request,
                                    warm=lambda: warm_command(settings))
        cli.parent_fds = [lock_fd, signals.read_fd, signals.write_fd]
        warm_up(settings, warm, log)
        state.models_ready = True
        state.indexer = indexer.Supervisor(
            lambda _location: settings, lambda: [*cli.parent_fds, cli.sock.fileno(), cli.life_w],
            cli.life_r, log, only=settings.db)
        cli.parent_fds.append(state.indexer.wake_read)
        state.indexer.check(settings.db)  # a backlog a killed daemon left is indexed now
        web_proc = _fork_web(settings, plan, pool_size, cli, log)
        cli.parent_fds += [web_proc.control, web_proc.reports]
        where = f"{ep.socket}" + (f" and {state.http}" if state.http else "")
        log(f"memcli: serving {_shown_db(settings.db)} on {where} (pid {os.getpid()})")
        _loop(state, cli, web_proc, signals, idle_exit)
        state.indexer.stop(grace, log)  # its connection closed before the WAL checkpoint
        return _shutdown(cli, web_proc, grace, log)
    finally:
        if state is not None and state.indexer is not None:
            state.indexer.stop(grace, log)
        if cli is not None:
            cli.close()
            cli.kill_all()
        if web_proc is not None:
            web_proc.finish(grace + 10, log)  # a start that failed midway
        elif plan is not None:
            plan.close()
        for path in (ep.socket, ep.http_socket, ep.pid):
            with contextlib.suppress(OSError):
                os.unlink(path)
        os.close(lock_fd)


def _loop(state: State, cli: CliServer, web_proc: _WebProcess, signals: _Signals,
          idle_minutes: float | None) -> None:
    """Accept commands, read the HTTP process's reports, reap; until a stop or the idle
    timeout."""
    index = state.indexer
    while not signals.stop:
        waiting = [*cli.waiting(), signals.read_fd]
        if web_proc.reports >= 0:
            waiting.append(web_proc.reports)
        index_fds = index.fds() if index is not None else []
        waiting += index_fds
        timeouts = [min(1.0, idle_minutes * 60 / 4) if idle_minutes else None, cli.timeout()]
        timeout = min((t for t in timeouts if t is not None), default=None)
        ready, _, _ = select.select(waiting, [], [], timeout)
        if signals.read_fd in ready:
            signals.drain()
        if web_proc.reports in ready:
            web_proc.read_reports(state)
        for fd in index_fds:
            if index is not None and fd in ready:
                index.on_ready(fd)
        if cli.reap():
            state.last = time.monotonic()
            web_proc.order(b"e\n")
        if not signals.stop:
            cli.serve(ready)  # a command's process: a spare took it, or forked for it
        if idle_minutes and state.idle_for() >= idle_minutes * 60:
            return


def _shutdown(cli: CliServer, web_proc: _WebProcess, grace: float,
              log: Callable[[str], None]) -> int:
    cli.close()
    web_proc.order(b"s\n")  # stop serving HTTP; requests in flight there finish
    if not cli.wait_idle(grace):
        log(f"memcli: warning: {cli.active} request(s) still running after {grace:g} s; "
            "exiting anyway (their transactions roll back)")
    cli.kill_all()
    web_proc.finish(grace + 10, log)  # then the holder closes: the WAL checkpoint
    log("memcli: serve stopped")
    return 0


def _shown_db(location: str) -> str:
    """The database as logs and `serve status` show it (a server URL's password masked)."""

    if not is_server(location):
        return location
    from memcli.store.postgres.connection import masked  # noqa: PLC0415 - psycopg, if used

    return masked(location)
