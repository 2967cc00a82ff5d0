"""PostgreSQL's sparse leg for a big scope (schema 5, v5_sparse_terms.sql): only memories
sharing a term with the query are candidates, found through the GIN index memory_sparse_terms
over each vector's term ids. The top 10 is the exact one (a dot product computed here over the
weights written) for a small and a big scope, the two plans agree, and a tenant-wide leg reads
the index (PostgreSQL's own count of its scans), where main's plan scored every vector."""

from __future__ import annotations

import random

import pytest

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not installed")

from memcli.store import sparse as sparse_sql  # noqa: E402
from memcli.store.filters import Filters  # noqa: E402
from memcli.store.opener import open_database  # noqa: E402
from memcli.store.postgres import sparse as pg_sparse  # noqa: E402

MEMORIES = 12000
VOCAB = 3000


def _load(db, rng: random.Random) -> dict[int, dict[int, int]]:
    ts = "2025-01-01T00:00:00Z"
    with db.transaction(), db.conn.cursor().copy(
            "COPY memories (id, content, tenant_id, user_id, session_id, event_time,"
            " created_at, updated_at) FROM STDIN") as copy:
        for mid in range(1, MEMORIES + 1):
            copy.write_row([mid, f"m{mid}", "a" if mid % 2 else "b", f"u{mid % 40}", None,
                            ts, ts, ts])
    weights = {mid: {t: rng.randrange(1, 300) for t in rng.sample(range(VOCAB), 25)}
               for mid in range(1, MEMORIES + 1)}
    with db.transaction():
        sparse_sql.insert_postings(db, [(m, {t: w / sparse_sql.SCALE for t, w in v.items()})
                                        for m, v in weights.items()])
    db.execute("ANALYZE memories")
    db.execute("ANALYZE memory_sparse")
    return weights


def _exact(weights, members, query, limit=10):
    scores = []
    for mid in members:
        s = sum(query[t] * w for t, w in weights[mid].items() if t in query) / sparse_sql.SCALE
        if s > 0:
            scores.append((mid, s))
    return sorted(scores, key=lambda h: (-h[1], h[0]))[:limit]


def _index_scans(db) -> int:
    db.execute("SELECT pg_stat_force_next_flush()")
    db.execute("SELECT pg_stat_clear_snapshot()")
    return int(db.scalar("SELECT idx_scan FROM pg_stat_user_indexes"
                         " WHERE indexrelname = 'memory_sparse_tenant_terms'"))


def test_big_scope_scores_only_memories_sharing_a_term(pg_db):
    rng = random.Random(5)
    db = open_database(pg_db)
    try:
        assert db.scalar("SELECT to_regclass('memory_sparse_tenant_terms') IS NOT NULL")
        weights = _load(db, rng)
        # The indexed expression lists exactly the terms written (0-based, like term_ids).
        for mid, terms in db.execute("SELECT memory_id, memcli_sparse_term_array(vec)"
                                     " FROM memory_sparse WHERE memory_id <= 50"):
            assert sorted(terms) == sorted(weights[int(mid)])
        before = _index_scans(db)
        for _ in range(15):
            query = {t: rng.uniform(0.1, 3.0) for t in rng.sample(range(VOCAB), 3)}
            for filters, members in (
                    (Filters(tenant_id="a"), [m for m in weights if m % 2]),
                    (Filters(tenant_id="b", user_id="u8"),
                     [m for m in weights if m % 2 == 0 and m % 40 == 8])):
                truth = _exact(weights, members, query)
                big = pg_sparse.search(db, query, filters, 10, small_scope=False)
                small = pg_sparse.search(db, query, filters, 10, small_scope=True)
                assert [i for i, _ in big] == [i for i, _ in truth]
                assert big == small
                for (_, got), (_, want) in zip(big, truth, strict=True):
                    assert got == pytest.approx(want, rel=1e-5)
        # A big scope's statement reads the index (15 tenant-wide queries, each one scan).
        assert _index_scans(db) - before >= 15
    finally:
        db.close()
