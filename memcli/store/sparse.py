"""The learned-sparse (SPLADE) index, what both engines share: the model lock, weight scaling,
document frequencies (`sparse_df`) and frequent-term pruning. Storage and scoring are the
engine's (`db.backend`): postings on SQLite (memcli.store.sqlite.sparse), one pgvector
`sparsevec` per memory on PostgreSQL (memcli.store.postgres.sparse). `memory_sparse` has one
row per memory holding terms on both, so the "which memories lack terms" queries are here."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from memcli.errors import EmbedderMismatchError

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


# Rows per multi-row statement (2 parameters each stays far below either engine's limit).
BATCH_ROWS = 500


def _add_df(db: Database, counts: Counter[int]) -> None:
    """Add `counts` (negative: remove) to the terms' df: one upsert per BATCH_ROWS terms,
    in term order. One statement instead of one per term was the write path's cost on
    PostgreSQL (bench/results/pg-scale.md); sorted keys mean two writers that both touch
    terms a and b lock them in the same order (no deadlock without the writer lock). A term
    no memory holds any more is deleted: a purged memory's words leave no count behind."""
    rows = sorted((t, n) for t, n in counts.items() if n)
    for start in range(0, len(rows), BATCH_ROWS):
        part = rows[start:start + BATCH_ROWS]
        db.execute(
            "INSERT INTO sparse_df (term_id, df) VALUES " + ",".join(["(?, ?)"] * len(part))
            + " ON CONFLICT (term_id) DO UPDATE SET df = sparse_df.df + excluded.df",
            [v for row in part for v in row])
    gone = [t for t, n in rows if n < 0]
    for start in range(0, len(gone), BATCH_ROWS):
        terms = gone[start:start + BATCH_ROWS]
        marks = ",".join("?" * len(terms))
        db.execute(f"DELETE FROM sparse_df WHERE df <= 0 AND term_id IN ({marks})", terms)


def insert_postings(db: Database, docs: list[tuple[int, dict[int, float]]]) -> None:
    """Store memories' SPLADE weights (the engine's way: `Backend.write_sparse`) and count
    their terms in sparse_df."""
    scaled = [(memory_id, {t: max(1, round(w * SCALE)) for t, w in vec.items()})
              for memory_id, vec in docs]
    db.backend.write_sparse(db, scaled)
    df: Counter[int] = Counter()
    for _, kept in scaled:
        df.update(kept.keys())
    _add_df(db, df)


def delete_postings(db: Database, memory_ids: list[int]) -> None:
    """Remove these memories' SPLADE rows and their terms' counts."""
    stored = db.backend.sparse_terms(db, memory_ids)
    if not stored:
        return
    df: Counter[int] = Counter()
    for terms in stored.values():
        df.subtract(terms)
    db.backend.delete_sparse(db, stored)
    _add_df(db, df)


def reset(db: Database, model_id: str) -> None:
    clear(db)
    db.execute("DELETE FROM meta WHERE key = 'sparse_vocab'")
    db.set_meta("sparse_model", model_id)


def clear(db: Database) -> None:
    """Empty the sparse index and its counts (the model and vocabulary stay in meta)."""
    db.backend.reset_sparse(db)
    db.execute("DELETE FROM sparse_df")


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
    the plan where the engine has two (see memcli.store.search.best_in_scope)."""
    if not query:
        return []
    terms = list(query)
    marks = ",".join("?" * len(terms))
    frequent = {t for (t,) in db.execute(
        f"SELECT term_id FROM sparse_df WHERE term_id IN ({marks}) AND df > ?", [*terms, max_df])}
    kept = {t: w for t, w in query.items() if t not in frequent}
    if not kept:
        return []
    return db.backend.sparse_search(db, kept, filters, limit, small_scope)
