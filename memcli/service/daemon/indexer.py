"""The daemon's indexer: vectors and sparse terms written in the background, and each user's
finished sessions consolidated when a new one starts.

A process of its own, forked by `memcli serve` after the warm-up, beside the HTTP process: it
runs the models (their thread pools start here, never in the main process that forks) and holds
one database connection. Ingest inside the daemon (memcli.ingest.background) commits events,
memories and full-text rows, then writes a line to the indexer's wake pipe; the indexer reads
the memories without a vector in id order (memcli/store/backlog.py), BATCH at a time, each batch
encoded outside any transaction and written in one short one. Its queue is the database, so a
kill loses nothing: on start the cursor is 0 and every waiting memory is found again. It runs at
a lower priority (nice) than the commands, so queries keep their latency while it drains.

A wake line `C[tenant, user]` says that user started a new session: once the backlog is
drained, the user's pending sessions (the ones before it) are consolidated, as the SQLite
memory extension design triggers it on a session switch: the model-free part always, the model
part when a model is configured and `consolidate: auto` (memcli.config.Settings.consolidate).

The indexer reports to the main process on a pipe, one line per change (`B{json}`): memories
indexed, drain rate, sessions consolidated, the last error. `memcli serve status` and `memcli
stats` read them (`backlog_status`).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from memcli.derived.llm_usage import make_model
from memcli.ingest import background
from memcli.lifecycle.runlock import RunLockedError
from memcli.operations.lifecycle_ops import consolidate
from memcli.operations.lifecycle_requests import ConsolidateRequest
from memcli.operations.memory import Memory, make_embedder, make_sparse
from memcli.store import backlog

BATCH = 64  # memories per write: a short transaction, so ingest and queries never wait long
RESCAN = 30.0  # idle seconds before reading the backlog from id 0 again (see _Loop.idle)
RETRY = (1.0, 30.0)  # seconds before retrying after a failed batch, first and at most
NICE = 19  # the indexer yields the CPU to the commands (queries): measured in bench/background.py

_LATEST: dict[str, Any] = {}  # the indexer's last report, as the main process saw it


class Indexer:
    """The indexer process seen from the main process."""

    def __init__(self, pid: int, reports: int) -> None:
        self.pid, self.reports = pid, reports
        self.buffer = b""

    def read_reports(self) -> bool:
        """Read what the indexer reported; False once it is gone."""
        try:
            data = os.read(self.reports, 65536)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            data = b""
        if not data:
            os.close(self.reports)
            self.reports = -1
            return False
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"B"):
                with contextlib.suppress(ValueError):
                    _LATEST.clear()
                    _LATEST.update(json.loads(line[1:]))
        return True

    def busy(self) -> bool:
        """Whether memories wait or sessions are queued (the daemon does not idle-exit then)."""
        return self.reports >= 0 and bool(_LATEST.get("busy"))

    def stop(self, wait: float, log: Callable[[str], None]) -> None:
        """SIGTERM (the batch in hand is finished or rolled back: nothing is lost), then wait."""
        if self.pid <= 0:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.05)
        else:
            log("memcli: warning: the indexer did not stop in time; killed (its batch rolls back)")
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        self.pid = 0
        if self.reports >= 0:
            os.close(self.reports)
            self.reports = -1


def start(settings: Any, close_in_child: list[int], life: int,
          log: Callable[[str], None]) -> Indexer:
    """Install the queue (ingest in this process's later forks leaves vectors to it) and fork
    the indexer. `close_in_child`: the daemon's fds the indexer must not hold; `life`: a pipe
    that reads EOF once the daemon is gone (the indexer then exits)."""
    wake_r, wake_w = os.pipe()
    reports_r, reports_w = os.pipe()
    os.set_blocking(wake_w, False)
    queue = background.install(str(settings.db), wake_w)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            background.uninstall()  # the indexer's own writes (consolidation) are not queued
            for fd in (*close_in_child, wake_w, reports_r):
                with contextlib.suppress(OSError):
                    os.close(fd)
            code = run(settings, wake_r, reports_w, life, log)
        except BaseException as exc:  # noqa: BLE001 - said in the daemon's log, then exit
            with contextlib.suppress(Exception):
                log(f"memcli: warning: the indexer stopped: {exc}".splitlines()[0])
        finally:
            os._exit(code)
    os.close(wake_r)
    os.close(reports_w)
    os.set_blocking(reports_r, False)
    queue.indexer = pid
    return Indexer(pid, reports_r)


def run(settings: Any, wake: int, reports: int, life: int, log: Callable[[str], None]) -> int:
    """The indexer's whole life: index, consolidate, report; until SIGTERM or the daemon's end."""
    os.setpgid(0, 0)  # a Ctrl-C at the daemon's terminal stops the daemon, which stops this
    stop_r, stop_w = os.pipe()  # SIGTERM wakes the loop's select (a handler alone would not)
    os.set_blocking(stop_w, False)
    signal.set_wakeup_fd(stop_w)
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(NICE)

    embedder, sparse = make_embedder(settings), make_sparse(settings)
    with Memory.open(settings.db, embedder=embedder, sparse=sparse, settings=settings) as memory:
        loop = _Loop(memory, settings, wake, reports, (life, stop_r), log)
        while loop.step():
            pass
    return 0


class _Loop:
    def __init__(self, memory: Any, settings: Any, wake: int, reports: int,
                 ends: tuple[int, ...], log: Callable[[str], None]) -> None:
        self.memory, self.settings, self.log = memory, settings, log
        self.wake, self.reports = wake, reports
        self.ends = ends  # readable once the indexer must stop (the daemon gone, SIGTERM)
        self.cursor = 0  # the last memory id read; 0: from the start
        self.scanned = time.monotonic()  # when the cursor last started from 0
        self.sessions: dict[tuple[str, str], None] = {}  # users whose new session started
        self.figures: dict[str, Any] = {"indexed": 0, "drain_per_s": None,
                                        "consolidated": 0, "last_error": None, "busy": True}
        self.run_started: float | None = None  # when the current drain began
        self.run_done = 0
        self.failures = 0
        self.reported = 0.0

    def step(self) -> bool:
        """One batch, or one consolidation, or one wait; False when the daemon is gone."""
        if not self._read_wake(0):
            return False
        began = time.monotonic()
        try:
            done, self.cursor = background.index_next(
                self.memory.db, self.memory.embedder, self.memory.sparse,
                after=self.cursor, limit=BATCH)
        except Exception as exc:  # noqa: BLE001 - said, then retried: nothing is lost
            return self._failed(exc)
        self.failures = 0
        if done:
            now = time.monotonic()
            if self.run_started is None:
                self.run_started, self.run_done = began, 0
            self.run_done += done
            self.figures["indexed"] += done
            elapsed = now - self.run_started
            if elapsed > 0:
                self.figures["drain_per_s"] = round(self.run_done / elapsed, 1)
            self.figures["busy"] = True
            self._report(now - self.reported >= 0.5)
            return self._alive()
        self.run_started = None
        if self.sessions:
            self._consolidate(*next(iter(self.sessions)))
            return self._alive()
        return self._idle()

    def _idle(self) -> bool:
        """Nothing waits above the cursor: report, then sleep until woken. After RESCAN idle
        seconds the cursor goes back to 0: memories a cursor can pass (ids committed out of
        order on PostgreSQL, or written by another process without vectors) are found then."""
        self.figures["busy"] = False
        self._report(True)
        if self.cursor and time.monotonic() - self.scanned >= RESCAN:
            self.cursor, self.scanned = 0, time.monotonic()
            return True
        return self._read_wake(RESCAN)

    def _read_wake(self, timeout: float) -> bool:
        """Take the wake lines (sessions started) waiting, up to `timeout` seconds for the
        first; False when the indexer must stop."""
        ready, _, _ = select.select([self.wake, *self.ends], [], [], timeout)
        if any(fd in ready for fd in self.ends):
            return False
        if self.wake in ready:
            data = os.read(self.wake, 65536)
            if not data:
                return False
            for line in data.split(b"\n"):
                if line.startswith(b"C"):  # C<location>\t<json [tenant, user]>
                    with contextlib.suppress(ValueError, TypeError):
                        tenant, user = json.loads(line[1:].rpartition(b"\t")[2])
                        self.sessions[(str(tenant), str(user))] = None
        return True

    def _alive(self) -> bool:
        return self._read_wake(0)

    def _failed(self, exc: Exception) -> bool:
        self.failures += 1
        self.figures["last_error"] = str(exc).splitlines()[0] if str(exc) else repr(exc)
        if self.failures == 1:
            self.log(f"memcli: warning: indexing failed, retrying: {self.figures['last_error']}")
        self._report(True)
        pause = min(RETRY[0] * 2 ** (self.failures - 1), RETRY[1])
        return self._read_wake(pause)

    def _consolidate(self, tenant: str, user: str) -> None:
        """The user's pending sessions, consolidated (the ones before the new one)."""

        del self.sessions[(tenant, user)]
        if self.settings.consolidate == "off":
            return
        model = None
        try:
            if self.settings.consolidate == "auto":
                model = make_model(self.memory.db, self.settings.llm, "consolidate")
            request = ConsolidateRequest(tenant_id=tenant, user_id=user)
            # Never waits: a cron run holding the lock consolidates these sessions itself.
            report = consolidate(self.memory, self.settings, request, model, lock_wait=0)
            self.figures["consolidated"] += len(report.get("sessions", []))
            for error in report.get("errors", []):
                self.figures["last_error"] = f"consolidate: {error.get('reason')}"
        except RunLockedError:
            pass  # the sessions stay pending for the run that holds the lock
        except Exception as exc:  # noqa: BLE001 - the sessions stay pending (cron takes them)
            self.figures["last_error"] = f"consolidate: {exc}".splitlines()[0]
            self.log(f"memcli: warning: {self.figures['last_error']}")
        finally:
            if model is not None:
                model.close()
        self._report(True)

    def _report(self, now: bool) -> None:
        if not now:
            return
        self.reported = time.monotonic()
        line = b"B" + json.dumps({**self.figures, "busy": self.figures["busy"]
                                  or bool(self.sessions)}).encode() + b"\n"
        with contextlib.suppress(OSError):
            os.write(self.reports, line)


def backlog_status(db: Any, settings: Any, *, served: bool = False) -> dict[str, Any]:
    """The backlog as `memcli serve status` and `memcli stats` show it: memories waiting for
    their vector or sparse terms (None: no database yet), the age of the oldest, and, inside
    a daemon (`served`, or `db` is the daemon's), the indexer's pid, drain rate (memories per
    second while it drains), memories indexed and sessions consolidated since it started."""

    out: dict[str, Any] = {"waiting": None, "oldest_age_s": None, "indexer": None}
    if db is not None:
        dense = settings.embedder.provider != "none"
        summary = backlog.summary(db, dense=dense, sparse=make_sparse(settings) is not None)
        out["waiting"] = summary["waiting"]
        if summary["oldest_at"]:
            with contextlib.suppress(ValueError):
                then = datetime.fromisoformat(str(summary["oldest_at"]).replace("Z", "+00:00"))
                out["oldest_age_s"] = round(
                    max(0.0, (datetime.now(UTC) - then).total_seconds()), 1)
    queue = background.installed() if served else background.queue_for(db)
    if queue is not None:
        out["indexer"] = {"pid": queue.indexer or None, **{k: _LATEST.get(k) for k in (
            "busy", "indexed", "drain_per_s", "consolidated", "last_error")}}
    return out
