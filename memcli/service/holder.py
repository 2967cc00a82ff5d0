"""What `memcli serve` holds open for its database for its whole life, per engine.

- A SQLite file: one idle connection (`KeepOpen`: a request's connection is never the last, so
  the WAL is not checkpointed and deleted after each request) and, on exit, a bounded WAL
  checkpoint.
- A PostgreSQL server: the daemon's connection pool (memcli/store/postgres/pool.py), installed
  so that every request's `open_database` borrows from it. No WAL to checkpoint: closing the
  pool closes the connections; the server's own durability covers the rest.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from memcli.core.locations import is_postgres
from memcli.errors import MemcliError
from memcli.store.opener import open_database, server_location
from memcli.store.sqlite.writers import KeepOpen, checkpoint_wal

CHECKPOINT_WAIT = 5.0  # seconds the exit's WAL checkpoint may wait for other connections


def is_server(location: str) -> bool:
    return is_postgres(location)


class FileHolder:
    def __init__(self, path: str) -> None:
        self.path = path
        self.keeper = KeepOpen(path)
        self.keeper.ensure()
        self.closed = False
        self._lock = threading.Lock()  # a late `ensure` never reopens a closed holder

    def ensure(self) -> None:
        with self._lock:
            if not self.closed:
                self.keeper.ensure()

    def stats(self) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self.keeper.close()
        if os.path.exists(self.path):
            checkpoint_wal(self.path, CHECKPOINT_WAIT)


class PoolHolder:
    def __init__(self, settings: Any, pool_size: int) -> None:
        from memcli.store.postgres.pool import PgPool, install  # noqa: PLC0415 - psycopg

        # One plain connection first: it creates or migrates memcli's tables and says plainly
        # why the server cannot be used (the pool would only time out), before anything binds.
        open_database(settings.db, busy_timeout=settings.busy_timeout).close()
        # Keyed as open_database hands the location to postgres.connect.
        self.pool = PgPool(server_location(settings.db), max_size=pool_size,
                           timeout=settings.busy_timeout)
        self.pool.open()
        install(self.pool)
        self.closed = False

    def ensure(self) -> None:
        pass

    def stats(self) -> dict[str, Any] | None:
        return self.pool.stats()

    def close(self) -> None:
        from memcli.store.postgres.pool import uninstall  # noqa: PLC0415 - psycopg

        if self.closed:
            return
        self.closed = True
        uninstall(self.pool)
        self.pool.close()


def check_openable(settings: Any) -> None:
    """Before holding a database an HTTP request named (memcli/service/daemon/databases.py):
    say why it cannot be used (MemcliError, one line). An existing file is opened (and
    migrated, as a daemon's start does); a file not made yet is left to the first write, as
    in-process, but only in a folder that exists: a header never creates folders. A PostgreSQL
    server is checked by its holder's first connection."""

    db = os.fspath(settings.db)
    if is_server(db):
        return
    if os.path.exists(db):
        open_database(db, busy_timeout=settings.busy_timeout).close()
        return
    folder = os.path.dirname(db)
    if not os.path.isdir(folder):
        raise MemcliError(f"no folder {folder}", "create it, or name an existing database")


def hold(settings: Any, pool_size: int | None = None) -> FileHolder | PoolHolder:
    """The holder for `settings.db`; `pool_size`: the `--pool-size` flag (else config)."""
    if is_server(settings.db):
        return PoolHolder(settings, pool_size or settings.pool_size)
    return FileHolder(str(settings.db))
