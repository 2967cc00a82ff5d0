"""SQL for the learned-sparse index: postings, per-memory term lists, document frequencies."""

from __future__ import annotations

import array
from collections import Counter
from typing import TYPE_CHECKING

from memcli.errors import EmbedderMismatchError
from memcli.store.search import best_in_scope

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


# Rows per multi-row statement (3 parameters each stays far below either engine's limit).
BATCH_ROWS = 500


def _chunks(rows: list[tuple], size: int = BATCH_ROWS):
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


def _add_df(db: Database, counts: Counter[int]) -> None:
    """Add `counts` (negative: remove) to the terms' df: one upsert per BATCH_ROWS terms,
    in term order. One statement instead of one per term was the write path's cost on
    PostgreSQL (bench/results/pg-scale.md); sorted keys mean two writers that both touch
    terms a and b lock them in the same order (no deadlock without the writer lock)."""
    rows = sorted((t, n) for t, n in counts.items() if n)
    for part in _chunks(rows):
        db.execute(
            "INSERT INTO sparse_df (term_id, df) VALUES " + ",".join(["(?, ?)"] * len(part))
            + " ON CONFLICT (term_id) DO UPDATE SET df = sparse_df.df + excluded.df",
            [v for row in part for v in row])


def insert_postings(db: Database, docs: list[tuple[int, dict[int, float]]]) -> None:
    postings = []
    packed = []
    df: Counter[int] = Counter()
    for memory_id, vec in docs:
        kept = {t: max(1, round(w * SCALE)) for t, w in vec.items()}
        postings.extend((t, memory_id, w) for t, w in kept.items())
        packed.append((memory_id, array.array("H", sorted(kept)).tobytes()))
        df.update(kept.keys())
    for part in _chunks(sorted(postings)):
        db.execute(
            "INSERT INTO sparse_postings (term_id, memory_id, weight) VALUES "
            + ",".join(["(?, ?, ?)"] * len(part))
            + " ON CONFLICT (term_id, memory_id) DO UPDATE SET weight = excluded.weight",
            [v for row in part for v in row])
    db.executemany("INSERT INTO memory_sparse (memory_id, terms) VALUES (?, ?)"
                   " ON CONFLICT (memory_id) DO UPDATE SET terms = excluded.terms", packed)
    _add_df(db, df)


def delete_postings(db: Database, memory_ids: list[int]) -> None:
    pairs: list[tuple[int, int]] = []
    df: Counter[int] = Counter()
    found: list[int] = []
    for memory_id in memory_ids:
        blob = db.scalar("SELECT terms FROM memory_sparse WHERE memory_id = ?", (memory_id,))
        if blob is None:
            continue
        terms = array.array("H")
        terms.frombytes(blob)
        pairs.extend((t, memory_id) for t in terms)
        df.subtract(terms)
        found.append(memory_id)
    for part in _chunks(sorted(pairs)):
        db.execute("DELETE FROM sparse_postings WHERE (term_id, memory_id) IN (VALUES "
                   + ",".join(["(?, ?)"] * len(part)) + ")", [v for row in part for v in row])
    _add_df(db, df)
    for part in _chunks([(m,) for m in found]):
        db.execute(f"DELETE FROM memory_sparse WHERE memory_id IN ({','.join('?' * len(part))})",
                   [m for (m,) in part])


def reset(db: Database, model_id: str) -> None:
    db.execute("DELETE FROM sparse_postings")
    db.execute("DELETE FROM memory_sparse")
    db.execute("DELETE FROM sparse_df")
    db.execute("DELETE FROM meta WHERE key = 'sparse_vocab'")
    db.set_meta("sparse_model", model_id)


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
    """Dot product of the query with each memory's postings, frequent terms pruned.
    `small_scope` picks the plan (see memcli.store.search.best_in_scope)."""
    if not query:
        return []
    terms = list(query)
    marks = ",".join("?" * len(terms))
    frequent = {t for (t,) in db.execute(
        f"SELECT term_id FROM sparse_df WHERE term_id IN ({marks}) AND df > ?", [*terms, max_df])}
    kept = [(t, w) for t, w in query.items() if t not in frequent]
    if not kept:
        return []
    values = ",".join("(?, ?)" for _ in kept)
    ctes = f"""q(term, w) AS (VALUES {values}),
            hits AS (SELECT p.memory_id AS id, q.w * p.weight AS w
                     FROM q JOIN sparse_postings p ON p.term_id = q.term)"""
    scored = f"SELECT id, sum(w) / {SCALE}.0 AS score FROM hits WHERE {{in_scope}} GROUP BY id"
    return best_in_scope(db, ctes, scored, [v for pair in kept for v in pair], filters, limit,
                         small_scope)
