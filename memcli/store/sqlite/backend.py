"""SQLite's `Backend` (memcli.store.backend): FTS5, vec0, PRAGMAs, VACUUM, the row tracer."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

from memcli.errors import DatabaseBusyError, MemcliError
from memcli.store import search_sql
from memcli.store.backend import LogHealth
from memcli.store.sparse import SCALE
from memcli.store.sqlite import fts, migrations, sparse, vec
from memcli.store.sqlite.error_map import environment_error

if TYPE_CHECKING:
    from memcli.errors import StorageError
    from memcli.store.backend import LogHealth
    from memcli.store.filters import Filters
    from memcli.store.sqlite.connection import Database


class SqliteBackend:
    """The SQLite engine (apsw, FTS5, sqlite-vec). Stateless: one instance serves every
    connection (state lives on the `Database`). A method that is one module function with the
    same parameters is that function (`staticmethod`), not a wrapper that repeats it."""

    name = "sqlite"
    schema_latest = migrations.LATEST
    lexical_tables: tuple[str, ...] = fts.LEXICAL_TABLES
    vector_tables: tuple[str, ...] = ("vec_memories",)
    sparse_tables: tuple[str, ...] = sparse.TABLES
    context_in_row = False  # the context lives only in FTS5's context column (index_new_memories)

    # -- legs ---------------------------------------------------------------------------------
    lexical = staticmethod(fts.lexical)
    trigram = staticmethod(fts.trigram)
    dense = staticmethod(vec.dense)

    # CROSS JOIN keeps the sorted scores as the outer loop: portable SQL otherwise.
    best_in_scope = staticmethod(search_sql.joined_best_in_scope)
    semantic_neighbours = staticmethod(vec.semantic_neighbours)

    # -- lexical index ------------------------------------------------------------------------
    index_new_memories = staticmethod(fts.index_new_memories)
    index_memories = staticmethod(fts.index_memories)
    unindex_memories = staticmethod(fts.unindex_memories)
    rebuild_lexical = staticmethod(fts.rebuild_lexical)
    reset_lexical = staticmethod(fts.reset_lexical)
    optimize_lexical = staticmethod(fts.optimize_lexical)
    lexical_orphans = staticmethod(fts.lexical_orphans)
    lexical_missing = staticmethod(fts.lexical_missing)

    # -- vectors ------------------------------------------------------------------------------
    ensure_vectors = staticmethod(vec.ensure_vec_table)
    insert_vectors = staticmethod(vec.insert_vectors)

    def store_vectors(self, db: Database, rows: list[tuple[int, bytes]]) -> None:
        # Float copies only: the vec0 table is remade from them at the end (rebuild_vectors).
        db.executemany(
            "INSERT INTO memory_vectors (memory_id, embedding) VALUES (?, ?)"
            " ON CONFLICT (memory_id) DO UPDATE SET embedding = excluded.embedding", rows)

    delete_vectors = staticmethod(vec.delete_vectors)
    reset_vectors = staticmethod(vec.reset_vectors)
    rebuild_vectors = staticmethod(vec.rebuild_index)

    def vector_orphans(self, db: Database) -> dict[str, list[int]]:
        # (a vec0 table can only be read with sqlite-vec loaded)
        return {"vec_memories": vec.vector_orphans(db)} if db.vec_enabled else {}

    # -- SPLADE postings (memcli.store.sqlite.sparse) ---------------------------------------
    write_sparse = staticmethod(sparse.write)
    sparse_terms = staticmethod(sparse.terms)
    delete_sparse = staticmethod(sparse.delete)
    reset_sparse = staticmethod(sparse.reset)
    recount_sparse_df = staticmethod(sparse.recount_df)
    sparse_orphans = staticmethod(sparse.orphans)
    delete_sparse_orphans = staticmethod(sparse.delete_orphans)

    def sparse_search(self, db: Database, query: dict[int, float], filters: Filters,
                      limit: int, small_scope: bool) -> list[tuple[int, float]]:
        return sparse.search(db, query, filters, limit, small_scope, SCALE)

    # -- schema -------------------------------------------------------------------------------
    migrate = staticmethod(migrations.migrate)
    schema_version = staticmethod(migrations.current_version)
    table_names = staticmethod(migrations.table_names)

    def create_missing(self, db: Database) -> list[str]:
        # schema.sql again (every statement is IF NOT EXISTS): dropped tables, indexes and
        # triggers come back empty, existing ones are left alone.
        before = self.table_names(db)
        db.conn.execute(migrations.schema_sql())
        return sorted(self.table_names(db) - before)

    def missing_indexes(self, db: Database) -> list[str]:
        present = self.table_names(db)
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")}
        wanted = {m.group(1) for m in _INDEX.finditer(migrations.schema_sql())
                  if m.group(2) in present}
        return sorted(wanted - indexes)

    def row_counts(self, db: Database, names: tuple[str, ...]) -> dict[str, int | None]:
        # FTS5 tables are counted by their docsize shadow table: a contentless table cannot
        # be scanned, and its docsize holds one row per indexed memory.
        present = self.table_names(db)
        out: dict[str, int | None] = {}
        for name in names:
            source = f"{name}_docsize" if name in fts.LEXICAL_TABLES else name
            # (a vec0 table can only be read with sqlite-vec loaded)
            unreadable = name == "vec_memories" and not db.vec_enabled
            if name not in present or source not in present or unreadable:
                out[name] = None
                continue
            out[name] = int(db.scalar(f"SELECT count(*) FROM {source}"))
        return out

    # -- physical -----------------------------------------------------------------------------
    salvage_hint = "restore a backup, or salvage with `sqlite3 DB .recover`"

    def integrity_label(self, db: Database, full: bool) -> str:
        return "integrity_check" if full else "quick_check"

    def integrity(self, db: Database, full: bool) -> list[str]:
        # quick_check skips the comparison of index contents with their tables.
        pragma = "integrity_check" if full else "quick_check"
        return [str(r[0]) for r in db.execute(f"PRAGMA {pragma}(20)")]

    def size_bytes(self, db: Database) -> int:
        if db.path == ":memory:":
            return int(db.scalar("PRAGMA page_count") * db.scalar("PRAGMA page_size"))
        total = 0
        for suffix in ("", "-wal"):
            p = Path(db.path + suffix)
            if p.exists():
                total += p.stat().st_size
        return total

    def secure_delete(self, db: Database, mode: int) -> int:
        old = int(db.scalar("PRAGMA secure_delete"))
        db.execute(f"PRAGMA secure_delete = {('OFF', 'ON', 'FAST')[int(mode)]}")  # 2 is not FAST
        return old

    def may_erase(self, db: Database) -> bool:
        return True  # whoever may write the file may rewrite it

    def erase_physically(self, db: Database) -> bool:
        # VACUUM rewrites the whole file: free pages, and stale bytes that page splits leave
        # in the unused middle of live pages (secure_delete cannot reach those), are gone
        # afterwards; then the WAL, which still holds old page images, is truncated.
        try:
            db.execute("VACUUM")
        except DatabaseBusyError:
            return False  # another writer kept the lock past busy_timeout
        return self.checkpoint(db)

    def log_health(self, db: Database) -> LogHealth:
        if db.path == ":memory:":
            return LogHealth()
        wal = Path(db.path + "-wal")
        return LogHealth(wal_bytes=wal.stat().st_size if wal.exists() else 0)

    def checkpoint(self, db: Database) -> bool:
        # TRUNCATE waits for readers through the busy handler (busy_timeout); False when a
        # reader still holds an old snapshot after that wait (its frames stay).
        try:
            row = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except (apsw.Error, MemcliError):
            return False
        # (busy, frames in the WAL, frames checkpointed): -1 frames when not in WAL mode.
        return row is None or (row[0] == 0 and row[1] <= 0)

    def defer_foreign_keys(self, db: Database) -> None:
        db.execute("PRAGMA defer_foreign_keys = ON")  # ends with the transaction

    # -- sealed values ------------------------------------------------------------------------
    def install_decryption(self, db: Database, trace: Callable[[tuple], tuple | None]) -> None:
        # apsw drops a row its connection's row tracer returns None for.
        db.conn.row_trace = lambda _cursor, row: trace(row)

    def data_version(self, db: Database) -> Any:
        return db.scalar("PRAGMA data_version")

    def raw_rows(self, db: Database, sql: str, params: tuple) -> list[tuple]:
        cursor = db.conn.cursor()
        cursor.row_trace = lambda _c, row: row  # a cursor's tracer replaces the connection's
        return list(cursor.execute(sql, params))

    def sealed_columns(self, db: Database) -> list[tuple[str, str]]:
        # Ordinary tables only: virtual tables and their shadow tables hold no sealed text.
        out = []
        for name, kind in db.conn.execute(
                "SELECT name, type FROM pragma_table_list WHERE schema = 'main'"):
            if kind != "table" or name.startswith("sqlite_"):
                continue
            for (column,) in db.conn.execute("SELECT name FROM pragma_table_info(?)", (name,)):
                out.append((name, column))
        return out

    def sealed_values(self, db: Database, prefix: str) -> dict[str, list[str]]:
        # A `high` artifact body is the sealed text itself in its BLOB column (no affinity).
        found: dict[str, list[str]] = {}
        for table, column in self.sealed_columns(db):
            values = [r[0] for r in self.raw_rows(
                db, f'SELECT "{column}" FROM "{table}" WHERE substr("{column}", 1, ?) = ?',
                (len(prefix), prefix))]
            if values:
                found[f"{table}.{column}"] = values
        return found

    def reseal(self, db: Database, convert: Callable[[Any], Any], prefix: str) -> None:
        # The events table refuses UPDATE (append-only): its trigger is dropped and
        # re-created inside the caller's transaction.
        db.conn.create_scalar_function("memcli_reseal", convert, 1)
        trigger = db.scalar("SELECT sql FROM sqlite_schema WHERE type = 'trigger'"
                            " AND name = 'events_no_update'")
        if trigger:
            db.execute("DROP TRIGGER events_no_update")
        for table, column in self.sealed_columns(db):
            db.execute(f'UPDATE "{table}" SET "{column}" = memcli_reseal("{column}")'
                       f' WHERE substr("{column}", 1, ?) = ?', (len(prefix), prefix))
        if trigger:
            db.execute(trigger)

    # -- errors -------------------------------------------------------------------------------
    def take_run_lock(self, db: Database, name: str) -> bool | None:
        # No session lock in SQLite: the `run_locks` row (expiry, pid on this host) is the lock.
        return None

    def drop_run_lock(self, db: Database, name: str) -> None:
        pass

    def environment_error(self, db: Database, exc: BaseException) -> StorageError | None:
        return environment_error(exc, db.path)

    def is_constraint_error(self, exc: BaseException) -> bool:
        return isinstance(exc, apsw.ConstraintError)


# schema.sql's indexes: name and table.
_INDEX = re.compile(r"CREATE (?:UNIQUE )?INDEX IF NOT EXISTS (\w+) ON (\w+)")

BACKEND = SqliteBackend()
