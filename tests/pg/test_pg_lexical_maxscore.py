"""PostgreSQL's lexical leg over a tenant (memcli/store/postgres/lexical.py) scores only the
matches that can reach the top `limit`, and answers exactly as the full statement does.

On a corpus of common, middling and rare words (ties of equal scores everywhere: a few
lengths only), every query of one to three of them, tenant-wide and over all tenants: the same
ids in the same order and the same scores as legs.lexical (the full statement), whichever
plan was taken (pruned at the first split; two statements when its check fails, fewer
matches than the limit holding an essential lexeme included; the full statement). Then the
pruned statement's own plan: fewer matches unnested and scored than the full statement's
when common words are in the query."""

from __future__ import annotations

import itertools
import json
import random

import pytest

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not installed")

from memcli.store import search_sql  # noqa: E402
from memcli.store.backend import LexicalQuery  # noqa: E402
from memcli.store.filters import Filters  # noqa: E402
from memcli.store.postgres import legs, lexical  # noqa: E402
from tests.support.pg_db import loaded_database  # noqa: E402

TS = "2025-01-01T00:00:00Z"
PER_TENANT = 2500
# word: share of memories holding it (common ones hold most memories, rare ones a few)
WORDS = {"alpha": 0.9, "beta": 0.6, "gamma": 0.4, "delta": 0.1, "epsilon": 0.04,
         "zeta": 0.012, "eta": 0.004}
FILLERS = [f"filler{c}" for c in "abcdefghij"]


@pytest.fixture(scope="module")
def db(pg_server):  # noqa: F811
    with loaded_database(pg_server, _load) as database:
        yield database


def _text(rng: random.Random) -> tuple[str, str]:
    """A memory's turn and context: each word by its share, sometimes twice, padded to one of
    three lengths (memories of the same words and length score the same: ties)."""
    words = [w for w, share in WORDS.items() if rng.random() < share]
    words += [w for w in words if rng.random() < 0.2]  # tf 2
    turn = words + FILLERS[:rng.choice((2, 4, 8)) ]
    context = [w for w in WORDS if rng.random() < 0.03]  # weight B
    return " ".join(turn), " ".join(context)


def _load(db) -> None:
    rng = random.Random(27)
    with db.transaction(), db.conn.cursor().copy(
            "COPY memories (id, content, context, tenant_id, user_id, event_time, created_at,"
            " updated_at) FROM STDIN") as copy:
        for mid in range(1, 2 * PER_TENANT + 1):
            turn, context = _text(rng)
            copy.write_row([mid, turn, context, "ab"[mid % 2], f"u{mid % 5}", TS, TS, TS])
    db.execute("VACUUM ANALYZE")


def _queries() -> list[list[str]]:
    return [list(q) for n in (1, 2, 3) for q in itertools.combinations(WORDS, n)]


