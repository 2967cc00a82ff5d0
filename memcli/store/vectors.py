"""Vectors: float32 copies in `memory_vectors` and the engine's similarity index over them
(vec0 on SQLite: memcli.store.sqlite.vec), reached through `db.backend`.

Which embedder made the stored vectors is recorded in `meta` (portable): a database is never
searched with vectors of another model or size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcli.errors import EmbedderMismatchError

if TYPE_CHECKING:
    from memcli.store.connection import Database


def check_embedder(db: Database, model_id: str, dimension: int) -> None:
    """Compare the configured embedder with the one that made the stored vectors; a database
    without vectors yet adopts it."""
    stored_model = db.get_meta("embedder_model")
    stored_dim = db.get_meta("embedder_dimension")
    if stored_model is None:
        with db.transaction():
            db.set_meta("embedder_model", model_id)
            db.set_meta("embedder_dimension", str(dimension))
            db.backend.ensure_vectors(db, dimension)
        return
    if stored_model != model_id or int(stored_dim or 0) != dimension:
        raise EmbedderMismatchError(
            f"this database's vectors were made by {stored_model} ({stored_dim}-d), "
            f"but the configured embedder is {model_id} ({dimension}-d)",
            "run `memcli reindex` to re-embed, or configure the original embedder",
        )
    db.backend.ensure_vectors(db, dimension)


def reset_vectors(db: Database, model_id: str, dimension: int) -> None:
    """Drop every vector and record the new model (reindex fills them again)."""
    db.backend.reset_vectors(db, dimension)
    db.set_meta("embedder_model", model_id)
    db.set_meta("embedder_dimension", str(dimension))


def insert_vectors(db: Database, rows: list[tuple[int, bytes]]) -> None:
    """rows: (memory_id, float32 blob), stored or replaced."""
    db.backend.insert_vectors(db, rows)


def delete_vectors(db: Database, memory_ids: list[int]) -> None:
    if memory_ids:
        db.backend.delete_vectors(db, memory_ids)
