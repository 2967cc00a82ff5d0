"""apsw errors to memcli's one-line errors (the SQLite twin of memcli/store/postgres/error_map.py):
a failure of the environment (permissions, a full disk, I/O, a damaged file) becomes a
StorageError naming the file; anything else stays the apsw exception it is."""

from __future__ import annotations

import os
from pathlib import Path

import apsw

from memcli.errors import DiskFullError, StorageError


def _plain(exc: BaseException) -> str:
    """An exception's message without apsw's "XxxError: " prefix (no class names for users)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    name = type(exc).__name__
    return text[len(name) + 2:] if text.startswith(name + ": ") else (text or name)


def environment_error(exc: BaseException, path: str) -> StorageError | None:
    """The one-line error for a failure of the environment (permissions, disk, I/O), or None
    when `exc` is not one. Used on open, by Memory on the way out, and by ingest so that a
    full disk stops the batch instead of rejecting each record in turn."""
    seen = 0
    # A full disk rolls the transaction back, and the savepoint's own rollback then fails
    # with "no such savepoint": the cause is the exception that one was raised during.
    while isinstance(exc, apsw.SQLError) and exc.__context__ is not None and seen < 5:
        exc, seen = exc.__context__, seen + 1
    if isinstance(exc, apsw.ReadOnlyError):
        return StorageError(f"database is read-only: {path}",
                            "check the permissions of the file and its folder")
    if isinstance(exc, apsw.FullError):
        return DiskFullError(f"disk full: cannot write {path}", "free some space and retry")
    if isinstance(exc, apsw.CantOpenError):
        folder = Path(path).parent
        if path != ":memory:" and not os.access(folder, os.W_OK):
            return StorageError(f"cannot open {path}: its folder is not writable",
                                "memcli keeps its -wal and -shm files beside the database")
        return StorageError(f"cannot open {path}: {_plain(exc)}",
                            "check the path and its permissions")
    if isinstance(exc, apsw.IOError):
        return StorageError(f"I/O error on {path}: {_plain(exc)}",
                            "check the disk and the file's permissions")
    if isinstance(exc, apsw.PermissionsError | apsw.AuthError):
        return StorageError(f"permission denied: {path}", "check its permissions")
    # Migrations guarantee every table at open, so a missing one was dropped by hand or lost.
    damaged = isinstance(exc, apsw.CorruptError) or (
        isinstance(exc, apsw.SQLError) and _plain(exc).startswith("no such table"))
    if damaged:
        return StorageError(f"database is damaged: {path}: {_plain(exc)}",
                            "run `memcli doctor`; `memcli rebuild` restores derived tables")
    return None
