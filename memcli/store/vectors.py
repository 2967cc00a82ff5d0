"""SQL for vectors: the vec0 table (binary-quantized prefilter) and exact float copies.

`vec_memories` holds one bit vector per memory (sign of each dimension), partitioned by the
memory's (tenant, user) and tagged with its tenant. A KNN over the bits of one user's partition
takes ~2 ms at 100k memories, over one tenant's ~40 ms (metadata filter), so it serves as the
prefilter; the shortlist is then reranked exactly against the float32 copies in
`memory_vectors`. The table is derived: it is rebuilt from `memory_vectors` whenever its layout
is older than this code (see `ensure_vec_table`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcli.errors import EmbedderMismatchError

if TYPE_CHECKING:
    from memcli.store.connection import Database


# Set when vectors change while sqlite-vec is not loaded: vec_memories then lags memory_vectors
# (missing rows, or rows of purged memories) until a connection with sqlite-vec syncs it.
VEC_STALE = "vec_index_stale"
# Small chunks: every (tenant, user) partition allocates at least one chunk of this many slots,
# and a scan over a tenant measured faster with 128 than with vec0's default of 1024.
CHUNK_SIZE = 128
_LAYOUT_MARK = "user_key text partition key"


def user_key(tenant_id: str | None, user_id: str | None) -> str:
    """The partition key of a (tenant, user) pair: exact, no hashing (unit separator)."""
    return f"{tenant_id or ''}\x1f{user_id or ''}"


def _vec_sql(db: Database) -> str | None:
    return db.scalar("SELECT sql FROM sqlite_schema WHERE name = 'vec_memories'")


def _has_vec_table(db: Database) -> bool:
    return _vec_sql(db) is not None


def ensure_vec_table(db: Database, dimension: int) -> None:
    if not db.vec_enabled:
        return
    current = _vec_sql(db)
    if current is not None and _LAYOUT_MARK in current:
        return
    with db.transaction():
        if current is not None:
            db.execute("DROP TABLE vec_memories")  # an older layout: rebuilt below
        db.execute(
            "CREATE VIRTUAL TABLE vec_memories USING vec0("
            f"memory_id INTEGER PRIMARY KEY, embedding bit[{int(dimension)}], "
            f"{_LAYOUT_MARK}, tenant_key text, chunk_size={CHUNK_SIZE})"
        )
    # Vectors stored while sqlite-vec was missing (or under the old layout) get bit copies now.
    sync_vec_index(db)


_INSERT_VEC = (
    "INSERT INTO vec_memories (memory_id, embedding, user_key, tenant_key)"
    " VALUES (?, vec_quantize_binary(?), ?, ?)"
)


def _with_keys(db: Database, rows: list[tuple[int, bytes]]) -> list[tuple]:
    if not rows:
        return []
    ids = [mid for mid, _ in rows]
    scopes = {}
    for start in range(0, len(ids), 500):
        part = ids[start:start + 500]
        marks = ",".join("?" * len(part))
        scopes.update((mid, (tenant, user)) for mid, tenant, user in db.execute(
            f"SELECT id, tenant_id, user_id FROM memories WHERE id IN ({marks})", part))
    out = []
    for mid, blob in rows:
        tenant, user = scopes.get(mid, (None, None))
        out.append((mid, blob, user_key(tenant, user), tenant or ""))
    return out


def sync_vec_index(db: Database) -> None:
    """Make vec_memories hold exactly the memories of memory_vectors (after writes without vec)."""
    if not db.vec_enabled:
        return
    with db.transaction():
        if _has_vec_table(db):
            db.execute("DELETE FROM vec_memories WHERE memory_id NOT IN"
                       " (SELECT memory_id FROM memory_vectors)")
            # Row by row: INSERT ... SELECT would drop the bit subtype vec_quantize_binary sets.
            missing = list(db.execute(
                "SELECT memory_id, embedding FROM memory_vectors"
                " WHERE memory_id NOT IN (SELECT memory_id FROM vec_memories)"))
            db.executemany(_INSERT_VEC, _with_keys(db, missing))
        db.execute("DELETE FROM meta WHERE key = ?", (VEC_STALE,))


def check_embedder(db: Database, model_id: str, dimension: int, *, adopt: bool = True) -> None:
    """Compare the configured embedder with the one that made the stored vectors."""
    stored_model = db.get_meta("embedder_model")
    stored_dim = db.get_meta("embedder_dimension")
    if stored_model is None:
        if adopt:
            with db.transaction():
                db.set_meta("embedder_model", model_id)
                db.set_meta("embedder_dimension", str(dimension))
                ensure_vec_table(db, dimension)
        return
    if stored_model != model_id or int(stored_dim or 0) != dimension:
        raise EmbedderMismatchError(
            f"this database's vectors were made by {stored_model} ({stored_dim}-d), "
            f"but the configured embedder is {model_id} ({dimension}-d)",
            "run `memcli reindex` to re-embed, or configure the original embedder",
        )
    ensure_vec_table(db, dimension)


def reset_vectors(db: Database, model_id: str, dimension: int) -> None:
    """Drop every vector and record the new model (reindex fills them again)."""
    db.execute("DELETE FROM memory_vectors")
    db.execute("DROP TABLE IF EXISTS vec_memories")
    db.set_meta("embedder_model", model_id)
    db.set_meta("embedder_dimension", str(dimension))
    ensure_vec_table(db, dimension)


def insert_vectors(db: Database, rows: list[tuple[int, bytes]]) -> None:
    """rows: (memory_id, float32 blob)."""
    db.executemany(
        "INSERT INTO memory_vectors (memory_id, embedding) VALUES (?, ?)"
        " ON CONFLICT (memory_id) DO UPDATE SET embedding = excluded.embedding", rows
    )
    if db.vec_enabled:
        for start in range(0, len(rows), 500):
            keyed = _with_keys(db, rows[start:start + 500])
            # vec0 has no INSERT OR REPLACE: a re-embedded memory's old bits go first.
            marks = ",".join("?" * len(keyed))
            db.execute(f"DELETE FROM vec_memories WHERE memory_id IN ({marks})",
                       [r[0] for r in keyed])
            db.executemany(_INSERT_VEC, keyed)
    elif rows:
        db.set_meta(VEC_STALE, "1")


def delete_vectors(db: Database, memory_ids: list[int]) -> None:
    if not memory_ids:
        return
    marks = ",".join("?" * len(memory_ids))
    db.execute(f"DELETE FROM memory_vectors WHERE memory_id IN ({marks})", memory_ids)
    if not _has_vec_table(db):
        return
    if db.vec_enabled:
        db.execute(f"DELETE FROM vec_memories WHERE memory_id IN ({marks})", memory_ids)
    else:
        db.set_meta(VEC_STALE, "1")  # vec0 rows can only be deleted with the module loaded
