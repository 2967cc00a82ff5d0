"""The retrieval legs on a real PostgreSQL (memcli/store/postgres/legs.py).

Small rows written straight into memcli's own schema (its migrations; the generated
`fts` column and the indexes are the server's own), then each leg's ids and order: stemming,
BM25's idf and context weight, `high` rows never matched, tenant and user filters inside the
SQL, a 2-character CJK query, exact and HNSW dense plans, and the sparsevec leg. The last test
runs every leg through memcli's own PostgreSQL connection (PgDatabase) rather than psycopg.
"""

from __future__ import annotations

import contextlib
import math
import uuid

import pytest

from memcli.store import sparse as sparse_sql
from memcli.store.filters import Filters
from memcli.store.postgres import legs
from tests.support.pg_legs import PgAdapter, apply_schema, float_blob

DIM = 8
TS = "2025-01-01T00:00:00Z"


def _insert(conn, mid: int, content: str, *, context: str = "", tenant: str = "t1",
            user: str | None = "u1", sensitivity: str = "none",
            vector: list[float] | None = None) -> None:
    conn.execute(
        "INSERT INTO memories (id, content, context, tenant_id, user_id, sensitivity,"
        " event_time, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (mid, content, context, tenant, user, sensitivity, TS, TS, TS))
    if vector is not None:
        literal = legs.vector_literal(float_blob(vector))
        conn.execute("INSERT INTO memory_vectors (memory_id, tenant_id, user_id, embedding)"
                     " VALUES (%s, %s, %s, %s::vector)", (mid, tenant, user, literal))


ROWS = [
    # id, content, extra
    (1, "Priya was running to the station", {}),
    (2, "the cat sat on the mat", {}),
    (3, "a cat and another cat", {}),
    (4, "one cat, one zebra", {}),
    (5, "the cat likes milk", {}),
    (6, "lunch at the cafe", {"context": "we talked about the zebra exhibit"}),
    (7, "zebra zebra zebra crossing", {"tenant": "t2"}),
    (8, "zebra drawings", {"user": "u2"}),
    (9, "enc:v1:zebra running", {"sensitivity": "high"}),
    (10, "我喜欢在北京喝茶", {}),
    (11, "芒果干芒果干", {"user": "u2"}),
    (12, "我们上周在市场买了很多水果其中有芒果干和别的东西", {}),
    (13, "北京北京 secret", {"sensitivity": "high"}),
    (14, "two cat pictures", {"tenant": "t2"}),
    (15, "cat food", {"tenant": "t2"}),
    (16, "my cat toy", {}),
    (17, "my zebra toy", {}),  # same length as 16, rarer term, higher id
]


@contextlib.contextmanager
def _database(dsn: str):
    """A fresh database with the schema, dropped on the way out."""
    import psycopg

    name = f"legs_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    conn = psycopg.connect(dsn.rsplit("/", 1)[0] + f"/{name}", autocommit=True)
    try:
        apply_schema(conn, DIM)
        yield conn
    finally:
        conn.close()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def pg(pg_server):  # noqa: F811
    with _database(pg_server) as conn:
        for mid, content, extra in ROWS:
            _insert(conn, mid, content, **extra)
        conn.execute("ANALYZE memories")
        yield PgAdapter(conn)


def ids(hits):
    return [i for i, _ in hits]


T1 = Filters(tenant_id="t1")
U1 = Filters(tenant_id="t1", user_id="u1")


def test_stemmed_terms_find_inflections(pg):
    assert ids(legs.lexical(pg, ["runs"], T1, 10)) == [1]
    assert ids(legs.lexical(pg, ["was"], T1, 10)) == [1]  # no stopword list, as FTS5


def test_no_term_is_ever_query_syntax(pg):
    for term in ("o'brien", "a:b", "x&y|z", "!(priya)", "\\", "_", "'", "run:*", "%"):
        assert isinstance(legs.lexical(pg, [term, "runs"], T1, 10), list)
    assert ids(legs.lexical(pg, ["priya's", "!running"], T1, 10)) == [1]
    assert legs.lexical(pg, [], T1, 10) == []


def test_rare_terms_outrank_frequent_ones_as_bm25(pg):
    hits = legs.lexical(pg, ["cat", "zebra"], U1, 10)
    # "zebra" is in 5 of the 17 rows (the `high` row 9's tsvector is empty), "cat" in 7: the
    # row with both first; "my zebra toy" before "my cat toy" (ts_rank_cd, without idf, ties
    # them and the lower id would win); row 6 has zebra only in its context (weight 0.5).
    assert ids(hits) == [4, 17, 3, 16, 5, 6, 2]
    assert all(a[1] >= b[1] for a, b in zip(hits, hits[1:], strict=False))


def test_context_column_counts_at_its_weight(pg):
    only_context = legs.lexical(pg, ["exhibit"], T1, 10)
    assert ids(only_context) == [6]
    both = dict(legs.lexical(pg, ["zebra"], U1, 10, context_weight=0.5))
    heavier = dict(legs.lexical(pg, ["zebra"], U1, 10, context_weight=4.0))
    assert set(both) == {4, 6, 17}  # not 8 (user u2), 7 (tenant t2) or 9 (high)
    assert both[4] > both[6]  # in the turn itself beats in the previous turn at 0.5
    assert heavier[6] > heavier[4]  # and loses to it at weight 4 (row 6 is longer)
    assert legs.lexical(pg, ["zebra"], U1, 10, context_weight=0.0)[-1] == (6, 0.0)


def test_high_rows_are_never_matched(pg):
    for filters in (T1, Filters(all_tenants=True)):
        assert 9 not in ids(legs.lexical(pg, ["zebra", "running"], filters, 50))
        assert 13 not in ids(legs.trigram(pg, ["北京"], filters, 50))
    assert pg.scalar("SELECT fts = ''::tsvector FROM memories WHERE id = 9") is True


def test_tenant_and_user_filters_apply_inside_the_sql(pg):
    assert 7 not in ids(legs.lexical(pg, ["zebra"], T1, 50))
    assert ids(legs.lexical(pg, ["zebra"], Filters(tenant_id="t2"), 50)) == [7]
    assert ids(legs.lexical(pg, ["zebra"], Filters(tenant_id="t1", user_id="u2"), 50)) == [8]
    # limit 1: the filter runs before the LIMIT (the other user's row is the best match)
    assert ids(legs.trigram(pg, ["芒果干"], Filters(tenant_id="t1", user_id="u1"), 1)) == [12]
    assert ids(legs.trigram(pg, ["芒果干"], T1, 1)) == [11]


def test_cjk_grams_and_a_two_character_query(pg):
    assert ids(legs.trigram(pg, ["北京"], T1, 10)) == [10]  # FTS5's trigram MATCH finds none
    hits = legs.trigram(pg, ["芒果干"], T1, 10)
    assert ids(hits) == [11, 12]  # the short text that is all query first, as FTS5's BM25
    assert legs.trigram(pg, [], T1, 10) == []
    assert legs.trigram(pg, ["100%"], T1, 10) == []  # LIKE's own characters are literal


def _unit(values: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


@pytest.fixture(scope="module")
def vectors(pg_server):  # noqa: F811
    """Tenant `v`: 3 hand-made vectors; tenant `big`: more rows than the exact-scan limit."""
    with _database(pg_server) as conn:
        _insert(conn, 101, "a", tenant="v", vector=_unit([1, 0, 0, 0, 0, 0, 0, 0]))
        _insert(conn, 102, "b", tenant="v", vector=_unit([1, 1, 0, 0, 0, 0, 0, 0]))
        _insert(conn, 103, "c", tenant="v", user="u2",
                vector=_unit([1, 0.2, 0, 0, 0, 0, 0, 0]))
        _insert(conn, 104, "d", tenant="w", vector=_unit([1, 0, 0, 0, 0, 0, 0, 0]))
        with conn.cursor().copy("COPY memories (id, content, tenant_id, user_id, event_time,"
                                " created_at, updated_at) FROM STDIN") as copy:
            for i in range(BIG):
                copy.write_row([1000 + i, f"row {i}", "big", "ubig", TS, TS, TS])
        with conn.cursor().copy("COPY memory_vectors (memory_id, tenant_id, user_id, embedding)"
                                " FROM STDIN") as copy:
            for i in range(BIG):
                copy.write_row([1000 + i, "big", "ubig",
                                legs.vector_literal(float_blob(_spread(i)))])
        conn.execute("ANALYZE memories")
        conn.execute("ANALYZE memory_vectors")
        yield PgAdapter(conn)


BIG = legs.EXACT_SCAN_MAX + 100


def _spread(i: int) -> list[float]:
    """A deterministic unit vector per row, spread over the dimensions (no random generator)."""
    return _unit([math.cos(i * (k + 1) * 0.37) + 1.1 for k in range(DIM)])


def test_dense_exact_order_and_filters(vectors):
    query = float_blob(_unit([1, 0.05, 0, 0, 0, 0, 0, 0]))
    hits = legs.dense(vectors, query, Filters(tenant_id="v"), 10)
    assert ids(hits) == [101, 103, 102]
    assert hits[0][1] == pytest.approx(1 / math.sqrt(1.0025), abs=1e-5)
    assert ids(legs.dense(vectors, query, Filters(tenant_id="v", user_id="u1"), 10)) == [101, 102]
    tie = legs.dense(vectors, float_blob(_unit([1, 0, 0, 0, 0, 0, 0, 0])),
                     Filters(all_tenants=True, user_id="u1"), 2)
    assert ids(tie) == [101, 104]  # equal scores: by id (tenants v and w)


def _hnsw_scans(pg) -> int:
    """How many scans of the float HNSW index this server has counted (flushed first)."""
    pg.execute("SELECT pg_stat_force_next_flush()")
    pg.execute("SELECT pg_stat_clear_snapshot()")
    return int(pg.scalar("SELECT idx_scan FROM pg_stat_user_indexes"
                         " WHERE indexrelname = 'memory_vectors_hnsw'"))


def test_dense_large_scope_walks_the_index(vectors):
    target = _spread(77)
    before = _hnsw_scans(vectors)
    legs.dense(vectors, float_blob(target), Filters(tenant_id="v"), 5)
    assert _hnsw_scans(vectors) == before  # 3 rows: scored exactly, no index walk
    hits = legs.dense(vectors, float_blob(target), Filters(tenant_id="big"), 5)
    assert _hnsw_scans(vectors) > before
    assert hits[0][0] == 1077 and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert len(hits) == 5 and all(1000 <= i < 1000 + BIG for i in ids(hits))
    assert all(a[1] >= b[1] for a, b in zip(hits, hits[1:], strict=False))
    where, _ = Filters(tenant_id="big").sql()
    sql_text, inner, outer = legs.knn_sql(where, Filters(tenant_id="big"), DIM)
    literal = legs.vector_literal(float_blob(target))
    plan = "\n".join(r[0] for r in vectors.execute(
        f"EXPLAIN {sql_text}", [*inner, literal, 10, literal, *outer, 5]))
    assert "memory_vectors_hnsw" in plan


def test_sparse_vectors_rank_by_score(pg):
    # Written as the store writes them (a sparsevec per memory, df counted), weights x 100.
    sparse_sql.insert_postings(pg, [(2, {7: 1.5}), (3, {7: 0.5, 9: 1.0}), (7, {7: 9.0}),
                                    (12, {9: 0.2}), (1, {9: 0.3})])
    try:
        assert dict(pg.execute("SELECT term_id, df FROM sparse_df")) == {7: 3, 9: 3}
        expected = [(3, 2.5), (2, 1.5), (1, 0.6), (12, 0.4)]  # row 7 is tenant t2's
        query = {7: 1.0, 9: 2.0}
        # Both scope sizes run the same statement on PostgreSQL: best first, under a LIMIT too.
        for small in (True, False):
            hits = sparse_sql.search(pg, query, T1, 10, max_df=10, small_scope=small)
            assert [(i, round(s, 2)) for i, s in hits] == expected
            assert ids(sparse_sql.search(pg, query, T1, 2, max_df=10, small_scope=small)) == [3, 2]
        # A memory sharing no term with the query is not a hit (its dot product is 0).
        assert ids(sparse_sql.search(pg, {8: 1.0}, T1, 10, max_df=10)) == []
        # A term in more memories than max_df is pruned, as on SQLite.
        assert ids(sparse_sql.search(pg, query, T1, 10, max_df=2, small_scope=False)) == []
        # Deleting takes the vectors and their counts; a term no memory holds has no row.
        sparse_sql.delete_postings(pg, [3, 7])
        assert dict(pg.execute("SELECT term_id, df FROM sparse_df")) == {7: 1, 9: 2}
        sparse_sql.delete_postings(pg, [2])
        assert dict(pg.execute("SELECT term_id, df FROM sparse_df")) == {9: 2}
    finally:
        pg.conn.execute("DELETE FROM memory_sparse")
        pg.conn.execute("DELETE FROM sparse_df")


def test_legs_through_the_real_connection_and_migrated_schema(pg_db):  # noqa: F811
    """memcli's own PostgreSQL connection (placeholder rewrite, pgvector adapters) over the
    schema its migrations create: every leg runs and finds what it should."""
    from memcli.store.postgres import migrations
    from memcli.store.postgres.connection import PgDatabase

    db = PgDatabase(pg_db)
    try:
        migrations.ensure_vectors(db, DIM)
        for mid, content, context, vector in (
                (1, "Priya was running to the station", "", [1, 0, 0, 0, 0, 0, 0, 0]),
                (2, "我喜欢在北京喝茶", "we talked about tea", [0, 1, 0, 0, 0, 0, 0, 0]),
                (3, "100% sure about the 50a50 split", "", [1, 1, 0, 0, 0, 0, 0, 0])):
            db.execute(
                "INSERT INTO memories (id, content, context, tenant_id, user_id, event_time,"
                " created_at, updated_at) VALUES (?, ?, ?, 't1', 'u1', ?, ?, ?)",
                (mid, content, context, TS, TS, TS))
            db.execute("INSERT INTO memory_vectors (memory_id, tenant_id, user_id, embedding)"
                       " VALUES (?, 't1', 'u1', ?::vector)",
                       (mid, legs.vector_literal(float_blob(_unit(vector)))))
        sparse_sql.insert_postings(db, [(1, {5: 1.0}), (3, {5: 3.0})])
        assert ids(legs.lexical(db, ["runs", "tea"], U1, 10)) == [1, 2]
        assert ids(legs.trigram(db, ["北京"], U1, 10)) == [2]
        assert ids(legs.trigram(db, ["100%"], U1, 10)) == [3]
        # LIKE's wildcards are literal: as patterns, these would match "100% sure", "0a5".
        assert ids(legs.trigram(db, ["1%e"], U1, 10)) == []
        assert ids(legs.trigram(db, ["0_5"], U1, 10)) == []
        query = float_blob(_unit([1, 0.1, 0, 0, 0, 0, 0, 0]))
        assert ids(legs.dense(db, query, U1, 2)) == [1, 3]
        for small in (True, False):
            assert sparse_sql.search(db, {5: 1.0}, U1, 10, max_df=10, small_scope=small) == [
                (3, 3.0), (1, 1.0)]
    finally:
        db.close()


CATALOG = """
    SELECT 'column', c.table_name || '.' || c.column_name || ' ' || c.udt_name || ' '
                     || coalesce(format_type(a.atttypid, a.atttypmod), '')
    FROM information_schema.columns c
    JOIN pg_attribute a ON a.attrelid = (quote_ident(c.table_name))::regclass
                       AND a.attname = c.column_name
    WHERE c.table_schema = 'public'
    UNION ALL SELECT 'index', indexname || ' ' || indexdef FROM pg_indexes
    WHERE schemaname = 'public'
    UNION ALL SELECT 'trigger', tgname FROM pg_trigger WHERE NOT tgisinternal
    ORDER BY 1, 2"""


def test_apply_schema_is_the_schema_memcli_creates(pg_server):  # noqa: F811
    """The legs' tests run on memcli's own schema (not a hand copy of
    its DDL that drifts): the same tables, columns, types, indexes and triggers as a database
    memcli itself made and stored a vector in."""
    import psycopg

    from memcli import Memory
    from memcli.providers.embedders import get_embedder
    from tests.support.pg_db import scratch_database, with_database

    embedder = get_embedder("hash")
    catalogs = []
    with scratch_database(pg_server) as ours, scratch_database(pg_server) as memcli_own:
        with psycopg.connect(with_database(pg_server, ours), autocommit=True) as conn:
            apply_schema(conn, embedder.dimension)
            catalogs.append(conn.execute(CATALOG).fetchall())
        memory = Memory.open(with_database(pg_server, memcli_own), embedder=embedder)
        try:
            memory.ingest([{"event_id": "e1", "text": "a first note"}])
        finally:
            memory.close()
        with psycopg.connect(with_database(pg_server, memcli_own), autocommit=True) as conn:
            catalogs.append(conn.execute(CATALOG).fetchall())
    assert any(row[1].startswith("memory_vectors.embedding vector vector(") for row in
               catalogs[1])
    assert catalogs[0] == catalogs[1]
