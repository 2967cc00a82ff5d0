"""`memcli serve`: one long-running process keeping models warm, for one database or for all.

Two kinds, one code path: per database (`memcli serve [--db X]`, by hand or systemd) and per
user (`--all-databases`, what the CLI starts by itself, memcli/service/daemon/autostart.py). The
user's daemon has no database of its own: it does not open one at start, its indexer
supervisor serves whichever database a wake line names, and it keeps the registry of the
databases its commands (and HTTP requests) named (memcli/service/daemon/registry.py), each
closed after `registry.DB_IDLE_CLOSE` seconds unused. What `serve status` shows is published
on a shared mmap (`registry.Board`), so a fork reads it current.

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

from memcli.service.daemon import http_process, indexer, paths, registry, worker
from memcli.service.daemon.http_process import HttpOptions, HttpPlan
from memcli.service.daemon.lines import Lines
from memcli.service.daemon.lock import (
    AlreadyServing,
    answering,
    check_database,
    lock_holder,
    stop,
    take_lock,
)
from memcli.service.daemon.registry import Board, Registry
from memcli.service.daemon.server import CliServer
from memcli.service.daemon.warm import status_models, warm_command, warm_up
from memcli.service.holder import is_server
from memcli.store.opener import open_database

__all__ = ["AlreadyServing", "HttpOptions", "answering", "serve", "status", "stop"]


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
    registry: Registry | None = None  # the user's daemon: the databases open
    board: Board | None = None  # what `serve status` reads, current in every fork

    def live(self) -> dict[str, Any]:
        """The changing part of the status, as the main process knows it now."""
        databases = self.registry.snapshot() if self.registry else None
        for entry in databases or []:
            if self.indexer is not None:  # its figures live here, in the main process
                entry["indexer"] = self.indexer.status(entry["db"])
        own = (self.indexer.status(str(self.settings.db))
               if self.indexer is not None and self.registry is None else None)
        return {"requests": (self.cli.served if self.cli else 0) + self.http_requests,
                "http_models": self.http_models, "pool": self.pool, "databases": databases,
                "indexer": own}

    def publish(self) -> None:
        if self.board is not None:
            self.board.publish(self.live())

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
        live = (state.board.read() if state.board is not None else None) or state.live()
        http_models = live.get("http_models")
        out = {"running": True, "answered": True, "pid": state.pid,
               "db": None if state.registry is not None else state.db,
               "socket": ep.socket,
               "http_socket": ep.http_socket if state.http is not None else None,
               "http_url": state.http or None,
               # Warm in every process: loaded by the main one, and the HTTP process's query
               # session built (memcli/service/daemon/warm.py), which costs CPU while it is built.
               "models_ready": state.models_ready and (state.http is None
                                                       or http_models is not None),
               "requests": live.get("requests", 0), "started_at": _iso(state.started),
               "uptime_s": round(time.time() - state.started, 1),
               "auto_started": state.auto_started, "idle_exit_min": state.idle_exit,
               "log": ep.log if state.auto_started else None,
               "models": status_models(state.settings, None if state.http is None
                                       else http_models or {}),
               **({"pool": live["pool"]} if live.get("pool") else {}),
               **({"backlog": _backlog(state, live)} if state.registry is None
                  and state.indexer is not None else {})}
        if state.registry is not None:
            out["all_databases"] = True
            out["databases"] = [_database(state, entry) for entry in live.get("databases") or []]
        return out
    pid = lock_holder(ep)
    return {"running": pid is not None, "pid": pid, "socket": ep.socket, "answered": False}


def summary(ep: paths.Endpoint) -> dict[str, Any]:
    """The daemon as `memcli stats` shows it: whether one answers, and since when."""
    full = status(ep)
    keys = ("running", "answered", "pid", "started_at", "auto_started", "idle_exit_min")
    return {key: full.get(key) for key in keys}


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _database(state: State, entry: dict[str, Any]) -> dict[str, Any]:
    """One open database of the user's daemon as `serve status` lists it, its backlog read
    from the database itself (with the daemon's model settings: one configuration per
    daemon), its indexer's figures as the main process published them."""
    location = str(entry["db"])
    backlog = _read_backlog(state.settings.model_copy(update={"db": location}))
    if entry.get("indexer") is not None:
        backlog["indexer"] = entry["indexer"]
    return {"db": _shown_db(location),
            "last_used_s": round(max(0.0, time.time() - float(entry["last_used"])), 1),
            "requests": entry["requests"], "backlog": backlog}


