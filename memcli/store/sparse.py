"""The learned-sparse (SPLADE) index, what both engines share: the model lock, weight scaling
and frequent-term pruning by the document frequencies in `sparse_df`. Storage, scoring and
keeping `sparse_df` are the engine's (`db.backend`): postings and counts written in the
writer's statements on SQLite (memcli.store.sqlite.sparse), one pgvector `sparsevec` per
memory on PostgreSQL, counted by definer triggers on `memory_sparse` so that a tenant-bound
role may only read the counts (memcli.store.postgres.sparse, v4_sparse_df.sql).
`memory_sparse` has one row per memory holding terms on both, so the "which memories lack
terms" queries are here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcli.errors import EmbedderMismatchError
from memcli.store.batching import marks

if TYPE_CHECKING:
    from memcli.store.connection import Database
    from memcli.store.filters import Filters

SCALE = 100  # stored weight = round(weight * SCALE)


def check_model(db: Database, model_id: str) -> None:
    """Lock the sparse model in meta, like the embedder (its vocabulary hash is recorded with
    the first postings, when the model is loaded anyway)."""
    stored = db.get_meta("sparse_model")
    if stored is None:
        with db.transaction():
            db.set_meta("sparse_model", model_id)
        return
    if stored != model_id:
        raise EmbedderMismatchError(
            f"this database's sparse index was made by {stored}, not {model_id}",
            "run `memcli reindex` to rebuild it",
        )


def record_vocab(db: Database, vocab_hash: str) -> None:
    stored = db.get_meta("sparse_vocab")
    if stored is None:
        db.set_meta("sparse_vocab", vocab_hash)
    elif stored != vocab_hash:
        raise EmbedderMismatchError("the sparse model's vocabulary changed",
                                    "run `memcli reindex` to rebuild the sparse index")


def insert_postings(db: Database, docs: list[tuple[int, dict[int, float]]]) -> None:
    """Store memories' SPLADE weights and count their terms in sparse_df (both the engine's
    way: `Backend.write_sparse`)."""
    scaled = [(memory_id, {t: max(1, round(w * SCALE)) for t, w in vec.items()})
              for memory_id, vec in docs]
    db.backend.write_sparse(db, scaled)


def delete_postings(db: Database, memory_ids: list[int]) -> None:
    """Remove these memories' SPLADE rows and their terms' counts."""
    if memory_ids:
        db.backend.delete_sparse(db, memory_ids)


def reset(db: Database, model_id: str) -> None:
    clear(db)
    db.execute("DELETE FROM meta WHERE key = 'sparse_vocab'")
    db.set_meta("sparse_model", model_id)


def clear(db: Database) -> None:
    """Empty the sparse index and its counts (the model and vocabulary stay in meta)."""
    db.backend.reset_sparse(db)


def recount_df(db: Database) -> None:
    """Document frequencies again from the stored terms (exact, whatever happened before)."""
    db.backend.recount_sparse_df(db)


def memories_without_sparse(db: Database, limit: int) -> list[tuple[int, str]]:
    return list(db.execute(
        "SELECT m.id, m.content FROM memories m LEFT JOIN memory_sparse s ON s.memory_id = m.id"
        " WHERE s.memory_id IS NULL AND m.state != 'soft_deleted' ORDER BY m.id LIMIT ?",
        (limit,),
    ))


def count_without_sparse(db: Database) -> int:
    """How many memories `memories_without_sparse` has left to return."""
    return int(db.scalar(
        "SELECT count(*) FROM memories m LEFT JOIN memory_sparse s ON s.memory_id = m.id"
        " WHERE s.memory_id IS NULL AND m.state != 'soft_deleted'"))


def search(db: Database, query: dict[int, float], filters: Filters, limit: int,
           max_df: int, small_scope: bool = True) -> list[tuple[int, float]]:
    """Dot product of the query with each memory's stored weights (/ SCALE), frequent terms
    (df above `max_df`) pruned from the query; best first, ties by id. `small_scope` picks
    the plan where the engine has two (see memcli.store.search_sql.best_in_scope)."""
    if not query:
        return []
    terms = list(query)
    in_list = marks(terms)
    frequent = {t for (t,) in db.execute(
        f"SELECT term_id FROM sparse_df WHERE term_id IN ({in_list}) AND df > ?", [*terms, max_df])}
    kept = {t: w for t, w in query.items() if t not in frequent}
    if not kept:
        return []
    return db.backend.sparse_search(db, kept, filters, limit, small_scope)
