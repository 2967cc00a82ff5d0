"""A named lock row per lifecycle command, so two cron runs of it never overlap.

The lock lives in the database (not a lock file) so it follows the database wherever it is, and
works the same on a future server backend. A holder that crashed cannot release it, so a lock
is also free once it expires (the holder refreshes it while working), or at once when its pid
no longer exists on this host. A lock held by a live run raises `RunLockedError`: exit 75, so
cron (or a retry wrapper) simply tries again later.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from memcli.errors import DatabaseBusyError
from memcli.models import format_ts
from memcli.store import lifecycle as sql

if TYPE_CHECKING:
    from memcli.store.connection import Database


class RunLockedError(DatabaseBusyError):
    """Another run of the same lifecycle command holds the lock (exit 75, retry later)."""


class RunLock:
    def __init__(self, db: Database, name: str, minutes: float) -> None:
        self.db = db
        self.name = name
        self.ttl = timedelta(minutes=minutes)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.holder = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"

    def _expiry(self) -> str:
        return format_ts(datetime.now(UTC) + self.ttl)

    def acquire(self) -> None:
        now = format_ts(datetime.now(UTC))
        with self.db.transaction():
            held = sql.get_lock(self.db, self.name)
            if held is not None and not self._stale(held, now):
                raise RunLockedError(
                    f"another `memcli {self.name}` is running (pid {held['pid']} on "
                    f"{held['host']}, since {held['acquired_at']})",
                    f"retry later; the lock expires at {held['expires_at']}",
                )
            sql.put_lock(self.db, self.name, self.holder, self.host, self.pid, now, self._expiry())

    def refresh(self) -> None:
        """Push the expiry out again; long runs call this between units of work."""
        with self.db.transaction():
            sql.refresh_lock(self.db, self.name, self.holder, self._expiry())

    def release(self) -> None:
        with self.db.transaction():
            sql.release_lock(self.db, self.name, self.holder)

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
def run_lock(db: Database, name: str, minutes: float = 30.0) -> Iterator[RunLock]:
    lock = RunLock(db, name, minutes)
    lock.acquire()
    try:
        yield lock
    finally:
        try:
            lock.release()
        except DatabaseBusyError:
            pass  # it expires on its own; never mask the run's own error with this one
