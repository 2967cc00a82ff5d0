"""PostgreSQL's tenant-wide (large-scope) legs read what their result needs, not the tenant.

- sparse and entity: the scored rows are checked against the filters best first, and the
  walk stops at the limit: `memories` rows read stay near the limit (PostgreSQL's own counts
  of tuples read), where the plan before read one per candidate (or every row of the tenant).
- lexical: each match's tsvector is cut down to the query's lexemes before it is unnested,
  so the unnest returns one row per (match, query lexeme it holds), not one per lexeme of
  every match (EXPLAIN ANALYZE of the leg's own statement).
The results are those of the small-scope plans and of an exact computation here."""

from __future__ import annotations

import json

import pytest

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not installed")

from memcli.store import search_sql  # noqa: E402
from memcli.store.filters import Filters  # noqa: E402
from memcli.store.postgres import legs  # noqa: E402
from memcli.store.postgres import sparse as pg_sparse  # noqa: E402
from tests.support.pg_db import loaded_database  # noqa: E402

TS = "2025-01-01T00:00:00Z"
PER_TENANT = 1500  # memories of each of two tenants holding the query's term or entity
LIMIT = 10
# filler words: each memory holds many lexemes beside the query's (a chat turn holds ~50)
FILLER = " ".join(f"filler{chr(97 + i)}{chr(97 + j)}" for i in range(6) for j in range(6))


@pytest.fixture(scope="module")
def db(pg_server):  # noqa: F811
    with loaded_database(pg_server, _load) as database:
        yield database


def _load(db) -> None:
    with db.transaction(), db.conn.cursor().copy(
            "COPY memories (id, content, tenant_id, user_id, event_time, created_at,"
            " updated_at) FROM STDIN") as copy:
        for mid in range(1, 2 * PER_TENANT + 1):
            word = "zebra" if mid % 3 else "zebra giraffe"
            copy.write_row([mid, f"{word} {mid} {FILLER}", "ab"[mid % 2], f"u{mid % 7}",
                            TS, TS, TS])
    with db.transaction():
        # every memory shares term 7 with the query, weights all distinct
        pg_sparse.write(db, [(mid, {7: mid, 11: 3}) for mid in range(1, 2 * PER_TENANT + 1)])
        for tenant in "ab":
            entity = db.scalar("INSERT INTO entities (tenant_id, kind, norm, display, created_at)"
                               " VALUES (?, 'person', 'mateo', 'Mateo', ?) RETURNING id",
                               (tenant, TS))
            db.execute("INSERT INTO memory_entities (memory_id, entity_id)"
                       " SELECT id, ? FROM memories WHERE tenant_id = ?", (entity, tenant))
    db.execute("VACUUM ANALYZE")


def _memory_rows_read(db) -> int:
    """Tuples of `memories` read so far by scans of the table or fetched through its indexes."""
    db.execute("SELECT pg_stat_force_next_flush()")
    db.execute("SELECT pg_stat_clear_snapshot()")
    seq, fetched = db.execute("SELECT coalesce(seq_tup_read, 0), coalesce(idx_tup_fetch, 0)"
                              " FROM pg_stat_user_tables WHERE relname = 'memories'").fetchone()
    return int(seq) + int(fetched)


def _reads(db, run):
    before = _memory_rows_read(db)
    result = run()
    return result, _memory_rows_read(db) - before


def test_sparse_large_scope_reads_memories_only_until_the_limit(db):
    tenant = Filters(tenant_id="a")
    members = [m for m in range(1, 2 * PER_TENANT + 1) if m % 2 == 0]
    truth = sorted(((m, m / 100) for m in members), key=lambda h: (-h[1], h[0]))[:LIMIT]
    big, read = _reads(db, lambda: pg_sparse.search(db, {7: 1.0}, tenant, LIMIT,
                                                     small_scope=False))
    assert [i for i, _ in big] == [i for i, _ in truth]
    assert [s for _, s in big] == pytest.approx([s for _, s in truth], rel=1e-6)
    assert big == pg_sparse.search(db, {7: 1.0}, tenant, LIMIT, small_scope=True)
    assert read <= 3 * LIMIT, f"{read} memories rows read for a top {LIMIT}"


def test_entity_large_scope_reads_memories_only_until_the_limit(db):
    tenant = Filters(tenant_id="b")
    big, read = _reads(db, lambda: search_sql.entity(db, ["mateo"], tenant, LIMIT,
                                                      small_scope=False))
    # one entity: every link scores the same, ties by id, highest first
    members = [m for m in range(1, 2 * PER_TENANT + 1) if m % 2 == 1]
    assert [i for i, _ in big] == sorted(members, reverse=True)[:LIMIT]
    assert big == search_sql.entity(db, ["mateo"], tenant, LIMIT, small_scope=True)
    # the other tenant's entity links score the same: half the walk is theirs
    assert read <= 3 * LIMIT, f"{read} memories rows read for a top {LIMIT}"


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def test_bm25_unnests_only_the_query_lexemes_of_each_match(db):
    tenant = Filters(tenant_id="a")
    terms = ["zebra", "giraffe"]
    where, params = tenant.sql()
    sql_text = legs.bm25_sql(len(terms), where)
    args = [*terms, " ".join(terms), 0.5, *params, LIMIT]
    value = db.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql_text, args).fetchone()[0]
    plan = (json.loads(value) if isinstance(value, str) else value)[0]
    unnests = [n for n in _nodes(plan["Plan"])
               if n.get("Node Type") == "Function Scan" and n.get("Alias") == "u"]
    assert len(unnests) == 1
    rows = unnests[0]["Actual Rows"] * unnests[0]["Actual Loops"]
    matches = PER_TENANT  # every memory of the tenant holds "zebra"
    giraffes = sum(1 for m in range(2, 2 * PER_TENANT + 1, 2) if m % 3 == 0)
    assert unnests[0]["Actual Loops"] == matches
    assert rows == pytest.approx(matches + giraffes, rel=0.01)  # (rows a loop: 2 decimals)
    # the ranking: rarer "giraffe" first, then by length (the id's digits), ties by id
    hits = legs.lexical(db, terms, tenant, LIMIT)
    assert [i for i, _ in hits][:3] == [6, 12, 18]
