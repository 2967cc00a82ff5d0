"""One psycopg connection to a memcli database on PostgreSQL, with the surface of SQLite's
`Database` (memcli/store/connection.py), so the portable store SQL runs on either.

- SQL arrives in SQLite's placeholder style and is rewritten once per text (placeholders.py);
  values are typed per adapt.py.
- Reads outside a transaction run in autocommit (each statement sees the latest commits, as
  a SQLite read does). `transaction()` is BEGIN + `SET LOCAL lock_timeout` (the busy timeout,
  or `wait`) + `pg_advisory_xact_lock(WRITER_KEY)`: one writer at a time per database, the
  guarantee the store's read-then-write code relies on with SQLite's `BEGIN IMMEDIATE` (design
  note (f) "Write concurrency"; per tenant later). Nested use is a savepoint. A wait past the
  timeout is exit 75, as on SQLite. Single statements outside `transaction()` (autocommit)
  take no writer lock, as each is atomic on its own.
- Rows of `high` items are opened (or left out without a key) on every row path but
  `stream(raw=True)` (crypto.py).
- Errors: psycopg's, by SQLSTATE, become memcli's one-line errors (errors.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.pq import TransactionStatus

from memcli.core.locations import shown
from memcli.errors import NoDatabaseError, SchemaError
from memcli.store.meta import MetaRows
from memcli.store.postgres import adapt, error_map, migrations, tenants
from memcli.store.postgres.backend import BACKEND
from memcli.store.postgres.dialect import DIALECT
from memcli.store.postgres.placeholders import rewrite
from memcli.store.sealing import Sealer

if TYPE_CHECKING:
    from memcli.store.connection import Params
    from memcli.store.postgres.pool import PgPool

SECOND_WAIT = 1.0  # see pool.py: a read-only (second) borrow waits only this long

BUSY_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10  # seconds libpq waits for the server to answer at all
# No server-side prepared statements (psycopg prepares a statement run 5 times on a connection).
# A prepared statement outlives a change of the table under it: after another connection's
# `ALTER TABLE` (a re-index to another dimension alters memory_vectors.embedding's type, a
# newer memcli's migration adds a column) every later run of a statement whose result held it
# fails with "cached plan must not change result type", for the life of the connection, which
# in the daemon's pool or a long-lived library `Memory` is long. What preparing saves (parse
# and analyse) did not show in query times (bench in docs/design/postgresql.md), and most of
# memcli's statements differ per call anyway (term and id counts). It also lets memcli run
# behind a transaction-mode PgBouncer.
CONNECT_OPTIONS = {"autocommit": True, "connect_timeout": CONNECT_TIMEOUT,
                   "prepare_threshold": None}
# The one advisory lock key of memcli writers (a stable 63-bit number from a name, so another
# program using advisory locks in the same database is unlikely to collide with it).
WRITER_KEY = int.from_bytes(hashlib.sha256(b"memcli.writer").digest()[:8], "big") >> 1
_names = itertools.count(1)


def masked(location: str) -> str:
    """`location` as messages show it: the password of a URL or keyword string masked."""
    return shown(location)


class Rows:
    """What `execute` returns: the rows of one statement, iterable and fetchone/fetchall-able
    like an apsw cursor, with `high` rows opened or left out."""

    def __init__(self, cursor: psycopg.Cursor, opener) -> None:
        self.cursor = cursor
        self.description = cursor.description
        self._opener = opener

    def _rows(self) -> Iterator[tuple]:
        if self.description is None:  # no result set (INSERT without RETURNING, DDL)
            return
        for row in self.cursor:
            if self._opener is not None:
                row = self._opener(row)
                if row is None:
                    continue
            yield row

    def __iter__(self) -> Iterator[tuple]:
        return self._rows()

    def fetchone(self) -> tuple | None:
        return next(self._rows(), None)

    def fetchall(self) -> list[tuple]:
        return list(self._rows())

    @property
    def rowcount(self) -> int:
        return self.cursor.rowcount


class PgDatabase(MetaRows):
    """One PostgreSQL connection to a memcli database (its current schema), migrated."""

    vec_enabled = True  # pgvector is part of the schema (an extension the migration creates)
    vec_warning: str | None = None
    # apsw's connection row tracer, on psycopg: every row of execute/query/scalar/stream goes
    # through it (None: the row is left out). Set by the Sealer once the database has a key id.
    row_trace: Callable[[tuple], tuple | None] | None = None

    def __init__(self, location: str, *, readonly: bool = False, must_exist: bool = False,
                 busy_timeout: float = BUSY_TIMEOUT, pool: PgPool | None = None) -> None:
        """`pool`: borrow the connection from it (the daemon's, pool.py) and give it back on
        `close()`, instead of connecting."""
        self.location = location
        self.backend = BACKEND  # the engine's operations (memcli.store.backend)
        self.dialect = DIALECT  # SQL fragments in PostgreSQL's spelling
        self.path = masked(location)  # for messages; never the password
        self.busy_timeout = busy_timeout
        self.read_only = readonly
        self._pool = pool
        if pool is not None:
            # Configured by the pool (adapters, pgvector types).
            self.conn = pool.borrow(SECOND_WAIT if readonly else None)
        else:
            try:
                self.conn = psycopg.connect(location, **CONNECT_OPTIONS)
            except psycopg.Error as exc:
                raise error_map.connect_error(exc, self.path, must_exist=must_exist) from None
        try:
            if pool is None:
                adapt.configure(self.conn)
            if readonly:
                self.execute("SET default_transaction_read_only = on")
            tables = self._foreign_check()
            if not tables and (readonly or must_exist):
                raise NoDatabaseError(f"no memcli database at {self.path} (it has no memcli "
                                      "tables)", "check --db or MEMCLI_DB; `memcli ingest` "
                                      "creates them")
            if readonly:
                migrations.check_version(self)
            else:
                migrations.migrate(self)
            if pool is None:
                self._register_vector()
            # The tenant this login role is bound to (row-level security), or None.
            self.bound_tenant = tenants.bound_tenant(self)
            self.crypto = Sealer(self)  # `high` values, through backend.install_decryption
        except BaseException:
            self.close()
            raise

    def _foreign_check(self) -> list[str]:
        """The tables of the connection's schema; SchemaError when they are another
        program's (memcli never migrates tables it did not make)."""
        # pg_tables, not information_schema: the latter hides tables this user may not read,
        # and a missing privilege must say so rather than look like an empty database.
        tables = [r[0] for r in self.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
        if tables and not {"meta", "events"} <= set(tables):
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            schema = self.scalar("SELECT current_schema()")
            raise SchemaError(f"schema {schema} of {self.path} holds another program's tables"
                              f" ({shown})", "give memcli its own database or schema "
                              "(options=-csearch_path=<schema>)")
        return tables

    def _register_vector(self) -> None:
        """`vector` values read back as float32 little-endian blobs, SQLite's format, which
        the store passes around (vectors are written through pgvector's text form,
        legs.vector_literal)."""
        oid = self.scalar("SELECT oid FROM pg_type WHERE typname = 'vector'")
        if oid:
            adapt.register_vector_loader(self.conn, int(oid))

    # -- the surface of memcli.store.connection.Database ------------------------------------
    def _opener(self) -> Callable[[tuple], tuple | None] | None:
        return self.row_trace

    def _fail(self, exc: psycopg.Error, waited: float | None = None) -> Exception:
        mapped = error_map.mapped(exc, self.path,
                               self.busy_timeout if waited is None else waited)
        return mapped if mapped is not None else exc

    @contextlib.contextmanager
    def _mapped(self, waited: float | None = None) -> Iterator[None]:
        """psycopg's errors raised as memcli's (busy, refused, ...: error_map.py); an error
        with no mapping is raised as it is."""
        try:
            yield
        except psycopg.Error as exc:
            failure = self._fail(exc, waited)
            if failure is exc:
                raise
            raise failure from exc

    def execute(self, sql: str, params: Params = None) -> Rows:
        plan = rewrite(sql)
        with self._mapped():
            cursor = self.conn.execute(*plan.render(params))
        return Rows(cursor, self._opener())

    def executemany(self, sql: str, seq) -> None:
        plan = rewrite(sql)
        with self._mapped(), self.conn.cursor() as cursor:
            cursor.executemany(plan.sql, [plan.bind(p) for p in seq])

    def query(self, sql: str, params: Params = None) -> list[dict]:
        """Rows as dicts (column name -> value)."""
        rows = self.execute(sql, params)
        if rows.description is None:
            return []
        names = [d.name for d in rows.description]
        return [dict(zip(names, row, strict=True)) for row in rows]

    def stream(self, sql: str, params: Params = None, *,
               raw: bool = False) -> Iterator[dict]:
        """Rows as dicts, one batch at a time from a server-side cursor (a whole table never
        sits in memory; other statements may run between rows). `raw`: values as stored."""
        plan = rewrite(sql)
        opener = None if raw else self._opener()
        # Outside a transaction (autocommit) a server-side cursor must be WITH HOLD.
        cursor = self.conn.cursor(name=f"memcli_stream_{next(_names)}",
                                  withhold=not self.in_transaction)
        try:
            with self._mapped():
                cursor.execute(*plan.render(params))
            if cursor.description is None:
                return
            names = [d.name for d in cursor.description]
            for row in cursor:
                if opener is not None:
                    row = opener(row)
                    if row is None:
                        continue
                yield dict(zip(names, row, strict=True))
        finally:
            with contextlib.suppress(psycopg.Error):
                cursor.close()

    def scalar(self, sql: str, params: Params = None) -> Any:
        row = self.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def insert(self, sql: str, params: Params = None) -> int:
        """Run an `INSERT ... RETURNING id` and return that id."""
        return int(self.execute(sql, params).fetchall()[0][0])

    def change_count(self, sql: str, params: Params = None) -> int:
        """Run an UPDATE/DELETE/INSERT and return how many rows it changed."""
        return int(self.execute(sql, params).rowcount)

    @property
    def in_transaction(self) -> bool:
        return self.conn.info.transaction_status != TransactionStatus.IDLE

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """A nested unit inside the current transaction, rolled back alone when its body
        raises; outside one, a transaction of its own (with the writer lock: SQLite's
        savepoint-as-transaction takes the file's write lock at its first write)."""
        if not self.in_transaction:
            with self.transaction():
                yield
            return
        with self.conn.transaction():
            yield

    @contextlib.contextmanager
    def transaction(self, *, wait: float | None = None) -> Iterator[None]:
        """One atomic unit of work holding memcli's writer lock for its whole length.
        `wait`: seconds to wait for that lock instead of `busy_timeout`."""
        if self.in_transaction:
            with self.savepoint():
                yield
            return
        wait = self.busy_timeout if wait is None else wait
        # (mapped: COMMIT itself, or a raw psycopg error of the body)
        with self._mapped(wait), self.conn.transaction():
            self._lock_writer(wait)
            yield

    def _lock_writer(self, wait: float) -> None:
        if wait <= 0:  # lock_timeout 0 means "no limit" to PostgreSQL: try once instead
            if not self.scalar("SELECT pg_try_advisory_xact_lock(?)", (WRITER_KEY,)):
                raise error_map.busy(0)
            return
        self.execute("SELECT set_config('lock_timeout', ?, true)",
                     (f"{max(int(wait * 1000), 1)}ms",))
        try:
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_KEY,))
        except psycopg.Error as exc:
            raise self._fail(exc, wait) from exc

    # -- run locks (lifecycle commands) ------------------------------------------------------
    def try_run_lock(self, name: str) -> bool:
        """Take memcli's session-level advisory lock `name` (e.g. "consolidate") without
        waiting; False when another session holds it. It dies with this session, so a crashed
        holder on any host frees it at once: no expiry or pid check is needed, unlike the
        `run_locks` row (kept for display: who holds what)."""
        return bool(self.scalar("SELECT pg_try_advisory_lock(hashtext(?))",
                                (f"memcli.run.{name}",)))

    def release_run_lock(self, name: str) -> None:
        self.scalar("SELECT pg_advisory_unlock(hashtext(?))", (f"memcli.run.{name}",))

    def size_bytes(self) -> int:
        """Bytes of memcli's tables in this schema, with their indexes and TOAST."""
        return int(self.scalar(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'm')"))

    def close(self) -> None:
        if self._pool is None:
            self.conn.close()
        elif self.conn is not None:  # back to the pool once, however often close() is called
            conn, self.conn = self.conn, None
            self._pool.give_back(conn)
