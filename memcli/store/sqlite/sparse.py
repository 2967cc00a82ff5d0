"""SQLite's SPLADE storage: postings (term, memory, weight) plus each memory's packed term list,
and the document frequencies in `sparse_df`.

memcli.store.sparse keeps what both engines share (scaling, frequent-term pruning); this
module is the storage, its counts and the dot product behind `Backend.write_sparse` and the
other sparse methods. The counts are written here, in the writer's statements (SQLite has no
roles to keep them from; PostgreSQL counts in a trigger instead, v4_sparse_df.sql).
Weights are stored as round(weight * SCALE) integers (smallest 1); `memory_sparse.terms`
holds the term ids as packed uint16, so deleting a memory's postings needs no scan of the
postings table.
"""

from __future__ import annotations

import array
from collections import Counter
from typing import TYPE_CHECKING

from memcli.store.batching import chunks, marks
from memcli.store.orphans import Link, delete_lacking, ids_lacking
from memcli.store.search_sql import best_in_scope

if TYPE_CHECKING:
    from memcli.store.connection import Database
    from memcli.store.filters import Filters

TABLES = ("sparse_postings", "memory_sparse")
BATCH_ROWS = 500  # rows per multi-row statement (3 parameters each: far below the limit)


def _add_df(db: Database, counts: Counter[int]) -> None:
    """Add `counts` (negative: remove) to the terms' df: one upsert per BATCH_ROWS terms,
    in term order. One statement instead of one per term was the write path's cost on
    PostgreSQL (bench/results/pg-scale.md); sorted keys mean two writers that both touch
    terms a and b lock them in the same order. A term no memory holds any more is deleted: a
    purged memory's words leave no count behind."""
    rows = sorted((t, n) for t, n in counts.items() if n)
    for part in chunks(rows, BATCH_ROWS):
        db.execute(
            "INSERT INTO sparse_df (term_id, df) VALUES " + ",".join(["(?, ?)"] * len(part))
            + " ON CONFLICT (term_id) DO UPDATE SET df = sparse_df.df + excluded.df",
            [v for row in part for v in row])
    gone = [t for t, n in rows if n < 0]
    for ids in chunks(gone, BATCH_ROWS):
        db.execute(f"DELETE FROM sparse_df WHERE df <= 0 AND term_id IN ({marks(ids)})", ids)


def write(db: Database, docs: list[tuple[int, dict[int, int]]]) -> None:
    """Store each memory's scaled weights (replacing a previous row of the same term) and
    count its terms."""
    postings = sorted((t, memory_id, w) for memory_id, vec in docs for t, w in vec.items())
    for part in chunks(postings, BATCH_ROWS):
        db.execute(
            "INSERT INTO sparse_postings (term_id, memory_id, weight) VALUES "
            + ",".join(["(?, ?, ?)"] * len(part))
            + " ON CONFLICT (term_id, memory_id) DO UPDATE SET weight = excluded.weight",
            [v for row in part for v in row])
    db.executemany("INSERT INTO memory_sparse (memory_id, terms) VALUES (?, ?)"
                   " ON CONFLICT (memory_id) DO UPDATE SET terms = excluded.terms",
                   [(m, array.array("H", sorted(vec)).tobytes()) for m, vec in docs])
    df: Counter[int] = Counter()
    for _, vec in docs:
        df.update(vec.keys())
    _add_df(db, df)


def terms(db: Database, ids: list[int]) -> dict[int, list[int]]:
    """The term ids stored for these memories (those with a row)."""
    found: dict[int, list[int]] = {}
    for memory_id in ids:
        blob = db.scalar("SELECT terms FROM memory_sparse WHERE memory_id = ?", (memory_id,))
        if blob is not None:
            packed = array.array("H")
            packed.frombytes(blob)
            found[memory_id] = list(packed)
    return found


def delete(db: Database, ids: list[int]) -> None:
    """Remove these memories' postings and term lists, and their terms' counts."""
    stored = terms(db, ids)
    if not stored:
        return
    pairs = sorted((t, m) for m, ts in stored.items() for t in ts)
    for part in chunks(pairs, BATCH_ROWS):
        db.execute("DELETE FROM sparse_postings WHERE (term_id, memory_id) IN (VALUES "
                   + ",".join(["(?, ?)"] * len(part)) + ")", [v for row in part for v in row])
    for done in chunks(sorted(stored), BATCH_ROWS):
        db.execute(f"DELETE FROM memory_sparse WHERE memory_id IN ({marks(done)})", done)
    df: Counter[int] = Counter()
    for ts in stored.values():
        df.subtract(ts)
    _add_df(db, df)


def reset(db: Database) -> None:
    db.execute("DELETE FROM sparse_postings")
    db.execute("DELETE FROM memory_sparse")
    db.execute("DELETE FROM sparse_df")


# Postings whose memory is gone (memcli.store.orphans writes the anti-join).
_POSTINGS_ORPHANS: tuple[str, Link] = ("sparse_postings",
                                       ("sparse_postings.memory_id", "memories", "id"))


def recount_df(db: Database) -> None:
    db.execute("DELETE FROM sparse_df")
    db.execute("INSERT INTO sparse_df (term_id, df) SELECT term_id, count(*)"
               " FROM sparse_postings GROUP BY term_id")


def orphans(db: Database) -> dict[str, list[int]]:
    """Postings whose memory is gone (memory_sparse's own orphans are portable SQL)."""
    return {"sparse_postings": ids_lacking(db, *_POSTINGS_ORPHANS, distinct=True)}


def delete_orphans(db: Database) -> None:
    delete_lacking(db, *_POSTINGS_ORPHANS)


def search(db: Database, query: dict[int, float], filters: Filters, limit: int,
           small_scope: bool, scale: int) -> list[tuple[int, float]]:
    """Dot product of the (already pruned) query with each memory's postings."""
    values = ",".join("(?, ?)" for _ in query)
    ctes = f"""q(term, w) AS (VALUES {values}),
            hits AS (SELECT p.memory_id AS id, q.w * p.weight AS w
                     FROM q JOIN sparse_postings p ON p.term_id = q.term)"""
    scored = f"SELECT id, sum(w) / {scale}.0 AS score FROM hits WHERE {{in_scope}} GROUP BY id"
    return best_in_scope(db, ctes, scored, [v for pair in query.items() for v in pair], filters,
                         limit, small_scope)
