"""SQL for vectors: the vec0 table (binary-quantized prefilter) and exact float copies.

`vec_memories` holds one bit vector per memory (sign of each dimension). At 100k memories a
KNN over bits takes ~5 ms where float KNN takes 60-80 ms, so it serves as the prefilter; the
shortlist is then reranked exactly against the float32 copies in `memory_vectors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcli.errors import EmbedderMismatchError

if TYPE_CHECKING:
    from memcli.store.connection import Database


# Set when vectors change while sqlite-vec is not loaded: vec_memories then lags memory_vectors
# (missing rows, or rows of purged memories) until a connection with sqlite-vec syncs it.
VEC_STALE = "vec_index_stale"


def _has_vec_table(db: Database) -> bool:
    return bool(db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'vec_memories'"))


def ensure_vec_table(db: Database, dimension: int) -> None:
    if not db.vec_enabled:
        return
    if not _has_vec_table(db):
        db.execute(
            "CREATE VIRTUAL TABLE vec_memories USING vec0("
            f"memory_id INTEGER PRIMARY KEY, embedding bit[{int(dimension)}])"
        )
        # Vectors stored while sqlite-vec was missing get their bit copies now.
        sync_vec_index(db)


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
            db.executemany("INSERT INTO vec_memories (memory_id, embedding)"
                           " VALUES (?, vec_quantize_binary(?))", missing)
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
        "INSERT OR REPLACE INTO memory_vectors (memory_id, embedding) VALUES (?, ?)", rows
    )
    if db.vec_enabled:
        db.executemany(
            "INSERT OR REPLACE INTO vec_memories (memory_id, embedding)"
            " VALUES (?, vec_quantize_binary(?))",
            rows,
        )
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