def _backlog(state: State, live: dict[str, Any]) -> dict[str, Any]:
    """The indexing backlog (memcli.service.daemon.indexer), read from the database by the command
    that asks (its counts are None when the database cannot be read yet), its indexer's
    figures as the main process published them."""
    backlog = _read_backlog(state.settings)
    if live.get("indexer") is not None:
        backlog["indexer"] = live["indexer"]
    return backlog


def _read_backlog(settings: Any) -> dict[str, Any]:
    try:
        db = open_database(settings.db, readonly=True)
    except Exception:  # noqa: BLE001 - status answers anyway
        return indexer.backlog_status(None, settings, location=settings.db)
    try:
        return indexer.backlog_status(db, settings)
    finally:
        db.close()


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
        self.lines = Lines(reports)

    def order(self, what: bytes) -> None:
        if self.control >= 0:
            with contextlib.suppress(OSError):
                os.write(self.control, what)

    def read_reports(self, state: State) -> None:
        lines = self.lines.read()
        if lines is None:
            os.close(self.reports)
            self.reports = -1
            return
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
            elif line.startswith(b"O") and len(line) > 1 and state.registry is not None:
                # An HTTP request named a database: open in the registry too (and its
                # indexer told), closed with the others once unused.
                _opened(state, [os.fsdecode(line[1:])])

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
          pool_size: int | None = None, auto_started: bool = False,
          all_databases: bool = False, db_idle_close: float | None = None,
          lock_fd: int | None = None) -> int:
    """Run the daemon until a signal or the idle timeout; the exit code (0). `runner` runs one
    command line (the CLI's in-process path), `warm` imports what it needs. `all_databases`:
    the user's daemon (`settings` gives its models; its database is not opened), each
    database closed after `db_idle_close` seconds unused (registry.DB_IDLE_CLOSE). `lock_fd`:
    the daemon lock handed on by the process that started this one (autostart.py)."""
    lock_fd = take_lock(ep, lock_fd)
    # Before anything listens: a SIGTERM during start-up is a clean stop, never the default
    # abrupt exit (a client may already be connected once the socket exists).
    signals = _Signals()
    cli: CliServer | None = None
    plan: HttpPlan | None = None
    web_proc: _WebProcess | None = None
    state: State | None = None
    try:
        if not all_databases:
            check_database(settings)
        plan = HttpPlan.prepare(settings, ep, http or HttpOptions(), grace, log)
        global _STATE
        state = _STATE = State(db=_shown_db(settings.db), ep=ep, settings=settings,
                               http=(plan.tcp_address or "") if plan is not None else None,
                               auto_started=auto_started, idle_exit=idle_exit or None)
        if all_databases:
            state.registry = Registry(db_idle_close if db_idle_close is not None
                                      else registry.DB_IDLE_CLOSE)
        state.board = Board()  # before any fork: every process shares it
        used = _used_order(settings, all_databases)

        def on_request() -> None:
            state.last = time.monotonic()
            if web_proc is not None and used:
                web_proc.order(used)

        cli = state.cli = CliServer(Path(ep.socket), runner, on_request=on_request,
                                    warm=lambda: warm_command(settings))
        cli.parent_fds = [lock_fd, signals.read_fd, signals.write_fd]
        if state.registry is not None:
            cli.reports = state.registry.write_fd
            cli.parent_fds.append(state.registry.read_fd)
        warm_up(settings, warm, log)
        state.models_ready = True
        # Per database: the daemon's; per user: any database, each read with the daemon's
        # model settings (one configuration per daemon, paths.user_key).
        state.indexer = indexer.Supervisor(
            (lambda location: settings.model_copy(update={"db": location})) if all_databases
            else (lambda _location: settings),
            lambda: [*cli.parent_fds, cli.sock.fileno(), cli.life_w],
            cli.life_r, log, only=None if all_databases else settings.db)
        cli.parent_fds.append(state.indexer.wake_read)
        if not all_databases:
            state.indexer.check(settings.db)  # a backlog a killed daemon left is indexed now
        web_proc = _fork_web(settings, plan, pool_size, cli, log, all_databases=all_databases)
        cli.parent_fds += [web_proc.control, web_proc.reports]
        state.publish()
        where = f"{ep.socket}" + (f" and {state.http}" if state.http else "")
        what = "every database" if all_databases else _shown_db(settings.db)
        log(f"memcli: serving {what} on {where} (pid {os.getpid()})")
        _loop(state, cli, web_proc, signals, idle_exit)
        if state.indexer is not None:
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
        if state is not None and state.registry is not None:
            state.registry.close()
        os.close(lock_fd)


