"""The daemon's indexer seen from its main process: one indexer process at a time, for every
database, forked when a backlog appears and gone when there has been none for a while.

Ingest inside the daemon (memcli.ingest.background) commits events, memories and full-text
rows, then writes a wake line naming the database on a pipe the supervisor made before any
fork (every command process and the HTTP process inherit its write end). While no indexer
runs, the main process watches the read end; when a line waits it forks one
(memcli/service/daemon/indexing.py), which inherits the read end and reads the lines itself,
so nothing is lost between the two. The indexer exits once every queue has been empty for
`IDLE_EXIT` seconds, giving back the memory its models took (docs/guides/indexing.md has the
figures); the next wake line forks a new one. An indexer that dies otherwise (killed, crashed)
is followed at once by a new one for the databases it had not finished (after a pause that
grows while they keep dying); what it had in hand is in the database still, so nothing is lost.

The main process's side, for the loop that owns it (memcli/service/daemon/main_process.py):

    sup = Supervisor(settings_for, close_in_child, life, log)  # before any fork
    sup.wake_read      # a fork of the main process (not the indexer) closes it
    sup.check(loc)     # a database opened: index what it may have waiting (a killed daemon's)
    select(... sup.fds() ...); sup.on_ready(fd) for each of them ready
    sup.busy()         # memories wait or sessions are queued: no idle exit of the daemon
    sup.status(loc)    # the indexer's figures for `serve status` / `stats`
    sup.forget(loc)    # a database closed: its figures go
    sup.stop(grace, log)

`memcli serve status` and `memcli stats` read the figures through `backlog_status`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from memcli.ingest import background
from memcli.operations.memory import make_sparse
from memcli.service.daemon import indexing
from memcli.service.daemon.lines import Lines
from memcli.store import backlog

IDLE_EXIT_ENV = "MEMCLI_INDEXER_IDLE_EXIT"  # seconds; for tests and measurements
_SUMMED = ("indexed", "consolidated")  # figures added up over the indexers a daemon forked

_CURRENT: Supervisor | None = None  # this process's supervisor (a fork reads its copy)


class Supervisor:
    """Forks the indexer when a wake line waits and none runs, reads its reports, stops it.

    `settings_for(location)`: a database's settings, called in the indexer (the daemon's
    `load_settings(location)`); `close_in_child()`: the main process's fds an indexer must not
    keep, asked at each fork; `life`: a pipe that reads EOF once the daemon is gone (the
    indexer then exits); `only`: the database of a per-database daemon (ingest into another
    one writes its vectors itself); `idle_exit`: seconds (default: `MEMCLI_INDEXER_IDLE_EXIT`,
    else indexing.IDLE_EXIT)."""

    def __init__(
        self,
        settings_for: indexing.SettingsFor,
        close_in_child: Callable[[], Iterable[int]],
        life: int,
        log: Callable[[str], None],
        *,
        only: str | None = None,
        idle_exit: float | None = None,
    ) -> None:
        global _CURRENT
        self.settings_for, self.close_in_child, self.life, self.log = (
            settings_for,
            close_in_child,
            life,
            log,
        )
        self.idle_exit = idle_exit if idle_exit is not None else _idle_exit_setting()
        self.wake_read, self.wake_fd = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_fd, False)  # a full pipe never blocks an ingest
        background.install(self.wake_fd, only=only)
        self.pid = 0  # the indexer running, 0: none
        self.starting = False  # forked, nothing reported yet: it may be at work on any database
        self.reports = -1
        self.lines = Lines(-1)  # its reports
        self.latest: dict[str, dict[str, Any]] = {}  # per database, the running indexer's
        self.past: dict[str, dict[str, Any]] = {}  # per database, the indexers before it
        self.failures = 0  # indexers that died in a row
        self.stopped = False
        _CURRENT = self

    def fds(self) -> list[int]:
        """The fds to select on now: the wake pipe while no indexer runs, else its reports."""
        if self.stopped:
            return []
        return [self.reports] if self.pid else [self.wake_read]

    def on_ready(self, fd: int) -> None:
        """One of `fds()` is readable: fork the indexer, or read its reports (and its end)."""
        if self.stopped:
            return
        if fd == self.wake_read and not self.pid:
            self._fork((), 0.0)
        elif fd == self.reports and self.pid and not self._read_reports():
            self._ended()

    def check(self, location: str) -> None:
        """A database the daemon opened: index what waits there (a killed daemon's backlog)."""
        place = background.queued(location)  # None: not one this daemon indexes
        if place is not None:
            with contextlib.suppress(OSError):
                os.write(self.wake_fd, b"W" + place.encode() + b"\n")

    def busy(self) -> bool:
        """Whether memories wait or sessions are queued (the daemon does not idle-exit then)."""
        return bool(self.pid) and (
            self.starting or any(f.get("busy") for f in self.latest.values())
        )

    def status(self, location: str) -> dict[str, Any]:
        """The indexer as `serve status` shows it for one database: its pid (None: none runs
        now), busy, memories indexed and sessions consolidated since the daemon started, the
        drain rate (memories per second while it drains) and the last error."""
        where = background.where(location)
        now, past = self.latest.get(where, {}), self.past.get(where, {})
        busy = bool(self.pid) and (self.starting or bool(now.get("busy")))
        out = {"pid": self.pid or None, "busy": busy}
        for key in _SUMMED:
            out[key] = (now.get(key) or 0) + (past.get(key) or 0)
        for key in ("drain_per_s", "last_error"):
            out[key] = now.get(key, past.get(key))
        return out

    def forget(self, location: str) -> None:
        """A database the daemon closed: its figures go (an indexer still draining it goes on)."""
        where = background.where(location)
        self.past.pop(where, None)
        if not self.latest.get(where, {}).get("busy"):
            self.latest.pop(where, None)

    def stop(self, grace: float, log: Callable[[str], None]) -> None:
        """SIGTERM the indexer (the batch in hand is finished or rolled back: nothing is lost),
        wait at most `grace` seconds, then SIGKILL."""
        self.stopped = True
        background.uninstall()
        if self.pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            if _wait(self.pid, grace) is None:
                log(
                    "memcli: warning: the indexer did not stop in time; killed "
                    "(its batch rolls back)"
                )
                with contextlib.suppress(ProcessLookupError, ChildProcessError):
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
            self.pid = 0
        for fd in (self.reports, self.wake_read, self.wake_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.reports = self.wake_read = self.wake_fd = -1

    # -- the indexer process -------------------------------------------------------------------
    def _fork(self, check: tuple[str, ...], delay: float) -> None:
        reports_r, reports_w = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        try:
            pid = os.fork()
        except OSError as exc:  # no memory or processes left: the wake line waits, tried again
            os.close(reports_r)
            os.close(reports_w)
            self.log(f"memcli: warning: cannot start the indexer: {exc}")
            time.sleep(0.5)  # the main loop's next select finds the line at once: not a spin
            return
        if pid == 0:
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                background.uninstall()  # the indexer's own writes (consolidation) are not queued
                for fd in (*self.close_in_child(), self.wake_fd, reports_r):
                    if fd != self.wake_read:  # the one fd of the main process's it reads
                        with contextlib.suppress(OSError):
                            os.close(fd)
                code = indexing.run(
                    self.settings_for,
                    self.wake_read,
                    reports_w,
                    (self.life,),
                    self.log,
                    idle_exit=self.idle_exit,
                    check=check,
                    delay=delay,
                )
            except BaseException as exc:  # noqa: BLE001 - said in the daemon's log, then exit
                with contextlib.suppress(Exception):
                    self.log(f"memcli: warning: the indexer stopped: {exc}".splitlines()[0])
            finally:
                os._exit(code)
        os.close(reports_w)
        os.set_blocking(reports_r, False)
        self.pid, self.reports, self.lines, self.starting = pid, reports_r, Lines(reports_r), True

    def _read_reports(self) -> bool:
        """Read what the indexer reported; False once it is gone."""
        while True:
            lines = self.lines.read()
            if lines is None:
                return False
            if not lines:
                return True
            for line in lines:
                if line.startswith(b"B"):
                    with contextlib.suppress(ValueError, TypeError, AttributeError):
                        figures = json.loads(line[1:])
                        self.latest[str(figures.pop("db"))] = figures
                        self.starting = False

    def _ended(self) -> None:
        """The indexer is gone: after its idle exit, wait for the next wake line; after any
        other end, fork a new one at once for the databases it had not finished."""
        status = _wait(self.pid, 5.0)
        os.close(self.reports)
        self.reports, self.pid, self.lines = -1, 0, Lines(-1)
        unfinished = tuple(loc for loc, f in self.latest.items() if f.get("busy"))
        for location, figures in self.latest.items():
            past = self.past.setdefault(location, {})
            for key in _SUMMED:
                past[key] = (past.get(key) or 0) + (figures.get(key) or 0)
            for key in ("drain_per_s", "last_error"):
                if figures.get(key) is not None:
                    past[key] = figures[key]
        self.latest.clear()
        clean = status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        if not unfinished:  # its idle exit (or nothing lost): the next wake line forks one
            if clean:
                self.failures = 0
            return
        self.failures += 1
        if self.failures == 1:
            self.log(
                "memcli: warning: the indexer ended with memories waiting; a new one takes them"
            )
        delay = (
            0.0
            if self.failures == 1
            else min(indexing.RETRY[0] * 2 ** (self.failures - 2), indexing.RETRY[1])
        )
        self._fork(unfinished, delay)


def _wait(pid: int, timeout: float) -> int | None:
    """The exit status of child `pid` within `timeout` seconds; None if it still runs (-1
    when another part of the process reaped it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return -1
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _idle_exit_setting() -> float:
    with contextlib.suppress(ValueError):
        value = float(os.environ.get(IDLE_EXIT_ENV, ""))
        if value >= 0:
            return value
    return indexing.IDLE_EXIT


def current() -> Supervisor | None:
    """The supervisor of the daemon this process belongs to (its main process or a fork)."""
    return _CURRENT


def backlog_status(db: Any, settings: Any, *, location: str | None = None) -> dict[str, Any]:
    """The backlog as `memcli serve status` and `memcli stats` show it: memories waiting for
    their vector or sparse terms (None: no database yet), the age of the oldest, and, inside
    a daemon that indexes this database, its indexer's figures (`Supervisor.status`).
    `location`: the database's, when `db` is None (it cannot be read now)."""

    out: dict[str, Any] = {"waiting": None, "oldest_age_s": None, "indexer": None}
    if db is not None:
        dense = settings.embedder.provider != "none"
        summary = backlog.summary(db, dense=dense, sparse=make_sparse(settings) is not None)
        out["waiting"] = summary["waiting"]
        if summary["oldest_at"]:
            with contextlib.suppress(ValueError):
                then = datetime.fromisoformat(str(summary["oldest_at"]).replace("Z", "+00:00"))
                out["oldest_age_s"] = round(max(0.0, (datetime.now(UTC) - then).total_seconds()), 1)
        location = getattr(db, "location", None) or db.path
    supervisor = _CURRENT
    place = background.queued(str(location)) if location is not None else None
    if supervisor is not None and place is not None:
        out["indexer"] = supervisor.status(place)
    return out
