"""One writer at a time inside a process, and the WAL checkpoint a daemon runs on its way out.

SQLite allows one writer per database; threads of one process that all try `BEGIN IMMEDIATE`
then spin in SQLite's busy handler (sleeps of growing length, no fairness). `memcli serve`
runs many requests on threads, so write transactions first take a process-wide lock per
database file (`Database.transaction`): they queue in Python, in arrival order, and the
configured busy timeout still bounds the whole wait (then exit 75, never a silent loss).
"""

from __future__ import annotations

import os
import threading

import apsw

_LOCKS: dict[str, threading.RLock] = {}
_GUARD = threading.Lock()


def writer_lock(path: str) -> threading.RLock | None:
    """The process-wide write lock of database `path` (None for an in-memory database).
    Reentrant: a thread already writing that opens the same file again gets SQLite's own
    busy answer, as before, rather than waiting on itself."""
    if path == ":memory:" or path.startswith("file:"):
        return None
    key = os.path.realpath(path)
    with _GUARD:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = threading.RLock()
        return lock


def checkpoint_wal(path: str, wait: float) -> bool:
    """Copy the WAL into the database and truncate it, waiting at most `wait` seconds for
    readers and writers; True when done (a daemon's last step before it exits)."""
    try:
        conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE)
    except apsw.Error:
        return False
    try:
        conn.setbusytimeout(int(wait * 1000))
        row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return row is not None and row[0] == 0  # (busy, log frames, checkpointed frames)
    except apsw.Error:
        return False
    finally:
        conn.close()


class KeepOpen:
    """One idle connection a daemon holds to its database for its whole life.

    When the last connection to a WAL database closes, SQLite checkpoints and deletes the WAL:
    with one connection per request, every request paid that (~15 ms). With this one open, a
    request's connection is never the last; the WAL is checkpointed as usual when it grows,
    and once more when the daemon exits (`checkpoint_wal`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn: apsw.Connection | None = None
        self._lock = threading.Lock()

    def ensure(self) -> None:
        """Open it if the database exists by now (it may be created by a later request)."""
        if self.conn is not None or not os.path.exists(self.path):
            return
        with self._lock:
            if self.conn is not None:
                return
            try:
                conn = apsw.Connection(self.path, flags=apsw.SQLITE_OPEN_READWRITE)
                conn.execute("PRAGMA schema_version").fetchall()  # joins the WAL: a shared lock
            except apsw.Error:
                return
            self.conn = conn

    def close(self) -> None:
        with self._lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None
