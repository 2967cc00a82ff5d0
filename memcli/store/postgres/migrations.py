"""Schema versions on PostgreSQL: `meta.schema_version`, the same numbers as SQLite's.

PostgreSQL has no `PRAGMA user_version`; the version is a row of `meta`. An empty schema gets
schema.sql (the whole current schema) in one transaction; an older database gets each missing
step in its own transaction with its version bump (PostgreSQL DDL is transactional, so "one
transaction each" holds as on SQLite); a database newer than this code is refused.

Every step runs under `pg_advisory_xact_lock(hashtext('memcli.migrate'))`: two processes
opening a fresh database at once queue there, and the second re-reads the version after the
first committed and finds nothing to do.

The first PostgreSQL schema is SQLite's version 2 (`BASE`): no PostgreSQL database exists at
version 1. Each later SQLite migration (memcli/store/migrations.py) gets its twin in `STEPS`
in the same commit; tests/pg/test_pg_schema.py fails until it does (LATEST and the columns).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING

from memcli.errors import EmbedderMismatchError, SchemaError
from memcli.store.postgres.tenants import may_migrate, table_owner

if TYPE_CHECKING:
    from memcli.store.postgres.connection import PgDatabase

BASE = 2  # the version schema.sql creates


def _script(name: str) -> Callable[[PgDatabase], None]:
    """A step that runs one SQL file of this package."""
    def step(db: PgDatabase) -> None:
        db.conn.execute(resources.files("memcli.store.postgres").joinpath(name)
                        .read_text("utf-8"))
    return step


# Steps after BASE, in order: STEPS[0] brings BASE to BASE + 1. Append only.
STEPS: list[Callable[[PgDatabase], None]] = [
    # 3: entities by tenant (SQLite's migration 3), tenant-bound roles and row-level security.
    _script("v3_tenancy.sql"),
    # 4: sparse_df kept by definer statement triggers on memory_sparse; bound roles read it only.
    _script("v4_sparse_df.sql"),
    # 5: a GIN index over each sparse vector's term ids: a big scope's sparse leg scores only
    # the memories sharing a term with the query (sparse.py).
    _script("v5_sparse_terms.sql"),
    # 6: memory_sparse gets its memory's tenant (backfilled, then kept by a trigger), and the
    # term index becomes (tenant_id, term ids): a tenant-wide sparse leg reads only its tenant's.
    _script("v6_sparse_tenant.sql"),
    # 7: events gain the kind `command` (memcli's own writes, recorded before their rows).
    _script("v7_command_events.sql"),
    # 8: one role vocabulary (SQLite's migration 8): user -> human, assistant -> agent.
    _script("v8_roles.sql"),
]
LATEST = BASE + len(STEPS)
VERSION_KEY = "schema_version"
_LOCK = "SELECT pg_advisory_xact_lock(hashtext('memcli.migrate'))"


def schema_sql() -> str:
    return resources.files("memcli.store.postgres").joinpath("schema.sql").read_text("utf-8")


def current_version(db: PgDatabase) -> int:
    if not db.scalar("SELECT to_regclass('meta') IS NOT NULL"):
        return 0
    return int(db.get_meta(VERSION_KEY) or 0)


def check_version(db: PgDatabase) -> int:
    version = current_version(db)
    if version > LATEST:
        raise SchemaError(
            f"database {db.path} has schema version {version}, newer than this memcli "
            f"(supports up to {LATEST})", "upgrade memcli")
    return version


def migrate(db: PgDatabase) -> int:
    """Bring the database to LATEST; returns the version it started from."""
    start = check_version(db)
    if start == LATEST:
        return start
    if start > 0:
        if not may_migrate(db):  # e.g. a tenant role: ALTER is its tables' owner's alone
            raise SchemaError(
                f"database {db.path} has schema version {start}; this memcli needs {LATEST},"
                f" and only the owner of its tables ({table_owner(db)}) can upgrade it",
                f"open it once as {table_owner(db)} (e.g. `memcli stats --db ...` as that "
                "user)")
    if start == 0:
        with db.transaction():
            db.execute(_LOCK)
            if current_version(db) == 0:  # nobody created it while we waited
                # Through psycopg directly: a script of many statements, no parameters.
                db.conn.execute(schema_sql())
                db.set_meta(VERSION_KEY, str(BASE))
        start_steps = check_version(db)
    else:
        start_steps = start
    for version in range(start_steps + 1, LATEST + 1):
        with db.transaction():
            db.execute(_LOCK)
            if check_version(db) >= version:  # another process did it meanwhile
                continue
            STEPS[version - BASE - 1](db)
            db.set_meta(VERSION_KEY, str(version))
    return start


# The dense leg's index (also made again by `memcli rebuild` when dropped: backend.py).
HNSW_INDEX = ("CREATE INDEX memory_vectors_hnsw ON memory_vectors"
              " USING hnsw (embedding vector_cosine_ops)")


# The sparse leg's term index by tenant (schema 6, v6_sparse_tenant.sql makes it with the same
# text; schema 5's memory_sparse_terms had the term ids alone). Also made again by `memcli
# rebuild` when it or its table was dropped: backend.py create_missing.
SPARSE_TERMS_INDEX_NAME = "memory_sparse_tenant_terms"
SPARSE_TERMS_INDEX = ("CREATE INDEX memory_sparse_tenant_terms ON memory_sparse"
                      " USING gin (tenant_id, memcli_sparse_term_array(vec))")


def sparse_table_steps(version: int) -> list[str]:
    """What the steps up to `version` gave memory_sparse beyond schema.sql's table, for `memcli
    rebuild` creating a dropped one again (the functions outlive the table): the row-level
    policy (schema 3, v3_tenancy.sql: a bound role sees its tenant's vectors only), the
    sparse_df triggers (schema 4, taken from v4_sparse_df.sql), the tenant column and its
    trigger (schema 6, v6_sparse_tenant.sql)."""
    steps = []
    if version >= 3:
        mine = "EXISTS (SELECT 1 FROM memories m WHERE m.id = memory_sparse.memory_id)"
        steps += ["ALTER TABLE memory_sparse ENABLE ROW LEVEL SECURITY",
                  f"CREATE POLICY tenant_rows ON memory_sparse USING ({mine})"
                  f" WITH CHECK ({mine})"]
    if version >= 4:
        text = resources.files("memcli.store.postgres").joinpath("v4_sparse_df.sql").read_text(
            "utf-8")
        steps += re.findall(r"CREATE TRIGGER memory_sparse_df_\w+ .*?(?=;)", text, re.S)
    if version >= 6:
        steps += ["ALTER TABLE memory_sparse ADD COLUMN tenant_id text NOT NULL",
                  "CREATE TRIGGER memory_sparse_tenant BEFORE INSERT OR UPDATE OF memory_id,"
                  " tenant_id ON memory_sparse FOR EACH ROW EXECUTE FUNCTION"
                  " memcli_sparse_tenant()"]
    return steps


def sparse_terms_index(db: PgDatabase) -> str | None:
    """The name of the sparse leg's term index at this database's schema (None before 5)."""
    version = current_version(db)
    if version >= 6:
        return SPARSE_TERMS_INDEX_NAME
    return "memory_sparse_terms" if version == 5 else None


def ensure_vectors(db: PgDatabase, dimension: int) -> None:
    """Give `memory_vectors.embedding` its dimension and HNSW cosine index (the embedder's
    dimension is known only when it is first used). Nothing to do when it already has this
    dimension; a different one is refused while vectors exist (re-embed first)."""
    if _dimension(db) == dimension:
        return
    with db.transaction():
        db.execute(_LOCK)
        current = _dimension(db)
        if current == dimension:
            return
        if db.scalar("SELECT EXISTS (SELECT 1 FROM memory_vectors)"):
            raise EmbedderMismatchError(
                f"the stored vectors have {current} dimensions, the embedder makes {dimension}",
                "run `memcli reindex` to re-embed with the configured model")
        db.execute("DROP INDEX IF EXISTS memory_vectors_hnsw")
        db.execute("ALTER TABLE memory_vectors ALTER COLUMN embedding"
                   f" TYPE vector({int(dimension)})")
        db.execute(HNSW_INDEX)


def _dimension(db: PgDatabase) -> int | None:
    """The declared dimension of memory_vectors.embedding (None: not set yet)."""
    return db.scalar("SELECT nullif(atttypmod, -1) FROM pg_attribute"
                     " WHERE attrelid = 'memory_vectors'::regclass AND attname = 'embedding'")


def vector_dimension(db: PgDatabase) -> int | None:
    """The dimension memory_vectors.embedding was given (None: no embedder has written yet)."""
    return _dimension(db)