def _same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    assert [i for i, _ in got] == [i for i, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(("scope", "limit", "first"), [
    (Filters(tenant_id="a"), 10, None), (Filters(tenant_id="a"), 200, None),
    (Filters(tenant_id="b"), 10, 20.0), (Filters(tenant_id="b"), 50, 20.0),
    (Filters(all_tenants=True), 50, None)],
    ids=["tenant-10", "tenant-200", "tenant-10-high", "tenant-50-high", "all-tenants-50"])
def test_same_results_as_the_full_statement(db, scope, limit, first):
    """`first`: the first split's threshold, the default guess or one too high for most
    queries (the check fails, a second statement scores what can still reach the top)."""
    plans: dict[str, int] = {}
    ties_at_theta = 0
    for terms in _queries():
        trace: dict = {}
        got = lexical.search(db, terms, scope, limit, 0.5, trace=trace, first=first)
        want = legs.lexical(db, terms, scope, limit + 1, 0.5)
        _same(got, want[:limit])
        plans[trace["plan"]] = plans.get(trace["plan"], 0) + 1
        if (trace["plan"] != "full" and len(want) > limit
                and want[limit][1] == want[limit - 1][1]):
            ties_at_theta += 1  # the limit-th and the next scored the same
    # the corpus exercises every path: pruned at the first split, retried, the full statement
    assert plans.get("pruned", 0) > 0 and plans.get("full", 0) > 0, plans
    if first is not None:
        assert plans.get("two", 0) > 0, plans
    assert ties_at_theta > 0


def test_fewer_essential_matches_than_the_limit(db):
    """No theta: the second statement scores every match the first left out, once."""
    tenant = Filters(tenant_id="b")
    terms = ["eta", "alpha", "beta"]
    trace: dict = {}
    got = lexical.search(db, terms, tenant, 200, 0.5, trace=trace)
    first, second = trace["splits"]
    assert trace["plan"] == "two" and first.essential == ("eta",) and not second.common
    _same(got, legs.lexical(db, terms, tenant, 200, 0.5))
    everything = lexical.match_counts(db, terms, tenant)
    assert (lexical.match_counts(db, terms, tenant, list(first.essential))
            + lexical.match_counts(db, terms, tenant, trace["added"], list(first.essential))
            == everything)


def test_only_common_words(db):
    tenant = Filters(tenant_id="a")
    for terms in (["alpha", "beta"], ["alpha", "beta", "gamma"], ["beta", "gamma"]):
        for limit in (5, 50):
            trace: dict = {}
            _same(lexical.search(db, terms, tenant, limit, 0.5, trace=trace),
                  legs.lexical(db, terms, tenant, limit, 0.5))


def test_the_backend_prunes_tenant_wide_only(db):
    """The store's lexical leg: the same hits either way; one user's scope runs the full
    statement alone (no statistics statement first), a tenant's the pruned plan."""
    query = LexicalQuery(terms=("zeta", "alpha", "beta"), grams=())
    for scope in (Filters(tenant_id="a"), Filters(tenant_id="a", user_id="u1")):
        _same(search_sql.lexical(db, query, scope, 10, 0.5),
              legs.lexical(db, list(query.terms), scope, 10, 0.5))


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _scored(db, sql_text: str, args: list) -> tuple[int, list]:
    """Matches unnested and scored by a BM25 statement (EXPLAIN ANALYZE), and its rows."""
    value = db.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql_text, args).fetchone()[0]
    plan = (json.loads(value) if isinstance(value, str) else value)[0]
    unnests = [n for n in _nodes(plan["Plan"])
               if n.get("Node Type") == "Function Scan" and n.get("Alias") == "u"]
    assert len(unnests) == 1
    return unnests[0]["Actual Loops"], db.execute(sql_text, args).fetchall()


def test_the_pruned_statement_scores_fewer_matches(db):
    tenant = Filters(tenant_id="a")
    terms, limit = ["zeta", "delta", "alpha", "beta"], 10
    trace: dict = {}
    hits = lexical.search(db, terms, tenant, limit, 0.5, trace=trace)
    assert trace["plan"] == "pruned"
    cut = trace["splits"][-1]
    assert set(cut.common) >= {"alpha", "beta"}
    where, params = tenant.sql()
    full_scored, full_rows = _scored(db, legs.bm25_sql(len(terms), where),
                                     [*terms, " ".join(terms), 0.5, *params, limit])
    pruned_scored, pruned_rows = _scored(
        db, legs.bm25_sql(len(terms), where, essential=True),
        [*terms, " ".join(terms), 0.5, list(cut.essential), *params, limit])
    _same(hits, [(int(i), float(s)) for i, s in full_rows])
    _same([(int(i), float(s)) for i, s in pruned_rows], hits)
    # every match of the tenant holding a term, against those holding zeta or delta
    assert full_scored == lexical.match_counts(db, terms, tenant)
    assert pruned_scored == lexical.match_counts(db, terms, tenant, list(cut.essential))
    assert pruned_scored * 4 < full_scored, (pruned_scored, full_scored)


def test_lexemes_are_read_verbatim(db):
    """The essential lexemes reach the index as they are (tsquery input syntax escaped)."""
    for lexeme in ["it's", "a\\b", "x''y", "?", "a|b", "plain"]:
        holds = f"SELECT array_to_tsvector(ARRAY[?]::text[]) @@ {legs.LEXEMES_OR}"
        assert db.scalar(holds, [lexeme, [lexeme, "other"]]) is True, lexeme
        assert db.scalar(holds, [lexeme + "x", [lexeme]]) is False, lexeme
