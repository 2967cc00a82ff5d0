"""PostgreSQL's `Backend` (memcli.store.backend): the legs of legs.py, the generated `fts`
column, pgvector, schema.sql + migrations.py, VACUUM, and psycopg's errors.

What differs from SQLite's (memcli.store.sqlite.backend), by design:
- Lexical index maintenance: there is no index table to write. `memories.fts` is a generated
  tsvector (turn at weight A, context at weight B) that PostgreSQL keeps in step with the row,
  and its GIN is maintained by PostgreSQL. The `context` column (an episode's previous turn,
  the FTS5 context column's twin) is written by the memory's INSERT (`context_in_row`), or
  recomputed by index_memories/rebuild_lexical; removing, optimising and checking the index
  are no-ops (a deleted row's entries leave the GIN with the row, at VACUUM).
- Vectors: `memory_vectors.embedding` is a pgvector `vector` column with its HNSW index (no
  separate index table), plus the memory's tenant/user so the KNN walk filters inside the
  index. Blobs (float32, little-endian: SQLite's format, what the store passes) go in through
  pgvector's text form; reads come back as the same float32 blobs (connection.py's loader).
- Physical: `erase_physically` VACUUMs the tables a purge touches (their dead rows become
  free space no query, index or later reader can reach). PostgreSQL does not overwrite that
  space, nor its WAL, replicas and backups: what it promises is the deletion, not the bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from memcli.errors import DatabaseBusyError, StorageError
from memcli.policy.encryption import PREFIX
from memcli.store.backend import LogHealth
from memcli.store.batching import chunks, marks
from memcli.store.postgres import error_map, legs, lexical, migrations, sealing, sparse
from memcli.store.sealing import META_KEY_ID

if TYPE_CHECKING:
    from memcli.errors import StorageError
    from memcli.store.backend import LexicalQuery, LogHealth
    from memcli.store.filters import Filters
    from memcli.store.postgres.connection import PgDatabase

# Tables a purge deletes from (VACUUMed afterwards so their dead rows are reclaimed).
PURGED_TABLES = ("events", "artifacts", "memories", "memory_vectors",
                 "memory_sparse", "sparse_df", "lexeme_df", "lexical_stats", "memory_entities",
                 "relations", "history", "change_log", "sessions", "session_consolidation",
                 "decisions", "tasks", "checkpoints", "proposals", "request_metrics", "meta")

# The context of each memory as ingest gives it (memcli.store.sqlite.fts, the same rule): an
# episode's previous episode of its session; a `high` memory has none and is nobody's.
_CONTEXTS = """
    WITH plain AS (
        SELECT id, kind, session_id, tenant_id, event_seq, chunk_index,
               sensitivity = 'high' AS high,
               CASE WHEN sensitivity = 'high' THEN '' ELSE content END AS text
        FROM memories {where}),
    ctx AS (
        SELECT id, CASE WHEN kind = 'episode' AND session_id IS NOT NULL AND NOT high
                        THEN coalesce(lag(text) OVER (PARTITION BY tenant_id, session_id,
                                                      kind = 'episode'
                                                      ORDER BY event_seq, chunk_index), '')
                        ELSE '' END AS context
        FROM plain)
    UPDATE memories m SET context = ctx.context FROM ctx
    WHERE m.id = ctx.id AND m.context <> ctx.context {only}"""


class PgBackend:
    """The PostgreSQL engine (psycopg 3, pgvector, pg_trgm). Stateless, and built like
    SqliteBackend: a method that is one module function is that function."""

    name = "postgresql"
    schema_latest = migrations.LATEST
    # The lexical index is a column of memories and the vector index an index of
    # memory_vectors: no derived tables of the engine's own to count or rebuild.
    lexical_tables: tuple[str, ...] = ()
    vector_tables: tuple[str, ...] = ()
    sparse_tables: tuple[str, ...] = sparse.TABLES
    # `memories.context` is written by the memory's INSERT (memcli.store.memories): one
    # statement, one row version, and the lexical triggers count the row once.
    context_in_row = True

    # -- legs ---------------------------------------------------------------------------------
    def lexical(self, db: PgDatabase, query: LexicalQuery, filters: Filters, limit: int,
                context_weight: float) -> list[tuple[int, float]]:
        """One user's scope is small: the full statement. Wider scopes (a tenant, all
        tenants) skip the matches that cannot reach the top `limit` (lexical.py)."""
        if filters.user_id is not None:
            return legs.lexical(db, list(query.terms), filters, limit, context_weight)
        return lexical.search(db, list(query.terms), filters, limit, context_weight)

    def trigram(self, db: PgDatabase, query: LexicalQuery, filters: Filters,
                limit: int) -> list[tuple[int, float]]:
        return legs.trigram(db, list(query.grams), filters, limit)

    dense = staticmethod(legs.dense)
    best_in_scope = staticmethod(legs.best_in_scope)

    def semantic_neighbours(self, db: PgDatabase, memory_id: int, vector: bytes,
                            tenant_id: str, user_id: str | None, kinds: tuple[str, ...],
                            k: int) -> list[tuple[int, float]]:
        user = "m.user_id = ?" if user_id is not None else "m.user_id IS NULL"
        # m.id breaks ties (equal vectors): the oldest, not the scan's order, on both engines
        rows = db.execute(
            f"SELECT m.id, 1.0 - (v.embedding <=> ?::vector) AS s FROM memories m"
            f" JOIN memory_vectors v ON v.memory_id = m.id"
            f" WHERE m.id <> ? AND m.tenant_id = ? AND {user} AND m.state = 'active'"
            f" AND m.kind IN ({marks(kinds)}) ORDER BY s DESC, m.id LIMIT ?",
            [legs.vector_literal(vector), memory_id, tenant_id,
             *([user_id] if user_id is not None else []), *kinds, k])
        return [(int(i), float(s)) for i, s in rows]

    # -- lexical index: the `context` column (PostgreSQL maintains `fts` and its GIN) ---------
    def index_new_memories(self, db: PgDatabase, entries: list[tuple[int, str, str, tuple[
            str | None, str | None, str | None]]]) -> None:
        """No-op: the context was written with the row (`context_in_row`), and `fts`, its
        GIN and the BM25 statistics follow the row."""

    def index_memories(self, db: PgDatabase, ids: list[int]) -> None:
        """The contexts of these memories (import) by ingest's rule, from their sessions."""
        for part in chunks(ids, 1000):
            in_list = marks(part)
            where = ("WHERE (tenant_id, coalesce(session_id, '')) IN (SELECT tenant_id,"
                     f" coalesce(session_id, '') FROM memories WHERE id IN ({in_list}))")
            db.execute(_CONTEXTS.format(where=where, only=f"AND m.id IN ({in_list})"),
                       [*part, *part])

    def unindex_memories(self, db: PgDatabase, ids: list[int]) -> None:
        """No-op: a memory's `fts` goes with its row."""

    def rebuild_lexical(self, db: PgDatabase) -> None:
        """Every memory's context again (`fts` is recomputed by PostgreSQL with the row)."""
        db.execute(_CONTEXTS.format(where="", only=""))
        legs.recount_lexical(db)

    def reset_lexical(self, db: PgDatabase) -> None:
        """Rebuild the GIN indexes over `fts` and the trigrams (REINDEX: a damaged index is
        made again from the table)."""
        for name in ("memories_fts", "memories_trgm"):
            if db.scalar("SELECT to_regclass(?) IS NOT NULL", (name,)):
                db.execute(f"REINDEX INDEX {name}")
        if db.scalar("SELECT to_regclass('lexeme_df') IS NOT NULL"):
            legs.recount_lexical(db)

    def optimize_lexical(self, db: PgDatabase) -> None:
        """No-op: deleted rows leave the GIN at VACUUM (erase_physically)."""

    def lexical_orphans(self, db: PgDatabase) -> dict[str, list[int]]:
        """Nothing can be orphaned: the index is a column of the row."""
        return {}

    def lexical_missing(self, db: PgDatabase) -> dict[str, list[int]]:
        return {}

    # -- vectors ------------------------------------------------------------------------------
    ensure_vectors = staticmethod(migrations.ensure_vectors)

    def insert_vectors(self, db: PgDatabase, rows: list[tuple[int, bytes]]) -> None:
        # The memory's tenant and user are copied beside the vector (the KNN walk's filter).
        # 100 rows a statement (a round trip each); one row per memory (the last given), as
        # an upsert may not touch a row twice in one statement.
        latest = list(dict(rows).items())
        for part in chunks(latest, 100):
            values = ", ".join(["(?::bigint, ?::vector)"] * len(part))
            db.execute(
                "INSERT INTO memory_vectors (memory_id, tenant_id, user_id, embedding)"
                " SELECT m.id, m.tenant_id, m.user_id, v.embedding"
                f" FROM (VALUES {values}) AS v(id, embedding) JOIN memories m ON m.id = v.id"
                " ORDER BY m.id"
                " ON CONFLICT (memory_id) DO UPDATE SET embedding = excluded.embedding,"
                " tenant_id = excluded.tenant_id, user_id = excluded.user_id",
                [v for memory_id, blob in part
                 for v in (memory_id, legs.vector_literal(bytes(blob)))])

    def store_vectors(self, db: PgDatabase, rows: list[tuple[int, bytes]]) -> None:
        """The same as insert_vectors: the pgvector column is the float copy, and its HNSW
        index is reindexed once by rebuild_vectors afterwards."""
        self.insert_vectors(db, rows)

    def delete_vectors(self, db: PgDatabase, ids: list[int]) -> None:
        for part in chunks(ids, 1000):
            db.execute(f"DELETE FROM memory_vectors WHERE memory_id IN"
                       f" ({marks(part)})", part)

    def reset_vectors(self, db: PgDatabase, dimension: int) -> None:
        db.execute("DELETE FROM memory_vectors")
        migrations.ensure_vectors(db, dimension)

    def rebuild_vectors(self, db: PgDatabase, dimension: int) -> None:
        migrations.ensure_vectors(db, dimension)
        # ensure_vectors leaves a dimension already set alone: a dropped HNSW index (the
        # dense leg then scans every vector) comes back here, as SQLite's vec0 table does.
        if db.scalar("SELECT to_regclass('memory_vectors_hnsw') IS NOT NULL"):
            db.execute("REINDEX INDEX memory_vectors_hnsw")
        else:
            db.execute(migrations.HNSW_INDEX)

    def vector_orphans(self, db: PgDatabase) -> dict[str, list[int]]:
        return {}

    # -- SPLADE: one sparsevec per memory (memcli.store.postgres.sparse) ----------------------
    write_sparse = staticmethod(sparse.write)
    sparse_terms = staticmethod(sparse.terms)
    delete_sparse = staticmethod(sparse.delete)
    reset_sparse = staticmethod(sparse.reset)
    recount_sparse_df = staticmethod(sparse.recount_df)

    def sparse_orphans(self, db: PgDatabase) -> dict[str, list[int]]:
        """None beyond memory_sparse's own (portable SQL): the vector is the memory's row."""
        return {}

    def delete_sparse_orphans(self, db: PgDatabase) -> None:
        """Nothing beyond memory_sparse (doctor deletes its orphans through the store)."""

    def sparse_search(self, db: PgDatabase, query: dict[int, float], filters: Filters,
                      limit: int, small_scope: bool) -> list[tuple[int, float]]:
        """Two plans, picked by `small_scope` as SQLite's are (sparse.search)."""
        return sparse.search(db, query, filters, limit, small_scope)

    # -- schema -------------------------------------------------------------------------------
    migrate = staticmethod(migrations.migrate)
    schema_version = staticmethod(migrations.current_version)

    def table_names(self, db: PgDatabase) -> set[str]:
        return {r[0] for r in db.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}

    def create_missing(self, db: PgDatabase) -> list[str]:
        """schema.sql's CREATE TABLE and CREATE INDEX statements of the missing tables, and
        its missing indexes of the tables that are there (the lexical GINs memories_fts and
        memories_trgm are indexes here, where SQLite has index tables: a dropped one leaves
        every query right but scanning; the HNSW index comes back in rebuild_vectors).
        Returns the tables it created."""
        missing = set(_table_statements()) - self.table_names(db)
        indexes = set(self.missing_indexes(db))
        for name in sorted(missing):
            for statement in _table_statements()[name]:
                db.conn.execute(statement)
        for statements in _table_statements().values():
            for statement in statements:
                index = _INDEX.match(statement)
                if index and index.group(1) in indexes:
                    db.conn.execute(statement)
        if "memory_sparse" in missing:  # its policy, triggers and column of later schemas
            for statement in migrations.sparse_table_steps(migrations.current_version(db)):
                db.execute(statement)
        if migrations.SPARSE_TERMS_INDEX_NAME in self.missing_indexes(db):
            db.execute(migrations.SPARSE_TERMS_INDEX)
        return sorted(missing)

    def missing_indexes(self, db: PgDatabase) -> list[str]:
        present = self.table_names(db)
        indexes = {r[0] for r in db.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")}
        wanted = [m.group(1) for statements in _table_statements().values()
                  for m in map(_INDEX.match, statements) if m and m.group(2) in present]
        if "memory_vectors" in present and migrations.vector_dimension(db):
            wanted.append("memory_vectors_hnsw")  # made once the embedder's dimension is known
        terms_index = migrations.sparse_terms_index(db)  # (schema 5's and 6's: not in schema.sql)
        if "memory_sparse" in present and terms_index:
            wanted.append(terms_index)
        return sorted(set(wanted) - indexes)

    def row_counts(self, db: PgDatabase, names: tuple[str, ...]) -> dict[str, int | None]:
        present = self.table_names(db)
        return {name: (int(db.scalar(f'SELECT count(*) FROM "{name}"'))
                       if name in present else None) for name in names}

    # -- physical -----------------------------------------------------------------------------
    salvage_hint = "restore a backup (pg_dump or point-in-time recovery); REINDEX a damaged index"

    def integrity_label(self, db: PgDatabase, full: bool) -> str:
        if db.scalar("SELECT 1 FROM pg_extension WHERE extname = 'amcheck'"):
            return "amcheck bt_index_check" + (" (heapallindexed)" if full else "")
        return "server page checks (amcheck not installed)"

    def integrity(self, db: PgDatabase, full: bool) -> list[str]:
        """amcheck's B-tree checks over memcli's indexes when the extension is installed
        (a DBA's step: `CREATE EXTENSION amcheck`); otherwise ["ok"]: PostgreSQL checks
        pages as it reads them (and data checksums, when enabled, catch damage then)."""
        if not db.scalar("SELECT 1 FROM pg_extension WHERE extname = 'amcheck'"):
            return ["ok"]
        problems = []
        for (index,) in db.execute(
                "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " JOIN pg_am a ON a.oid = c.relam JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE a.amname = 'btree' AND n.nspname = current_schema()").fetchall():
            try:
                db.execute("SELECT bt_index_check(?::regclass, ?)", (index, full))
            except Exception as exc:  # noqa: BLE001 - each index's damage is reported
                problems.append(f"{index}: {str(exc).splitlines()[0]}")
        return problems or ["ok"]

    def size_bytes(self, db: PgDatabase) -> int:
        return db.size_bytes()

    def secure_delete(self, db: PgDatabase, mode: int) -> int:
        """No-op (0): PostgreSQL has no such setting; erase_physically says what it does."""
        return 0

    def erase_physically(self, db: PgDatabase) -> bool:
        """VACUUM the tables a purge touches (outside any transaction, after its commit): their
        dead rows and index entries become reusable space no reader can see. True once done;
        False when a concurrent session kept the lock past busy_timeout. The bytes themselves
        may persist in that free space, the WAL, replicas and backups (README: PostgreSQL)."""
        present = self.table_names(db)
        try:
            db.execute("VACUUM " + ", ".join(t for t in PURGED_TABLES if t in present))
        except DatabaseBusyError:
            return False
        return True

    def may_erase(self, db: PgDatabase) -> bool:
        """VACUUM needs the table's owner (or MAINTAIN, PostgreSQL 17+); anyone else gets a
        warning and nothing done, so a tenant role's purge must not count on it."""
        maintain = ("has_table_privilege(c.oid, 'MAINTAIN')"
                    if int(db.scalar("SHOW server_version_num")) >= 170000
                    else "pg_has_role(c.relowner, 'USAGE')")
        return bool(db.scalar(
            f"SELECT coalesce(bool_and({maintain}), true) FROM pg_class c"
            " WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'"
            " AND c.relname = ANY (?)", (list(PURGED_TABLES),)))

    def log_health(self, db: PgDatabase) -> LogHealth:
        """No WAL of memcli's: the server's is the DBA's (checkpoints, max_wal_size, slots).
        Its counterpart of SQLite's long-lived reader is a long open transaction: it keeps
        VACUUM from removing the rows deleted since it began (a purge's text stays on disk
        until it ends). Only sessions this role may see in pg_stat_activity count."""
        row = db.execute(
            "SELECT extract(epoch FROM statement_timestamp() - xact_start)::float8, pid,"
            " application_name, state FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND xact_start IS NOT NULL ORDER BY xact_start LIMIT 1").fetchone()
        age, holder = 0.0, ""
        if row is not None:
            age = max(float(row[0]), 0.0)
            holder = f"pid {row[1]}" + (f", {row[2]}" if row[2] else "") + (
                f", {row[3]}" if row[3] else "")
        return LogHealth(wal_elsewhere="the PostgreSQL server manages its own WAL "
                                       "(checkpoints, max_wal_size)",
                         oldest_transaction=age, holder=holder)

    def checkpoint(self, db: PgDatabase) -> bool:
        """No-op: the server manages its WAL."""
        return True

    def defer_foreign_keys(self, db: PgDatabase) -> None:
        # Every foreign key of schema.sql is DEFERRABLE; this lasts until the transaction ends.
        db.execute("SET CONSTRAINTS ALL DEFERRED")

    # -- sealed values ------------------------------------------------------------------------
    def install_decryption(self, db: PgDatabase,
                           trace: Callable[[tuple], tuple | None]) -> None:
        """`db.row_trace` (PgDatabase calls it per row). A `high` artifact body is sealed text
        kept as UTF-8 in its `bytea` column: it reaches `trace` as that text, as on SQLite
        (where the BLOB column holds the text itself), so it is opened or its row left out."""
        sealed = PREFIX.encode()

        def opened(row: tuple) -> tuple | None:
            for value in row:
                if value.__class__ is bytes and value.startswith(sealed):
                    row = tuple(v.decode() if v.__class__ is bytes and v.startswith(sealed)
                                else v for v in row)
                    break
            return trace(row)

        db.row_trace = opened

    def data_version(self, db: PgDatabase) -> Any:
        """The database's key id: what the Sealer waits for (PostgreSQL has no counter of
        other connections' commits; one indexed read)."""
        return db.get_meta(META_KEY_ID) or ""  # (None would read as "not tracked")

    raw_rows = staticmethod(sealing.raw_rows)
    sealed_values = staticmethod(sealing.sealed_values)

    def reseal(self, db: PgDatabase, convert: Callable[[Any], Any], prefix: str) -> None:
        sealing.reseal(db, convert, prefix)

    # -- errors -------------------------------------------------------------------------------
    def environment_error(self, db: PgDatabase, exc: BaseException) -> StorageError | None:
        if isinstance(exc, StorageError):
            return exc
        found = error_map.mapped(exc, db.path, db.busy_timeout)
        return found if isinstance(found, StorageError) else None

    def take_run_lock(self, db: PgDatabase, name: str) -> bool | None:
        # A session advisory lock: the server frees it when the holder's connection ends.
        return db.try_run_lock(name)

    def drop_run_lock(self, db: PgDatabase, name: str) -> None:
        db.release_run_lock(name)

    def is_constraint_error(self, exc: BaseException) -> bool:
        return isinstance(exc, psycopg.errors.IntegrityError)


_STATEMENTS: dict[str, list[str]] = {}
_INDEX = re.compile(r"CREATE (?:UNIQUE )?INDEX (\w+) ON (\w+)")


def _table_statements() -> dict[str, list[str]]:
    """schema.sql's CREATE TABLE / CREATE INDEX / CREATE TRIGGER statements per table."""
    if not _STATEMENTS:
        text = re.sub(r"--[^\n]*", "", migrations.schema_sql())
        for statement in re.split(r";\s*\n", text):
            statement = statement.strip()
            found = (re.match(r"CREATE TABLE (\w+)", statement)
                     or re.match(r"CREATE (?:UNIQUE )?INDEX \w+ ON (\w+)", statement)
                     or re.match(r"CREATE TRIGGER \w+ .*? ON (\w+)", statement, re.S))
            if found:
                _STATEMENTS.setdefault(found.group(1), []).append(statement)
    return _STATEMENTS


BACKEND = PgBackend()
