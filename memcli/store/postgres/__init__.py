"""The PostgreSQL backend: `connect(location)` opens a memcli database on a
PostgreSQL server (psycopg 3, pgvector, pg_trgm).

Importing this package imports nothing heavy: psycopg (160-250 ms) is imported by `connect`,
so `import memcli` and every SQLite command stay as fast as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memcli.store.postgres.connection import PgDatabase

BUSY_TIMEOUT = 30.0


def connect(location: str, *, readonly: bool = False, must_exist: bool = False,
            busy_timeout: float = BUSY_TIMEOUT) -> PgDatabase:
    """Open the memcli database at `location` (a `postgresql://` / `postgres://` URL or a
    libpq keyword string), creating memcli's tables in an empty database unless `readonly`
    or `must_exist`. The server database itself is never created: that is the DBA's step.
    In a process that installed a pool for `location` (the daemon), the connection is
    borrowed from it and `close()` gives it back."""
    # start-up cost: psycopg, imported by these, only when a PostgreSQL database is opened
    from memcli.store.postgres.connection import PgDatabase  # noqa: PLC0415
    from memcli.store.postgres.pool import installed  # noqa: PLC0415

    # Inside `memcli serve`: a connection borrowed from the daemon's pool (pool.py).
    return PgDatabase(location, readonly=readonly, must_exist=must_exist,
                      busy_timeout=busy_timeout, pool=installed(location))
