"""SQL for typed edges between memories."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcli.core.records import utcnow

if TYPE_CHECKING:
    from memcli.store.connection import Database


def add_edge(db: Database, src: int, dst: int, kind: str, strength: float) -> None:
    """One edge per pair and kind: `related` is symmetric, so it is stored once (low id first)."""
    if kind == "related" and src > dst:
        src, dst = dst, src
    db.execute(
        "INSERT INTO relations (src_id, dst_id, kind, strength, created_at) VALUES (?,?,?,?,?)"
        " ON CONFLICT (src_id, dst_id, kind) DO UPDATE SET"
        f" strength = {db.dialect.greatest('relations.strength', 'excluded.strength')}",
        (src, dst, kind, float(strength), utcnow()),
    )


def semantic_neighbours(db: Database, memory_id: int, vector_blob: bytes, tenant_id: str,
                        user_id: str | None, kinds: tuple[str, ...], k: int
                        ) -> list[tuple[int, float]]:
    """The `k` active memories of the user (these kinds) most similar to a memory's vector."""
    if not db.vec_enabled:
        return []
    return db.backend.semantic_neighbours(db, memory_id, vector_blob, tenant_id, user_id,
                                          kinds, k)
