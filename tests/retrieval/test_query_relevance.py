"""A hit's relevance end to end: a nonsense query finds nothing relevant and says so, an exact
match is found, `--threshold` and a bundle's `min_relevance` drop what is irrelevant; through
the CLI on both engines, HTTP and MCP (the official client). The calibration itself:
tests/retrieval/test_relevance.py and bench/relevance.py."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client

from memcli import Memory
from memcli.config import load_settings
from memcli.providers.embedders import HashEmbedder
from memcli.providers.splade import default_encoder
from memcli.retrieval import relevance as judge
from memcli.retrieval import search
from memcli.retrieval.stages import RankContext
from memcli.service.api import Binding
from memcli.service.mcp_server import build_mcp, select_tools
from tests.support.http_api import T1_TOKEN, running_api
from tests.support.mcp import CONFIG, payload
from tests.support.records import ndjson, turns
from tests.support.scenarios import bundle, items, run_json

pytestmark = pytest.mark.usefixtures("fast_cli")  # no SPLADE model: the lexical calibration

NOTES = [
    "The staging database listens on port 5433.",
    "Priya reviews the billing service every Friday.",
    "The mobile app launch is planned for 12 May.",
    "Alice drinks green tea in the morning.",
    "We moved the CI runners to the new cluster last week.",
]
NONSENSE = "xylophone zeppelin quantum"
EXACT = "which port does the staging database listen on"


@pytest.fixture
def notes(cli):
    run_json(cli, "ingest", "-", input=ndjson(turns("s1", NOTES)))


@pytest.mark.backends  # the same relevance on SQLite and PostgreSQL
def test_a_nonsense_query_finds_nothing_relevant_and_an_exact_match_is_found(cli, notes):
    nonsense = run_json(cli, "query", NONSENSE)
    assert nonsense, "the least bad hits are still shown, flagged"
    assert all(h["relevance"] < 0.02 and h["no_relevant"] for h in nonsense)
    exact = run_json(cli, "query", EXACT)
    assert exact[0]["text"].startswith("The staging database")
    assert exact[0]["relevance"] > 0.3 and not exact[0]["no_relevant"]
    assert all(h["relevance"] < exact[0]["relevance"] for h in exact[1:])
    # The fused score is normalised within the query: it cannot tell the two apart.
    assert nonsense[0]["score"] == pytest.approx(exact[0]["score"], abs=0.05)


def test_threshold_keeps_only_relevant_hits(cli, notes):
    found = run_json(cli, "query", EXACT, "--threshold", "0.2")
    assert [h["text"] for h in found] == [NOTES[0]]
    assert run_json(cli, "query", NONSENSE, "--threshold", "0.2") == []
    bad = cli("query", EXACT, "--threshold", "2", "--json")
    assert bad.exit_code == 2 and "threshold" in bad.stderr


def test_a_bundle_shows_no_evidence_when_nothing_is_relevant(cli, notes):
    empty = bundle(cli, "--user-id", "u1", "-q", NONSENSE)
    assert empty["no_relevant"] is True and items(empty, "retrieved_evidence") == []
    found = bundle(cli, "--user-id", "u1", "-q", EXACT)
    assert found["no_relevant"] is False
    evidence = items(found, "retrieved_evidence")
    assert evidence[0]["text"].count("5433") and evidence[0]["relevance"] > 0.3
    assert len(evidence) > 1  # by default a relevant bundle keeps its other evidence
    strict = bundle(cli, "--user-id", "u1", "-q", EXACT, "--min-relevance", "0.2")
    assert [i["memory_id"] for i in items(strict, "retrieved_evidence")] == [
        evidence[0]["memory_id"]
    ]


def test_relevance_and_no_relevant_over_http(tmp_path, monkeypatch):
    with running_api(tmp_path, monkeypatch) as server, server.client(T1_TOKEN) as c:
        events = [{"session_id": "s1", "user_id": "u1", "content": {"text": t}} for t in NOTES]
        assert c.post("/api/v1/events", json=events).status_code == 200
        nonsense = c.post("/api/v1/query", json={"query": NONSENSE}).json()
        assert nonsense and all(h["no_relevant"] and h["relevance"] < 0.02 for h in nonsense)
        exact = c.post("/api/v1/query", json={"query": EXACT, "threshold": 0.2}).json()
        assert [h["text"] for h in exact] == [NOTES[0]] and not exact[0]["no_relevant"]
        acb = c.post("/api/v1/acb/build", json={"query_text": NONSENSE, "user_id": "u1"})
        assert acb.status_code == 200 and acb.json()["no_relevant"] is True
        strict = c.post(
            "/api/v1/acb/build", json={"query_text": EXACT, "user_id": "u1", "min_relevance": 0.2}
        ).json()
        assert strict["no_relevant"] is False
        bad = c.post("/api/v1/query", json={"query": EXACT, "threshold": -1})
        assert 400 <= bad.status_code < 500 and "threshold" in bad.text


def test_relevance_and_no_relevant_over_mcp(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    server = build_mcp(
        load_settings(tmp_path / "memory.db"), Binding(user_id="alice"), select_tools("all")
    )

    async def main():
        async with Client(server) as client:
            for text in NOTES:
                payload(await client.call_tool("memory_record_event", {"text": text}))
            nonsense = payload(await client.call_tool("memory_query", {"query": NONSENSE}))
            exact = payload(
                await client.call_tool("memory_query", {"query": EXACT, "threshold": 0.2})
            )
            acb = payload(
                await client.call_tool(
                    "memory_build_acb", {"query": NONSENSE, "min_relevance": 0.2}
                )
            )
            return nonsense["result"], exact["result"], acb["result"]

    nonsense, exact, acb = anyio.run(main)
    assert nonsense and all(h["no_relevant"] and h["relevance"] < 0.02 for h in nonsense)
    assert [h["text"] for h in exact] == [NOTES[0]] and exact[0]["relevance"] > 0.3
    assert acb["no_relevant"] is True


@pytest.mark.backends  # pgvector's `<=>` and sqlite-vec's cosine: the same signal
def test_each_hit_is_judged_by_its_own_cosine_where_the_leg_stopped_before_it(memory):
    """The dense leg keeps its best `candidates_per_leg`; a shown hit below that line gets its
    own cosine (the leg run again over it), never a stand-in from where the list was cut."""
    memory.ingest([{"text": t, "user_id": "u1", "session_id": "s1"} for t in NOTES])
    text = "green tea in the morning"
    scope = memory.filters(user_id="u1")
    calibration = judge.Calibration(
        models=judge.shipped().models, embedder=memory.embedder.model_id, sparse=None
    )
    whole = memory.retrieval.model_copy(update={"candidates_per_leg": 100})
    cosines = dict(search.run_legs(memory.db, memory.embedder, text, scope, whole)["dense"])
    short = memory.retrieval.model_copy(update={"candidates_per_leg": 2})
    legs = search.run_legs(memory.db, memory.embedder, text, scope, short)
    ranked = search.rank(RankContext(memory.db, scope, text, short), legs)
    assert len(ranked) > 2  # some hits came from other legs or neighbours
    search.assess(memory.db, memory.embedder, None, text, scope, short, legs, ranked, calibration)
    for cand in ranked:
        assert cand.signals.dense == pytest.approx(cosines[cand.id], abs=1e-5)
        assert cand.relevance == judge.relevance(cand.signals, calibration)


@pytest.mark.slow  # the real SPLADE model; and the session's PostgreSQL server
def test_sparse_and_dense_signals_give_the_same_relevance_on_both_engines(tmp_path, pg_memcli_db):
    """SQLite's postings and pgvector's sparsevec compute one SPLADE dot product, sqlite-vec and
    pgvector one cosine: a hit's relevance is the same number on either engine."""
    splade, embedder = default_encoder(), HashEmbedder(64)
    calibration = judge.Calibration(
        models=judge.shipped().models, embedder=embedder.model_id, sparse=splade.model_id
    )
    judged = []
    for location in (tmp_path / "memory.db", pg_memcli_db):
        with Memory.open(location, embedder=embedder, sparse=splade) as memory:
            memory.ingest([{"text": t, "user_id": "u1", "session_id": "s1"} for t in NOTES])
            scope = memory.filters(user_id="u1")
            legs = search.run_legs(
                memory.db, embedder, EXACT, scope, memory.retrieval, sparse=splade
            )
            ranked = search.rank(RankContext(memory.db, scope, EXACT, memory.retrieval), legs)
            search.assess(
                memory.db,
                embedder,
                splade,
                EXACT,
                scope,
                memory.retrieval,
                legs,
                ranked,
                calibration,
            )
            judged.append({c.id: c for c in ranked})
    on_sqlite, on_pg = judged
    assert on_sqlite.keys() == on_pg.keys()
    for mid, cand in on_sqlite.items():
        assert cand.signals.sparse is not None and cand.signals.dense is not None
        assert on_pg[mid].signals.sparse == pytest.approx(cand.signals.sparse, abs=1e-3)
        assert on_pg[mid].signals.dense == pytest.approx(cand.signals.dense, abs=1e-5)
        assert on_pg[mid].relevance == pytest.approx(cand.relevance, abs=1e-3)
    assert max(c.relevance for c in on_sqlite.values()) > 0.3
