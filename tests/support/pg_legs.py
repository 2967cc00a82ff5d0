"""PostgreSQL tables for the retrieval legs, filled from a SQLite memcli file.

Used by tests/pg/test_pg_legs.py. The schema is memcli's own
(`apply_schema`: memcli/store/postgres's migrations, then the embedder's dimension and HNSW
index as the first ingest sets them). `copy_from_sqlite` copies memories (with the context
column FTS5 keeps only inside its index, recomputed as `doctor --fix` does), float vectors
and the SPLADE weights (SQLite's postings, as one sparsevec per memory) with the same ids.

`PgAdapter` is the smallest part of memcli's Database surface the legs use (`execute`, `scalar`)
over a psycopg connection: `?` placeholders become `%s` (the leg SQL has no `?` or `%` inside
literals; pgcore's PgDatabase does the full rewrite).
"""

from __future__ import annotations

import struct
from typing import Any

# Columns of SQLite's `memories` copied as they are (PostgreSQL adds `context` and `fts`).
MEMORY_COLUMNS = (
    "id", "kind", "category", "content", "tenant_id", "user_id", "agent_id", "session_id",
    "app_id", "run_id", "channel", "sensitivity", "actor_type", "actor_id", "event_id",
    "event_seq", "chunk_index", "token_count", "importance", "pinned", "confidence",
    "decay_rate", "access_count", "last_accessed", "event_time", "created_at", "updated_at",
    "valid_from", "valid_to", "state", "purge_at", "source_ids", "attributes",
)
# The context column exactly as memcli/store/doctor_sql.py `rebuild_lexical` writes FTS5's.
CONTEXT_SQL = """
    WITH plain AS (
        SELECT id, kind, session_id, tenant_id, event_seq, chunk_index,
               sensitivity = 'high' AS high,
               CASE WHEN sensitivity = 'high' THEN '' ELSE content END AS text
        FROM memories)
    SELECT id, CASE WHEN kind = 'episode' AND session_id IS NOT NULL AND NOT high
                    THEN coalesce(lag(text) OVER (PARTITION BY tenant_id, session_id,
                                                  kind = 'episode'
                                                  ORDER BY event_seq, chunk_index), '')
                    ELSE '' END
    FROM plain"""


class PgAdapter:
    """`execute`/`scalar` with `?` placeholders over a psycopg connection."""

    def __init__(self, conn: Any) -> None:
        from memcli.store.postgres.backend import BACKEND
        from memcli.store.postgres.dialect import DIALECT

        self.conn = conn
        self.dialect = DIALECT  # portable store SQL spells engine fragments through it
        self.backend = BACKEND  # and reaches the engine's plans through it (best_in_scope)

    def execute(self, sql: str, params: Any = None) -> list[tuple]:
        cur = self.conn.execute(sql.replace("%", "%%").replace("?", "%s"), params)
        return cur.fetchall() if cur.description is not None else []

    def scalar(self, sql: str, params: Any = None) -> Any:
        rows = self.execute(sql, params)
        return rows[0][0] if rows else None


def apply_schema(conn: Any, dim: int) -> None:
    """memcli's schema on the empty database `conn` (a psycopg connection) is connected to:
    its migrations, as any memcli open runs them, then `memory_vectors.embedding` given `dim`
    dimensions and its HNSW index, as the first stored vector does."""
    from memcli.store.postgres.connection import PgDatabase
    from memcli.store.postgres.migrations import ensure_vectors

    db = PgDatabase(conn.info.dsn)  # the same database (trust auth: the DSN has no password)
    try:
        ensure_vectors(db, dim)
    finally:
        db.close()


def copy_from_sqlite(sqlite_db: Any, conn: Any) -> dict[str, int]:
    """Memories, vectors and sparse postings of a memcli SQLite Database into PostgreSQL,
    same ids; returns row counts. `conn` is a psycopg connection (COPY)."""
    from memcli.store.postgres.legs import vector_literal
    from memcli.store.postgres.sparse import literal as sparse_literal

    contexts = dict(sqlite_db.execute(CONTEXT_SQL))
    cols = ", ".join(MEMORY_COLUMNS)
    scope: dict[int, tuple[str, str | None]] = {}
    counts = {"memories": 0, "vectors": 0, "postings": 0}
    with conn.transaction():
        with conn.cursor().copy(f"COPY memories ({cols}, context) FROM STDIN") as copy:
            for row in sqlite_db.execute(f"SELECT {cols} FROM memories ORDER BY id"):
                copy.write_row([*row, contexts.get(row[0], "")])
                scope[row[0]] = (row[4], row[5])
                counts["memories"] += 1
        with conn.cursor().copy(
                "COPY memory_vectors (memory_id, tenant_id, user_id, embedding) FROM STDIN"
        ) as copy:
            for mid, blob in sqlite_db.execute(
                    "SELECT memory_id, embedding FROM memory_vectors ORDER BY memory_id"):
                copy.write_row([mid, *scope[mid], vector_literal(blob)])
                counts["vectors"] += 1
        # SQLite's postings (integer weights x 100) as memcli's PostgreSQL store keeps them.
        by_memory: dict[int, dict[int, int]] = {}
        for term, mid, weight in sqlite_db.execute(
                "SELECT term_id, memory_id, weight FROM sparse_postings"):
            by_memory.setdefault(mid, {})[term] = weight
            counts["postings"] += 1
        with conn.cursor().copy("COPY memory_sparse (memory_id, vec) FROM STDIN") as copy:
            for mid in sorted(by_memory):
                copy.write_row([mid, sparse_literal(by_memory[mid])])
        with conn.cursor().copy("COPY sparse_df (term_id, df) FROM STDIN") as copy:
            for row in sqlite_db.execute("SELECT term_id, df FROM sparse_df"):
                copy.write_row(list(row))
        top = sqlite_db.scalar("SELECT coalesce(max(id), 0) FROM memories")
        if top:
            conn.execute("SELECT setval(pg_get_serial_sequence('memories', 'id'), %s)", (top,))
    conn.execute("ANALYZE memories")
    conn.execute("ANALYZE memory_vectors")
    conn.execute("ANALYZE memory_sparse")
    return counts


def float_blob(values: list[float]) -> bytes:
    """A float32 little-endian blob (SQLite's vector storage) of `values`."""
    return struct.pack(f"<{len(values)}f", *values)
