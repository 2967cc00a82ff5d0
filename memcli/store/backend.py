"""The store seam: what store code needs that differs between engines.

Every `Database` carries `db.backend` (its engine's `Backend`) and `db.dialect` (its SQL
fragments, memcli.store.dialect). Portable SQL (most of memcli.store) runs on any engine
through `db.execute/query/scalar/insert`; what cannot be written once goes through the
backend: the lexical, trigram and dense retrieval legs and their index maintenance, the
schema (migrations, table listing), the physical side (integrity, size, erasure after a
purge), the sealed-value plumbing of key rotation, and the mapping of engine errors.
SQLite's implementation: memcli.store.sqlite.backend. Every method takes the `Database` first.

Ranking stays above the store: a leg returns (memory id, score) pairs, best first; only the
order within a leg matters to fusion (z-score or RRF), never the scale of its scores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from memcli.errors import StorageError
    from memcli.store.filters import Filters

Hits = list[tuple[int, float]]
# The engine's own Database class (each backend takes the connection of its engine, which its
# methods may reach below the shared surface of memcli.store.connection.Database).
DB = TypeVar("DB", contravariant=True)


@dataclass(frozen=True)
class LexicalQuery:
    """A query's text as the lexical legs search it, engine-neutral (each backend renders it:
    an FTS5 MATCH string on SQLite, a tsquery on PostgreSQL). Built by
    memcli.retrieval.text.lexical_query; no field is ever syntax of any engine.

    `terms`: lower-cased word terms, stopwords dropped (all kept when every word is one),
    first occurrence order, no duplicates, at most MAX_QUERY_TERMS; any of them may match
    (an OR: questions share few words with their answers). `grams`: the distinct
    3-character grams of the CJK runs (scripts without spaces), and runs of 1-2 characters
    whole, at most MAX_QUERY_TERMS, for the trigram leg."""

    terms: tuple[str, ...] = ()
    grams: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogHealth:
    """What doctor reads about the engine's log and long transactions (memcli.health.checks words
    it).

    `wal_bytes`: the size of memcli's own write-ahead log (SQLite's `-wal` file, which a
    long-lived reader keeps from being reset); None when there is none of memcli's to judge,
    `wal_elsewhere` then saying who manages the log instead (empty: nothing to say, as for an
    in-memory database). `oldest_transaction`: seconds the oldest transaction another
    connection holds open on the database has lasted (0.0: none), `holder` naming it; None
    when the engine does not show it (SQLite)."""

    wal_bytes: int | None = None
    wal_elsewhere: str = ""
    oldest_transaction: float | None = None
    holder: str = ""


class Backend(Protocol[DB]):
    """One storage engine. Implementations: memcli.store.sqlite.backend.SqliteBackend and
    memcli.store.postgres.backend.PgBackend."""

    name: str  # "sqlite" | "postgresql"
    schema_latest: int  # the schema version this code writes
    # The engine's own derived tables (what doctor and rebuild count and name): the lexical
    # indexes, and the vector index beside memory_vectors (empty when it has none).
    lexical_tables: tuple[str, ...]
    vector_tables: tuple[str, ...]
    # The SPLADE index's tables beside `sparse_df` (SQLite: postings and term lists;
    # PostgreSQL: one sparsevec per memory in memory_sparse).
    sparse_tables: tuple[str, ...]
    # True when a memory's context key (its previous turn) is a column of its `memories` row,
    # written by the row's INSERT (PostgreSQL: its generated `fts` reads it); False when only
    # the lexical index keeps it (SQLite's FTS5 context column, written by index_new_memories).
    context_in_row: bool

    # -- retrieval legs (the entity and sparse legs are portable SQL: memcli.store.search_sql)
    def lexical(self, db: DB, query: LexicalQuery, filters: Filters, limit: int,
                context_weight: float) -> Hits:
        """Memories matching any of `query.terms` in their text or (weighted) context."""

    def trigram(self, db: DB, query: LexicalQuery, filters: Filters, limit: int) -> Hits:
        """Memories containing any of `query.grams` (substring match, for CJK text)."""

    def dense(self, db: DB, vector: bytes, filters: Filters, limit: int,
              scope_rows: int | None) -> Hits:
        """Cosine similarity to a float32 vector (`scope_rows`: an upper bound of the memories
        passing the filters, if known, to pick exact scan vs index)."""

    def best_in_scope(self, db: DB, ctes: str, scored: str, params: list,
                      filters: Filters, limit: int, small_scope: bool, ties: str) -> Hits:
        """The `limit` best rows of an aggregate (the entity and sparse legs' scores) passing
        the filters: memcli.store.search_sql.best_in_scope says what the arguments are. Its
        large-scope plan needs rows in score order out of a join, which each engine gets its
        own way."""

    def semantic_neighbours(self, db: DB, memory_id: int, vector: bytes, tenant_id: str,
                            user_id: str | None, kinds: tuple[str, ...], k: int) -> Hits:
        """The `k` active memories of the user (these kinds) most similar to a memory."""

    # -- lexical index maintenance (memories rows are portable; their index rows are not)
    def index_new_memories(self, db: DB, entries: list[tuple[int, str, str, tuple[
            str | None, str | None, str | None]]]) -> None:
        """Index new memories, each (id, text, context key, (tenant, user, session)), all
        of one INSERT or one batch (with `context_in_row`, the context is already in the
        row)."""

    def index_memories(self, db: DB, ids: list[int]) -> None:
        """Index these existing memories from their rows (import), as ingest would have."""

    def unindex_memories(self, db: DB, ids: list[int]) -> None:
        """Remove these memories from the lexical indexes (purge)."""

    def rebuild_lexical(self, db: DB) -> None:
        """Re-index every memory from `memories` (doctor --fix, rebuild)."""

    def reset_lexical(self, db: DB) -> None:
        """Drop and re-create the lexical indexes empty (a damaged index cannot be emptied)."""

    def optimize_lexical(self, db: DB) -> None:
        """Merge the lexical indexes so deleted text leaves them (after a purge)."""

    def lexical_orphans(self, db: DB) -> dict[str, list[int]]:
        """Per lexical index: ids it holds whose memory is gone (doctor)."""

    def lexical_missing(self, db: DB) -> dict[str, list[int]]:
        """Per lexical index: memories it lacks (doctor)."""

    # -- vectors (float32 copies in memory_vectors plus the engine's similarity index)
    def ensure_vectors(self, db: DB, dimension: int) -> None:
        """Create (or bring up to date) the vector index for this dimension."""

    def insert_vectors(self, db: DB, rows: list[tuple[int, bytes]]) -> None:
        """Store or replace (memory id, float32 blob) vectors, index included."""

    def store_vectors(self, db: DB, rows: list[tuple[int, bytes]]) -> None:
        """Store or replace the float vectors for a rebuild, which remakes the similarity
        index from them in one go afterwards (`rebuild_vectors`)."""

    def delete_vectors(self, db: DB, ids: list[int]) -> None:
        """Delete these memories' vectors, index included."""

    def reset_vectors(self, db: DB, dimension: int) -> None:
        """Delete every vector and re-create the index for a new embedder's dimension."""

    def rebuild_vectors(self, db: DB, dimension: int) -> None:
        """Make the vector index again from the stored vectors in one go (rebuild)."""

    def vector_orphans(self, db: DB) -> dict[str, list[int]]:
        """Per vector index table it can read: ids whose stored vector is gone (doctor)."""

    # -- SPLADE storage and its document counts (memcli.store.sparse keeps the scaling and the
    # pruning, which reads sparse_df). Each engine keeps `sparse_df` its own way: SQLite in the
    # writer's statements, PostgreSQL in definer triggers on memory_sparse (a tenant-bound
    # role may only read the counts, which every tenant's pruning uses).
    def write_sparse(self, db: DB, docs: list[tuple[int, dict[int, int]]]) -> None:
        """Store (memory id, {term id: round(weight * SCALE)}), replacing a memory's terms,
        and count the terms in sparse_df."""

    def sparse_terms(self, db: DB, ids: list[int]) -> dict[int, list[int]]:
        """The term ids stored for these memories (only those that have terms)."""

    def delete_sparse(self, db: DB, ids: list[int]) -> None:
        """Delete these memories' sparse rows and take their terms out of sparse_df (a term
        no memory holds any more leaves no row)."""

    def reset_sparse(self, db: DB) -> None:
        """Delete every memory's sparse rows, and so every sparse_df row."""

    def recount_sparse_df(self, db: DB) -> None:
        """sparse_df again from the stored terms."""

    def sparse_orphans(self, db: DB) -> dict[str, list[int]]:
        """Per sparse table other than memory_sparse: ids whose memory is gone (doctor)."""

    def delete_sparse_orphans(self, db: DB) -> None:
        """Delete what `sparse_orphans` finds (doctor --fix)."""

    def sparse_search(self, db: DB, query: dict[int, float], filters: Filters, limit: int,
                      small_scope: bool) -> Hits:
        """Dot product of `query` (pruned already) with the stored weights, / SCALE; only
        memories sharing a term; best first, ties by id."""

    # -- schema
    def migrate(self, db: DB) -> int:
        """Bring the schema to the latest version; returns the version it started from."""

    def schema_version(self, db: DB) -> int:
        """The schema version the database is at."""

    def table_names(self, db: DB) -> set[str]:
        """Every table of memcli's schema present in the database."""

    def create_missing(self, db: DB) -> list[str]:
        """Re-create dropped tables (and their indexes and triggers) empty; their names."""

    def missing_indexes(self, db: DB) -> list[str]:
        """The schema's indexes missing from tables that are there (create_missing makes
        them again): doctor sends them to `memcli rebuild`."""

    def row_counts(self, db: DB, names: tuple[str, ...]) -> dict[str, int | None]:
        """Rows per table (None: missing or unreadable), index tables included."""

    # -- physical and operational
    salvage_hint: str  # what doctor suggests when `integrity` finds damage

    def integrity_label(self, db: DB, full: bool) -> str:
        """The name of the check `integrity` runs, as doctor reports it."""

    def integrity(self, db: DB, full: bool) -> list[str]:
        """The engine's own consistency check: ["ok"] when sound."""

    def size_bytes(self, db: DB) -> int:
        """Bytes the database takes on disk."""

    def secure_delete(self, db: DB, mode: int) -> int:
        """Overwrite deleted content from now on (mode 1; 0 off, 2 fast); the previous mode."""

    def erase_physically(self, db: DB) -> bool:
        """After a purge's commit: rewrite storage so deleted bytes are gone; False when a
        concurrent reader or writer kept them (the caller says so)."""

    def may_erase(self, db: DB) -> bool:
        """Whether this session may run erase_physically at all (PostgreSQL: only the tables'
        owner, or a role granted MAINTAIN, may VACUUM them; a tenant role may not)."""

    def log_health(self, db: DB) -> LogHealth:
        """The write-ahead log and long transactions, as doctor checks them."""

    def checkpoint(self, db: DB) -> bool:
        """Fold the write-ahead log into the database and truncate it (False: a reader held it)."""

    def defer_foreign_keys(self, db: DB) -> None:
        """Check foreign keys at commit rather than per statement, for this transaction."""

    # -- sealed (`high`) values
    def install_decryption(self, db: DB, trace: Callable[[tuple], tuple | None]) -> None:
        """Run every row read on `db` through `trace` (None drops the row)."""

    def data_version(self, db: DB) -> Any:
        """A value that changes when another connection commits (to notice a first key)."""

    def raw_rows(self, db: DB, sql: str, params: tuple) -> list[tuple]:
        """Rows as stored, without the decryption `install_decryption` set up."""

    def sealed_values(self, db: DB, prefix: str) -> dict[str, list[str]]:
        """`table.column` -> the values stored there that start with `prefix`, as text, in
        every column a sealed value may sit in (`key status` counts them; `reseal` rewrites
        the same set)."""

    def reseal(self, db: DB, convert: Callable[[Any], Any], prefix: str) -> None:
        """Replace every value starting with `prefix` by `convert(value)`, append-only
        tables included (key rotation), in the caller's transaction."""

    # -- lifecycle run locks (memcli/lifecycle/runlock.py)
    def take_run_lock(self, db: DB, name: str) -> bool | None:
        """The engine's own lock for lifecycle command `name`, held by this connection until
        `drop_run_lock` or the connection's end (a killed holder's dies with it): True when
        taken, False when another connection holds it, None when the engine has none (then
        the `run_locks` row's expiry and pid liveness decide)."""

    def drop_run_lock(self, db: DB, name: str) -> None:
        """Release what `take_run_lock` took (nothing when it returned None)."""

    # -- errors
    def environment_error(self, db: DB, exc: BaseException) -> StorageError | None:
        """The one-line error for a failure of the environment (permissions, disk, I/O,
        damage), or None when `exc` is not one."""

    def is_constraint_error(self, exc: BaseException) -> bool:
        """True when `exc` is a constraint violation (CHECK, foreign key, unique)."""
