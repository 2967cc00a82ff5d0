"""The daemon's PostgreSQL connection pool (memcli/store/postgres/pool.py), on a real server:
borrowing through `connect`, what a returned connection must not carry to the next borrower,
and a pool with no connection to spare (busy, exit 75)."""

from __future__ import annotations

import time

import psycopg
import pytest

from memcli.errors import DatabaseBusyError
from memcli.store import postgres
from memcli.store.postgres.pool import PgPool, install, installed, uninstall


@pytest.fixture
def pool(pg_memcli_db: str):  # noqa: F811
    postgres.connect(pg_memcli_db).close()  # the daemon migrates first (holder.PoolHolder)
    made = PgPool(pg_memcli_db, max_size=2, timeout=2.0)
    made.open()
    install(made)
    try:
        yield made
    finally:
        uninstall(made)
        made.close()


def _settled(pool: PgPool) -> dict[str, int]:
    """The pool's numbers once returned connections are reset (a pool worker does that)."""
    deadline = time.monotonic() + 10
    while (stats := pool.stats())["in_use"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return stats


def _backends(url: str) -> int:
    """Client connections to the test's database, as the server counts them."""
    with psycopg.connect(url, autocommit=True) as admin:
        return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname ="
                             " current_database() AND pid <> pg_backend_pid()").fetchone()[0]


def test_connect_borrows_from_the_installed_pool_and_close_gives_back(pool: PgPool,
                                                                      pg_memcli_db: str) -> None:  # noqa: F811
    assert installed(pg_memcli_db) is pool
    for _ in range(5):  # five opens, never more than the pool's connections on the server
        db = postgres.connect(pg_memcli_db)
        db.set_meta("k", "v")
        assert db.get_meta("k") == "v"
        db.close()
        db.close()  # a second close does not give the connection back twice
    assert _settled(pool)["in_use"] == 0
    assert _backends(pg_memcli_db) <= 2


def test_a_returned_connection_carries_nothing_to_the_next_borrower(pool: PgPool,
                                                                     pg_memcli_db: str) -> None:  # noqa: F811
    reader = postgres.connect(pg_memcli_db, readonly=True)
    assert reader.try_run_lock("consolidate")  # taken, and (a bug) never released
    list(reader.stream("SELECT key FROM meta"))[:0]  # noqa: B018
    reader.close()
    held = [postgres.connect(pg_memcli_db) for _ in range(2)]  # whichever connection it was
    try:
        for db in held:
            assert db.scalar("SHOW default_transaction_read_only") == "off"
            with db.transaction():
                db.set_meta("written", "yes")
        # The run lock died with the borrow: any session can take it now.
        with psycopg.connect(pg_memcli_db, autocommit=True) as other:
            assert other.execute("SELECT pg_try_advisory_lock(hashtext(%s))",
                                 ("memcli.run.consolidate",)).fetchone()[0]
    finally:
        for db in held:
            db.close()


def test_an_open_transaction_is_rolled_back_when_its_connection_returns(pool: PgPool,
                                                                        pg_memcli_db: str) -> None:  # noqa: F811
    db = postgres.connect(pg_memcli_db)
    cm = db.transaction()
    cm.__enter__()
    db.set_meta("half", "done")
    db.close()  # the request died midway: nothing it wrote may land, the writer lock is free
    other = postgres.connect(pg_memcli_db)
    try:
        assert other.get_meta("half") is None
        with other.transaction(wait=0):
            other.set_meta("after", "ok")
    finally:
        other.close()


def test_an_exhausted_pool_is_busy_not_a_hang(pool: PgPool, pg_memcli_db: str) -> None:  # noqa: F811
    held = [postgres.connect(pg_memcli_db) for _ in range(2)]
    try:
        with pytest.raises(DatabaseBusyError) as caught:
            postgres.connect(pg_memcli_db)
        assert caught.value.exit_code == 75
        assert "pool-size" in str(caught.value)
        # A request's second (read-only) connection gives up after a short wait.
        with pytest.raises(DatabaseBusyError):
            postgres.connect(pg_memcli_db, readonly=True)
    finally:
        for db in held:
            db.close()
    postgres.connect(pg_memcli_db).close()  # free again


def test_another_location_is_not_served_by_the_pool(pool: PgPool, pg_memcli_db: str) -> None:  # noqa: F811
    other = pg_memcli_db + "?application_name=other"
    assert installed(other) is None
    db = postgres.connect(other)
    try:
        assert db._pool is None
    finally:
        db.close()
