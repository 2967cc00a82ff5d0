"""The indexer process: vectors and sparse terms written in the background for every database
a daemon's ingest names, and each user's finished sessions consolidated when a new one starts.

Forked by the supervisor (memcli/service/daemon/indexer.py) when a wake line waits and no
indexer runs; it reads the wake lines itself (`W<location>`: memories wait there;
`C<location>\t[tenant, user]`: that user started a new session), so nothing is lost between
the supervisor and it. Per database it drains, it holds one `Memory` (one connection, the
database's own settings: `settings_for(location)`), closed once that database's queue is empty.
The databases with work take turns, one batch each (round-robin), so one database's big backlog
never keeps another's first memory waiting for more than a batch per database. Each batch is
read in id order (memcli/store/backlog.py), encoded outside any transaction and written in one
short one. The queue is the database, so a kill loses nothing: a new indexer starts from id 0.

With every queue empty for `idle_exit` seconds the process exits, and the memory its models
took while they ran (the document model's buffers, tokenizer pools) goes back with it; the
next wake line forks a new one. It runs at a lower priority (nice) than the commands.

A `C` line: once that database's backlog is drained, the user's pending sessions (the ones
before the new one) are consolidated, as the SQLite memory extension design triggers it on a
session switch: the model-free part always, the model part when a model is configured and
`consolidate: auto` (memcli.config.Settings.consolidate).

It reports to the supervisor on a pipe, one line per change (`B{json}`, with `"db"`):
memories indexed, drain rate, sessions consolidated, the last error, whether it is busy.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from collections.abc import Callable
from typing import Any

from memcli.derived.llm_usage import make_model
from memcli.errors import NoDatabaseError
from memcli.ingest import background
from memcli.lifecycle.runlock import RunLockedError
from memcli.operations.lifecycle_ops import consolidate
from memcli.operations.lifecycle_requests import ConsolidateRequest
from memcli.operations.memory import Memory, make_embedder, make_sparse
from memcli.service.daemon.lines import Lines
from memcli.service.holder import is_server

BATCH = 64  # memories per write: a short transaction, so ingest and queries never wait long
RESCAN = 30.0  # idle seconds before a database's backlog is read from id 0 again (_Drain.empty)
RETRY = (1.0, 30.0)  # seconds before retrying after a failed batch, first and at most
# Failures in a row (about 3 minutes of retries) after which a database waits for its next
# wake line: one that keeps failing must not keep the indexer, and its models, alive for good.
GIVE_UP = 10
NICE = 19  # the indexer yields the CPU to the commands (queries): measured in bench/background.py
# Seconds with every queue empty before the indexer exits (docs/guides/indexing.md: what it
# gives back, and what the next backlog's first memory waits for a new one).
IDLE_EXIT = 60.0

SettingsFor = Callable[[str], Any]


def run(
    settings_for: SettingsFor,
    wake: int,
    reports: int,
    ends: tuple[int, ...],
    log: Callable[[str], None],
    *,
    idle_exit: float = IDLE_EXIT,
    check: tuple[str, ...] = (),
    delay: float = 0.0,
) -> int:
    """The indexer's whole life, until SIGTERM, the daemon's end (`ends` readable) or
    `idle_exit` seconds without work. `check`: databases to look at first (the ones an indexer
    that died was draining); `delay`: seconds to wait first (after indexers that kept dying)."""
    os.setpgid(0, 0)  # a Ctrl-C at the daemon's terminal stops the daemon, which stops this
    stop_r, stop_w = os.pipe()  # SIGTERM wakes the loop's select (a handler alone would not)
    os.set_blocking(stop_w, False)
    signal.set_wakeup_fd(stop_w)
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(NICE)
    ends = (*ends, stop_r)
    if delay > 0 and select.select(list(ends), [], [], delay)[0]:
        return 0
    loop = Loop(settings_for, wake, reports, ends, log, idle_exit=idle_exit)
    for location in check:
        loop.wanted(location)
    try:
        while loop.step():
            pass
    finally:
        loop.close()
    return 0


class _Drain:
    """One database as the indexer works on it."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.memory: Any = None  # open while its queue is not empty
        self.settings: Any = None
        self.cursor = 0  # the last memory id read; 0: from the start
        self.scanned = time.monotonic()  # when the cursor last started from 0
        self.rescan_at: float | None = None  # when the cursor goes back to 0 (RESCAN)
        self.retry_at = 0.0  # after a failure: not before this
        self.failures = 0
        self.sessions: dict[tuple[str, str], None] = {}  # users whose new session started
        self.figures: dict[str, Any] = {
            "db": location,
            "indexed": 0,
            "drain_per_s": None,
            "consolidated": 0,
            "last_error": None,
            "busy": True,
        }
        self.run_started: float | None = None  # when the current drain began
        self.run_done = 0
        self.reported = 0.0

    def close(self) -> None:
        if self.memory is not None:
            memory, self.memory = self.memory, None
            with contextlib.suppress(Exception):
                memory.close()