def _loop(state: State, cli: CliServer, web_proc: _WebProcess, signals: _Signals,
          idle_minutes: float | None) -> None:
    """Accept commands, read the HTTP process's reports, reap; until a stop or the idle
    timeout."""
    index, opened = state.indexer, state.registry
    used = b"" if opened is not None else _used_order(state.settings, False)
    while not signals.stop:
        waiting = [*cli.waiting(), signals.read_fd]
        if web_proc.reports >= 0:
            waiting.append(web_proc.reports)
        index_fds = index.fds() if index is not None else []
        waiting += index_fds
        if opened is not None:
            waiting.append(opened.read_fd)
        timeouts = [_timeout(idle_minutes, opened), cli.timeout()]
        timeout = min((t for t in timeouts if t is not None), default=None)
        ready, _, _ = select.select(waiting, [], [], timeout)
        if signals.read_fd in ready:
            signals.drain()
        if web_proc.reports in ready:
            web_proc.read_reports(state)
        for fd in index_fds:
            if index is not None and fd in ready:
                index.on_ready(fd)
        if opened is not None:
            _databases(state, opened, web_proc, opened.read_fd in ready)
        if cli.reap():
            state.last = time.monotonic()
            if used:
                web_proc.order(used)
        if not signals.stop:
            cli.serve(ready)  # a command's process: a spare took it, or forked for it
        state.publish()
        if idle_minutes and state.idle_for() >= idle_minutes * 60:
            return


def _used_order(settings: Any, all_databases: bool) -> bytes:
    """The order that tells the HTTP process a command used the daemon's own database (`e`:
    its default one); none for the user's daemon, whose commands' reports name theirs."""
    return b"" if all_databases else b"e\n"


def _timeout(idle_minutes: float | None, opened: Registry | None) -> float | None:
    """How long the loop may sleep: a quarter of the idle exit (at most 1 s), and no longer
    than until the next database is to be closed."""
    timeout = min(1.0, idle_minutes * 60 / 4) if idle_minutes else None
    due = opened.next_close() if opened is not None else None
    if due is not None:
        timeout = due + 0.01 if timeout is None else min(timeout, due + 0.01)
    return timeout


def _databases(state: State, opened: Registry, web_proc: _WebProcess, readable: bool) -> None:
    """The user's daemon: databases the commands named are marked used (the HTTP process told
    `e<location>`), those unused for the registry's figure closed (`c<location>`)."""
    if readable:
        before = set(opened.open)
        used = opened.read_reports()
        if used:
            state.last = time.monotonic()
        for location in dict.fromkeys(used):
            web_proc.order(b"e" + os.fsencode(location) + b"\n")
            if location not in before and state.indexer is not None:
                state.indexer.check(location)  # what waits there (a killed daemon's backlog)
    for location in opened.close_idle():
        web_proc.order(b"c" + os.fsencode(location) + b"\n")
        if state.indexer is not None:
            state.indexer.forget(location)


def _opened(state: State, locations: list[str]) -> None:
    """Databases the HTTP process opened for a request: in the registry, their backlog
    checked once when new."""
    assert state.registry is not None
    for location in locations:
        new = location not in state.registry.open
        state.registry.use(location)
        if new and state.indexer is not None:
            state.indexer.check(location)


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
