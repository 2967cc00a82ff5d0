"""A named lock row per lifecycle command, so two cron runs of it never overlap.

The lock lives in the database (not a lock file) so it follows the database wherever it is. On
SQLite a holder that crashed cannot release it, so a lock is also free once it expires (the
holder refreshes it while working), or at once when its pid no longer exists on this host. On
PostgreSQL the lock is a session advisory lock (`Backend.take_run_lock`), freed by the server
when the holder's connection ends, whatever host it ran on; the row then only names the
holder. A run that finds the lock held waits its turn, up to `wait` seconds (cron's commands:
`lifecycle.lock_wait`, so a nightly run beside a daemon whose indexer is consolidating a
session finishes after it); a lock still held then raises `RunLockedError`: exit 75, so cron
(or a retry wrapper) simply tries again later.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from memcli.core.records import format_ts
from memcli.errors import DatabaseBusyError
from memcli.store import lifecycle_sql

if TYPE_CHECKING:
    from memcli.store.connection import Database


class RunLockedError(DatabaseBusyError):
    """Another run of the same lifecycle command holds the lock (exit 75, retry later)."""


POLL = (0.1, 1.0)  # seconds between two looks at a held lock: first, and at most


class RunLock:
    def __init__(self, db: Database, name: str, minutes: float) -> None:
        self.db = db
        self.name = name
        self.ttl = timedelta(minutes=minutes)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.holder = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self.engine_lock = False  # this connection holds the engine's session lock

    def _expiry(self) -> str:
        return format_ts(datetime.now(UTC) + self.ttl)

    def acquire(self, wait: float = 0.0) -> None:
        """Take the lock, waiting up to `wait` seconds while another live run holds it."""
        deadline = time.monotonic() + wait
        pause = POLL[0]
        while True:
            try:
                self._try_acquire()
                return
            except RunLockedError as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    if wait > 0:
                        raise RunLockedError(f"{exc.message}; waited {wait:g} s",
                                             f"{exc.hint or 'retry later'}; wait longer with "
                                             "MEMCLI_LOCK_WAIT=<seconds>") from None
                    raise
            time.sleep(min(pause, left))
            pause = min(pause * 2, POLL[1])

    def _try_acquire(self) -> None:
        now = format_ts(datetime.now(UTC))
        # A server engine's session lock (PostgreSQL: an advisory lock) decides when it has
        # one: it dies with a killed holder's connection on any host, so the row below is then
        # only who holds it, for the message. SQLite has none: the row's expiry and pid do.
        engine = self.db.backend.take_run_lock(self.db, self.name)
        self.engine_lock = engine is True
        try:
            with self.db.transaction():
                held = lifecycle_sql.get_lock(self.db, self.name)
                if engine is False or (engine is None and held is not None
                                       and not self._stale(held, now)):
                    raise self._locked(held, expires=engine is None)
                lifecycle_sql.put_lock(self.db, self.name, self.holder, self.host, self.pid, now,
                             self._expiry())
        except BaseException:
            self._drop_engine_lock()
            raise

    def _locked(self, held: dict | None, *, expires: bool) -> RunLockedError:
        if held is None:  # the holder has not written its row yet
            return RunLockedError(f"another `memcli {self.name}` is running",
                                  "retry later")
        return RunLockedError(
            f"another `memcli {self.name}` is running (pid {held['pid']} on "
            f"{held['host']}, since {held['acquired_at']})",
            "retry later" + (f"; the lock expires at {held['expires_at']}" if expires else ""),
        )

    def _drop_engine_lock(self) -> None:
        if self.engine_lock:
            self.engine_lock = False
            self.db.backend.drop_run_lock(self.db, self.name)

    def refresh(self) -> None:
        """Push the expiry out again; long runs call this between units of work."""
        with self.db.transaction():
            lifecycle_sql.refresh_lock(self.db, self.name, self.holder, self._expiry())

    def release(self) -> None:
        try:
            with self.db.transaction():
                lifecycle_sql.release_lock(self.db, self.name, self.holder)
        finally:
            self._drop_engine_lock()

    def _stale(self, held: dict, now: str) -> bool:
        if held["expires_at"] <= now:
            return True
        if held["host"] == self.host and held["pid"] != self.pid:
            return not _pid_alive(int(held["pid"]))
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


@contextmanager
def run_lock(db: Database, name: str, minutes: float = 30.0, wait: float = 0.0
             ) -> Iterator[RunLock]:
    """Hold the lock `name` for the block (`wait`: seconds to wait for another run's end)."""
    lock = RunLock(db, name, minutes)
    lock.acquire(wait)
    try:
        yield lock
    finally:
        try:
            lock.release()
        except DatabaseBusyError:
            pass  # it expires on its own; never mask the run's own error with this one