class Loop:
    """The indexer's loop over its databases (one step: one batch, one consolidation or one
    wait)."""

    def __init__(
        self,
        settings_for: SettingsFor,
        wake: int,
        reports: int,
        ends: tuple[int, ...],
        log: Callable[[str], None],
        *,
        idle_exit: float = IDLE_EXIT,
    ) -> None:
        self.settings_for, self.log = settings_for, log
        self.wake, self.reports = wake, reports
        self.ends = ends  # readable once the indexer must stop (the daemon gone, SIGTERM)
        self.idle_exit = idle_exit
        self.drains: dict[str, _Drain] = {}
        self.turns: list[str] = []  # databases with work, in the order of their next turn
        self.last_work = time.monotonic()
        self.wake_lines = Lines(wake)

    # -- the loop ------------------------------------------------------------------------------
    def step(self) -> bool:
        """One batch or one consolidation for the database whose turn it is, or one wait;
        False when the indexer must stop (or has been idle long enough)."""
        if not self._read_wake(0):
            return False
        now = time.monotonic()
        ready = [loc for loc in self.turns if self.drains[loc].retry_at <= now]
        if not ready:
            return self._wait(now)
        location = ready[0]
        self.turns.remove(location)
        if self._work(self.drains[location]):
            self.turns.append(location)  # its next turn comes after every other's
        return True

    def wanted(self, location: str) -> _Drain:
        """The database has memories waiting (or may have): give it turns."""
        drain = self.drains.get(location)
        if drain is None:
            drain = self.drains[location] = _Drain(location)
        if location not in self.turns:
            drain.figures["busy"], drain.failures, drain.retry_at = True, 0, 0.0
            self.turns.append(location)
            self._report(drain, True)  # the supervisor learns which databases this drains
        return drain

    def close(self) -> None:
        for drain in self.drains.values():
            drain.close()

    def _wait(self, now: float) -> bool:
        """Nothing to do now: sleep until woken, a retry, a rescan, or the idle exit."""
        if self.turns:  # only failed databases waiting for their retry
            until = min(self.drains[loc].retry_at for loc in self.turns)
        else:
            until = self.last_work + self.idle_exit
            if now >= until:
                return False  # idle long enough: exit, the models' memory goes back
        rescans = [d.rescan_at for d in self.drains.values() if d.rescan_at is not None]
        if rescans and min(rescans) <= now:
            for drain in self.drains.values():
                if drain.rescan_at is not None and drain.rescan_at <= now:
                    drain.rescan_at, drain.cursor, drain.scanned = None, 0, now
                    self.wanted(drain.location)
            return True
        until = min([until, *rescans])
        return self._read_wake(max(0.0, until - now))

    def _work(self, drain: _Drain) -> bool:
        """One batch or one consolidation of `drain`; whether it has more to do."""
        began = time.monotonic()
        try:
            if drain.memory is None and not self._open(drain):
                return False
            done, drain.cursor = background.index_next(
                drain.memory.db,
                drain.memory.embedder,
                drain.memory.sparse,
                after=drain.cursor,
                limit=BATCH,
            )
        except Exception as exc:  # noqa: BLE001 - said, then retried: nothing is lost
            return self._failed(drain, exc)
        drain.failures = 0
        if done:
            now = self.last_work = time.monotonic()
            if drain.run_started is None:
                drain.run_started, drain.run_done = began, 0
            drain.run_done += done
            drain.figures["indexed"] += done
            elapsed = now - drain.run_started
            if elapsed > 0:
                drain.figures["drain_per_s"] = round(drain.run_done / elapsed, 1)
            self._report(drain, now - drain.reported >= 0.5)
            return True
        drain.run_started = None
        if drain.sessions:
            self._consolidate(drain, *next(iter(drain.sessions)))
            self.last_work = time.monotonic()
            return True
        return self._empty(drain)

    def _empty(self, drain: _Drain) -> bool:
        """Nothing waits above the cursor: close the database and report. After RESCAN idle
        seconds the cursor goes back to 0 (while this indexer lives; a new one starts from 0):
        memories a cursor can pass (ids committed out of order on PostgreSQL, or written by
        another process without vectors) are found then."""
        drain.close()
        drain.figures["busy"] = False
        drain.rescan_at = drain.scanned + RESCAN if drain.cursor else None
        self._report(drain, True)
        return False

    def _open(self, drain: _Drain) -> bool:
        """Open the database with its settings; False when it is not there (nothing to do)."""
        settings = drain.settings = self.settings_for(drain.location)
        try:
            drain.memory = Memory.open(
                drain.location,
                embedder=make_embedder(settings),
                sparse=make_sparse(settings),
                settings=settings,
                must_exist=not is_server(drain.location),
            )
        except NoDatabaseError:  # removed since: never made again by the indexer
            drain.sessions.clear()
            self._empty(drain)
            return False
        return True

    # -- the wake pipe -------------------------------------------------------------------------
    def _read_wake(self, timeout: float) -> bool:
        """Take the wake lines waiting, up to `timeout` seconds for the first; False when the
        indexer must stop."""
        ready, _, _ = select.select([self.wake, *self.ends], [], [], timeout)
        if any(fd in ready for fd in self.ends):
            return False
        if self.wake not in ready:
            return True
        lines = self.wake_lines.read()
        if lines is None:
            return False
        for line in lines:
            self._line(line)
        return True

    def _line(self, line: bytes) -> None:
        kind, rest = line[:1], line[1:].decode("utf-8", "surrogateescape")
        if kind == b"W" and rest:
            self.wanted(rest)
            self.last_work = time.monotonic()
        elif kind == b"C":
            location, _, who = rest.partition("\t")
            with contextlib.suppress(ValueError, TypeError):
                tenant, user = json.loads(who)
                if location:
                    self.wanted(location).sessions[(str(tenant), str(user))] = None
                    self.last_work = time.monotonic()

    # -- failures, consolidation, reports ------------------------------------------------------
    def _failed(self, drain: _Drain, exc: Exception) -> bool:
        """Say it, and retry later (True); after GIVE_UP failures in a row, leave the
        database to its next wake line (False): its memories wait in it, nothing is lost."""
        drain.close()  # a connection that failed is opened again for the retry
        drain.failures += 1
        drain.figures["last_error"] = str(exc).splitlines()[0] if str(exc) else repr(exc)
        if drain.failures == 1:
            self.log(
                f"memcli: warning: indexing {_shown(drain.location)} failed, retrying: "
                f"{drain.figures['last_error']}"
            )
        if drain.failures >= GIVE_UP:
            self.log(
                f"memcli: warning: indexing {_shown(drain.location)} failed {drain.failures} "
                "times in a row; its memories wait for its next ingest (or `memcli embed`)"
            )
            drain.figures["busy"] = False
            drain.sessions.clear()  # pending sessions are consolidated by the next run
        self._report(drain, True)
        drain.retry_at = time.monotonic() + min(RETRY[0] * 2 ** (drain.failures - 1), RETRY[1])
        return drain.failures < GIVE_UP

    def _consolidate(self, drain: _Drain, tenant: str, user: str) -> None:
        """The user's pending sessions, consolidated (the ones before the new one)."""

        del drain.sessions[(tenant, user)]
        settings, memory = drain.settings, drain.memory
        if settings.consolidate == "off":
            return
        model = None
        try:
            if settings.consolidate == "auto":
                model = make_model(memory.db, settings.llm, "consolidate")
            request = ConsolidateRequest(tenant_id=tenant, user_id=user)
            # Never waits: a cron run holding the lock consolidates these sessions itself.
            report = consolidate(memory, settings, request, model, lock_wait=0)
            drain.figures["consolidated"] += len(report.get("sessions", []))
            for error in report.get("errors", []):
                drain.figures["last_error"] = f"consolidate: {error.get('reason')}"
        except RunLockedError:
            pass  # the sessions stay pending for the run that holds the lock
        except Exception as exc:  # noqa: BLE001 - the sessions stay pending (cron takes them)
            drain.figures["last_error"] = f"consolidate: {exc}".splitlines()[0]
            self.log(f"memcli: warning: {drain.figures['last_error']}")
        finally:
            if model is not None:
                model.close()
        self._report(drain, True)

    def _report(self, drain: _Drain, now: bool) -> None:
        if not now:
            return
        drain.reported = time.monotonic()
        busy = drain.figures["busy"] or bool(drain.sessions)
        line = b"B" + json.dumps({**drain.figures, "busy": busy}).encode() + b"\n"
        with contextlib.suppress(OSError):
            os.write(self.reports, line)


def _shown(location: str) -> str:
    """A database as the daemon's log shows it (a server URL's password masked)."""
    if not is_server(location):
        return location
    from memcli.store.postgres.connection import masked  # noqa: PLC0415 - psycopg, if used

    return masked(location)
