"""A pool of PostgreSQL connections for a long-running process (`memcli serve`).

A one-shot CLI process opens one connection (connect + authenticate + the schema check: tens of
milliseconds on a loaded machine) and closes it. The daemon instead owns a
`psycopg_pool.ConnectionPool` for its database: every request (a forwarded command, an HTTP or
MCP call) borrows a connection for its own length and gives it back. `install(pool)` makes it
the source of `connect(location)` for that exact location in this process, so the command code
(`Memory.open` -> `open_database` -> `postgres.connect`) is the same in and out of the daemon.

What a returned connection must not carry to the next borrower is reset (`_reset`): an open
transaction (rolled back by `give_back` itself, which says why), session settings (`RESET
ALL`: a read-only borrower's `default_transaction_read_only`), WITH HOLD cursors of an
abandoned `stream()` (`CLOSE ALL`) and session advisory locks (`pg_advisory_unlock_all()`: a
lifecycle run lock whose holder forgot to release it would otherwise outlive its request
inside the pool).
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolTimeout

from memcli.errors import DatabaseBusyError
from memcli.store.postgres import adapt
from memcli.store.postgres.connection import CONNECT_OPTIONS

DEFAULT_MAX = 10  # connections per daemon; PostgreSQL's default max_connections is 100
DEFAULT_MIN = 1  # kept open while idle: the first request after a pause needs no connect
# A read-only borrow (connection.SECOND_WAIT) is a request's second connection (Memory.reader,
# for the lexical leg on a thread): it waits only briefly, so that requests each holding one
# and wanting a second never starve the pool; without it the leg runs on the request's own.

_installed: dict[str, PgPool] = {}
_guard = threading.Lock()


def _configure(conn: Any) -> None:
    """Every new pooled connection: the value adapters and the `vector` loader, as on a
    connection of its own (PgDatabase._register_vector): vectors read back as SQLite's float32
    blobs (pgvector's own loader would give `Vector` objects, which the store cannot compare
    with the blobs it embeds). The daemon migrated the schema before making the pool, so the
    `vector` type exists."""
    adapt.configure(conn)
    row = conn.execute("SELECT oid FROM pg_type WHERE typname = 'vector'").fetchone()
    if row:
        adapt.register_vector_loader(conn, int(row[0]))


def _reset(conn: Any) -> None:
    """A returned connection, made like a fresh one (the module docstring says why)."""
    conn.execute("CLOSE ALL")
    conn.execute("RESET ALL")
    conn.execute("SELECT pg_advisory_unlock_all()")


class PgPool:
    """The daemon's connections to one database (`location`, as given)."""

    def __init__(self, location: str, *, max_size: int = DEFAULT_MAX,
                 min_size: int = DEFAULT_MIN, timeout: float = 30.0) -> None:
        self.location = location
        self.max_size = max_size
        self.timeout = timeout
        self.pool = ConnectionPool(
            location, min_size=min(min_size, max_size), max_size=max_size, open=False,
            kwargs=dict(CONNECT_OPTIONS),  # no prepared statements: connection.py says why
            configure=_configure, reset=_reset, timeout=timeout, name="memcli")

    def open(self) -> None:
        self.pool.open(wait=True, timeout=self.timeout)

    def borrow(self, wait: float | None = None) -> Any:
        """A connection for one request; DatabaseBusyError (exit 75, HTTP 503) when all
        `max_size` stay in use for `wait` seconds (default: the busy timeout)."""

        wait = self.timeout if wait is None else wait
        try:
            return self.pool.getconn(timeout=wait)
        except PoolTimeout:
            raise DatabaseBusyError(
                f"all {self.max_size} database connections of this daemon stayed busy for "
                f"{wait:g} s", "retry later, or raise `pool_size` (memcli serve "
                "--pool-size)") from None

    def give_back(self, conn: Any) -> None:
        if conn.info.transaction_status != TransactionStatus.IDLE:
            # Given back inside `transaction()` (its request died midway). psycopg refuses a
            # rollback inside its transaction block, so the pool's worker would discard the
            # connection some time later, and memcli's writer lock (taken for the
            # transaction) would stay held until then: the next request could find the
            # database busy. Roll back on the wire now, so the lock is free once this
            # returns, and close the connection: its transaction block is stale, so it can
            # serve no one else (the pool opens a new one).
            try:
                conn.pgconn.exec_(b"ROLLBACK")
            except psycopg.Error:  # a broken connection: closing it ends the transaction too
                pass
            conn.close()
        self.pool.putconn(conn)

    def stats(self) -> dict[str, int]:
        """What `serve status` shows: connections open, idle, and borrowed now."""
        raw = self.pool.get_stats()
        size = int(raw.get("pool_size", 0))
        idle = int(raw.get("pool_available", 0))
        return {"max": self.max_size, "open": size, "idle": idle, "in_use": size - idle}

    def close(self) -> None:
        self.pool.close()


def install(pool: PgPool) -> None:
    """Make `pool` the source of `connect(pool.location)` in this process."""
    with _guard:
        _installed[pool.location] = pool


def uninstall(pool: PgPool) -> None:
    with _guard:
        if _installed.get(pool.location) is pool:
            del _installed[pool.location]


def installed(location: str) -> PgPool | None:
    with _guard:
        return _installed.get(location)
