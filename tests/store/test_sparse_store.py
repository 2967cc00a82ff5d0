"""The SPLADE store on both engines (postings on SQLite, one sparsevec per memory on
PostgreSQL): the sparse leg's top k is a brute-force dot product over the stored weights,
ties by id; sparse_df is the count of memories holding each term, kept through deletes and
recounts."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from memcli.store import sparse as sparse_sql
from memcli.store.filters import Filters
from memcli.store.opener import open_database

pytestmark = pytest.mark.backends

TS = "2025-01-01T00:00:00Z"
VOCAB = 80
MAX_DF = 120


def _corpus(seed: int = 7) -> list[tuple[int, str, str, dict[int, float]]]:
    """(id, tenant, user, SPLADE weights): 3 tenants of 4 users, a skewed vocabulary (some
    terms in more than MAX_DF memories: pruned), and exact copies of earlier vectors (ties)."""
    rnd = random.Random(seed)
    rows = []
    for mid in range(1, 501):
        tenant, user = f"t{mid % 3}", f"u{mid % 4}"
        if mid > 20 and mid % 9 == 0:
            vec = dict(rows[rnd.randrange(len(rows))][3])  # a copy: an exact tie
        else:
            terms = {int(VOCAB * rnd.random() ** 2) for _ in range(rnd.randint(2, 12))}
            vec = {t: rnd.uniform(0.01, 3.0) for t in terms}
        rows.append((mid, tenant, user, vec))
    return rows


def _brute_force(rows, query, scope, limit):
    stored = {mid: {t: max(1, round(w * sparse_sql.SCALE)) for t, w in vec.items()}
              for mid, _, _, vec in rows}
    df = Counter(t for vec in stored.values() for t in vec)
    kept = {t: w for t, w in query.items() if df[t] <= MAX_DF}
    scores = []
    for mid, tenant, user, _ in rows:
        if not scope(tenant, user):
            continue
        score = sum(w * stored[mid].get(t, 0) for t, w in kept.items()) / sparse_sql.SCALE
        if score > 0:
            scores.append((mid, score))
    return sorted(scores, key=lambda hit: (-hit[1], hit[0]))[:limit]


def _store(db, rows) -> None:
    """The corpus as bare memory rows and their SPLADE vectors, in one transaction."""
    with db.transaction():
        for mid, tenant, user, _ in rows:
            db.execute("INSERT INTO memories (id, content, tenant_id, user_id, event_time,"
                       " created_at, updated_at) VALUES (?, 'x', ?, ?, ?, ?, ?)",
                       (mid, tenant, user, TS, TS, TS))
        sparse_sql.insert_postings(db, [(mid, vec) for mid, _, _, vec in rows])


def test_sparse_leg_is_the_brute_force_dot_product(db_path):
    rows = _corpus()
    db = open_database(db_path)
    try:
        _store(db, rows)
        rnd = random.Random(11)
        scopes = [
            (Filters(tenant_id="t1", user_id="u1"), lambda t, u: (t, u) == ("t1", "u1")),
            (Filters(tenant_id="t2"), lambda t, u: t == "t2"),
            (Filters(all_tenants=True), lambda t, u: True),
        ]
        ties = 0
        for _ in range(15):
            query = {int(VOCAB * rnd.random() ** 2): rnd.uniform(0.05, 2.5)
                     for _ in range(rnd.randint(1, 8))}
            for filters, scope in scopes:
                want = _brute_force(rows, query, scope, 10)
                ties += sum(a[1] == b[1] for a, b in zip(want, want[1:], strict=False))
                for small in (True, False):
                    got = sparse_sql.search(db, query, filters, 10, MAX_DF, small_scope=small)
                    assert [i for i, _ in got] == [i for i, _ in want], (query, filters, small)
                    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-5)
        assert ties > 5  # the copies made exact ties, which must come out by id
    finally:
        db.close()


def _stored_df(db) -> dict[int, int]:
    ids = [int(r[0]) for r in db.execute("SELECT id FROM memories")]
    return dict(Counter(t for terms in db.backend.sparse_terms(db, ids).values() for t in terms))


def test_sparse_df_follows_writes_deletes_and_recounts(db_path):
    rows = _corpus(seed=3)[:60]
    db = open_database(db_path)
    try:
        _store(db, rows)
        stored = db.backend.sparse_terms(db, [1, 2])
        assert stored == {m: sorted(rows[m - 1][3]) for m in (1, 2)}
        df = dict(db.execute("SELECT term_id, df FROM sparse_df"))
        assert df == _stored_df(db) == dict(Counter(t for *_, v in rows for t in v))
        with db.transaction():
            sparse_sql.delete_postings(db, [m for m, *_ in rows[:40]])
        df = dict(db.execute("SELECT term_id, df FROM sparse_df"))
        # A term only the deleted memories held has no row left (no trace of their words).
        assert df == _stored_df(db) == dict(Counter(t for *_, v in rows[40:] for t in v))
        with db.transaction():
            db.execute("UPDATE sparse_df SET df = df + 5")
            db.execute("INSERT INTO sparse_df (term_id, df) VALUES (9999, 3)")
            sparse_sql.recount_df(db)
        assert dict(db.execute("SELECT term_id, df FROM sparse_df")) == df
    finally:
        db.close()
