"""The optional reranker: a real HTTP server on 127.0.0.1 (tests/support/rerankstub.py) in both
wire formats, spoken to by memcli's own client, through `memcli query` and `memcli acb build`.

What is proven: the reranker's scores decide the order of the fused top N and only that top is
sent; the API key goes in the Authorization header; a server that is down, slow or answers
garbage leaves the fused order with a one-line warning and the reason in the JSON; a bad URL is
a usage error before anything runs; nothing is sent unless an endpoint is configured."""

from __future__ import annotations

import json
import socket

import pytest

from memcli.providers.reranker import HttpReranker, RerankError, parse_scores
from tests.support.records import ndjson, turns
from tests.support.rerankstub import RerankStub

pytestmark = pytest.mark.usefixtures("fast_cli")  # conftest: no SPLADE, one click command

TEA = [
    "Alice drinks green tea every morning",
    "Alice likes tea with milk",
    "the oolong tea Alice bought in Taipei",
    "Bob thinks tea is dull",
    "jasmine tea is what Alice brews on Sundays",
    "Alice gave up coffee for tea",
]
QUESTION = "what tea does Alice drink"


@pytest.fixture
def tea(cli):
    """The CLI over a database holding the tea turns."""
    assert cli("ingest", "-", input=ndjson(turns("s1", TEA, user="alice"))).exit_code == 0
    return cli


def ask(cli, *extra: str):
    return cli("query", QUESTION, "--user-id", "alice", "--json", *extra)


def hits(result) -> list[dict]:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def texts(found: list[dict]) -> list[str]:
    return [h["text"] for h in found]


def use(monkeypatch, url: str, **more: str) -> None:
    monkeypatch.setenv("MEMCLI_RERANK_URL", url)
    for key, value in more.items():
        monkeypatch.setenv(f"MEMCLI_RERANK_{key.upper()}", value)


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a port just released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/rerank"


# -- the order follows the server ------------------------------------------------------------
@pytest.mark.parametrize("wire", ["tei", "cohere"])
def test_the_reranker_orders_the_fused_top(tea, monkeypatch, rerank_stub, wire):
    fused = texts(hits(ask(tea)))
    assert len(fused) == len(TEA)
    # The stub prefers the two turns the fused order puts lowest among the tea turns.
    rerank_stub.scores = {fused[-1]: 9.0, fused[-2]: 5.0}
    use(monkeypatch, rerank_stub.url, format=wire, model="bge-reranker-v2-m3")
    found = hits(ask(tea))
    assert texts(found)[:2] == [fused[-1], fused[-2]]
    assert sorted(texts(found)) == sorted(fused)  # reordered, nothing lost or added
    # `score` still sorts the list; the reranker's own score sits beside it.
    assert [h["score"] for h in found] == sorted((h["score"] for h in found), reverse=True)
    assert found[0]["rerank_score"] == pytest.approx(9.0)
    assert found[1]["rerank_score"] == pytest.approx(5.0)
    assert all(h["rerank_skipped"] is None for h in found)
    body = rerank_stub.requests[0]
    assert body["query"] == QUESTION
    sent = body["texts"] if wire == "tei" else body["documents"]
    assert sorted(sent) == sorted(fused)
    if wire == "cohere":
        assert body["model"] == "bge-reranker-v2-m3" and body["top_n"] == len(sent)
    else:
        assert "model" not in body and "documents" not in body


def test_auto_picks_the_cohere_body_when_a_model_is_named(tea, monkeypatch, rerank_stub):
    use(monkeypatch, rerank_stub.url)
    hits(ask(tea))
    use(monkeypatch, rerank_stub.url, model="rerank-v3.5")
    hits(ask(tea))
    first, second = rerank_stub.requests
    assert "texts" in first and "documents" not in first
    assert "documents" in second and second["model"] == "rerank-v3.5"


def test_only_the_top_n_is_sent_and_the_rest_keeps_its_place(tea, monkeypatch, rerank_stub):
    fused = texts(hits(ask(tea)))
    rerank_stub.scores = {fused[2]: 1.0}
    use(monkeypatch, rerank_stub.url, top_n="3")
    found = hits(ask(tea))
    assert rerank_stub.requests[0]["texts"] == fused[:3]
    assert texts(found) == [fused[2], fused[0], fused[1], *fused[3:]]
    assert [h["rerank_score"] is not None for h in found] == [True] * 3 + [False] * 3


def test_the_api_key_goes_in_the_authorization_header(tea, monkeypatch, rerank_stub):
    use(monkeypatch, rerank_stub.url, api_key="sk-rerank-test")
    hits(ask(tea))
    assert rerank_stub.headers[0]["authorization"] == "Bearer sk-rerank-test"


def test_nothing_is_sent_unless_an_endpoint_is_configured(tea, rerank_stub):
    found = hits(ask(tea))
    assert rerank_stub.requests == []
    assert all(h["rerank_score"] is None and h["rerank_skipped"] is None for h in found)


def test_explain_says_what_the_reranker_did(tea, monkeypatch, rerank_stub):
    rerank_stub.scores = {"oolong": 2.0}
    use(monkeypatch, rerank_stub.url, model="bge")
    shown = tea("query", QUESTION, "--user-id", "alice", "--format", "text", "--explain")
    assert shown.exit_code == 0, shown.stderr
    assert "reranked top 6 by bge" in " ".join(shown.stdout.split())
    assert "rerank_score=2" in shown.stdout
    rerank_stub.fail(status=500)
    shown = tea("query", QUESTION, "--user-id", "alice", "--format", "text", "--explain")
    assert shown.exit_code == 0, shown.stderr
    assert "rerank skipped: " in " ".join(shown.stdout.split())
    assert "rerank_score" not in shown.stdout


# -- failures keep the fused order -----------------------------------------------------------
def failing(stub: RerankStub, how: str) -> str:
    """Make the stub (or the URL) fail one way; the URL to configure and the expected reason."""
    if how == "down":
        return closed_port_url()
    stub.fail(
        **{
            "slow": {"delay": 3.0},
            "http 500": {"status": 500},
            "not json": {"raw_body": "<html>oops</html>"},
            "wrong shape": {"raw_body": '{"scores": [1, 2]}'},
            "too few": {"raw_body": '[{"index": 0, "score": 1.0}]'},
        }[how]
    )
    return stub.url


REASONS = {
    "down": "cannot reach",
    "slow": "no answer from",
    "http 500": "answered HTTP 500",
    "not json": "no JSON",
    "wrong shape": "neither a list",
    "too few": "scores 1 of",
}


@pytest.mark.parametrize("how", list(REASONS))
def test_a_failing_reranker_leaves_the_fused_order(tea, monkeypatch, rerank_stub, how):
    fused = hits(ask(tea))
    use(monkeypatch, failing(rerank_stub, how), timeout="0.5")
    result = ask(tea)
    found = hits(result)
    assert texts(found) == texts(fused)
    assert [h["score"] for h in found] == [h["score"] for h in fused]
    warning = result.stderr.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("memcli: warning: rerank skipped: ")
    assert REASONS[how] in warning[0] and "Traceback" not in result.stderr
    assert all(REASONS[how] in h["rerank_skipped"] for h in found)
    assert all(h["rerank_score"] is None for h in found)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("localhost:8080/rerank", "not an http(s) URL"),
        ("ftp://127.0.0.1/rerank", "not an http(s) URL"),
        ("http://127.0.0.1:port/rerank", "bad port"),
    ],
)
def test_a_bad_url_is_a_usage_error_before_anything_runs(tea, monkeypatch, value, why):
    use(monkeypatch, value)
    result = ask(tea)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("memcli: error: ") and why in result.stderr
    assert "rerank.url" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_bad_format_is_a_usage_error(tea, monkeypatch, rerank_stub):
    use(monkeypatch, rerank_stub.url, format="openai")
    result = ask(tea)
    assert result.exit_code == 2 and "rerank.format" in result.stderr
    assert rerank_stub.requests == []


# -- bundles ---------------------------------------------------------------------------------
def evidence(result) -> list[dict]:
    assert result.exit_code == 0, result.stderr
    bundle = json.loads(result.stdout)
    (section,) = [s for s in bundle["sections"] if s["name"] == "retrieved_evidence"]
    return bundle, section["items"]


def build(cli):
    return cli("acb", "build", "-q", QUESTION, "--user-id", "alice", "--json")


def test_a_bundle_packs_its_evidence_in_the_rerankers_order(tea, monkeypatch, rerank_stub):
    bundle, plain = evidence(build(tea))
    assert bundle["provenance"]["rerank"] is None and len(plain) >= 3
    last = plain[-1]["memory_id"]
    (text,) = [t for t in TEA if t in plain[-1]["text"]]
    rerank_stub.scores = {text: 4.0}
    use(monkeypatch, rerank_stub.url, model="bge")
    bundle, items = evidence(build(tea))
    assert items[0]["memory_id"] == last and items[0]["rerank_score"] == pytest.approx(4.0)
    assert sorted(i["memory_id"] for i in items) == sorted(i["memory_id"] for i in plain)
    report = bundle["provenance"]["rerank"]
    assert report["reranked"] is True and report["skipped"] is None
    assert report["model"] == "bge" and report["candidates"] == len(
        rerank_stub.requests[0]["documents"]
    )


def test_a_bundle_with_the_reranker_down_keeps_the_fused_order(tea, monkeypatch):
    _, plain = evidence(build(tea))
    use(monkeypatch, closed_port_url())
    result = build(tea)
    bundle, items = evidence(result)
    assert [i["memory_id"] for i in items] == [i["memory_id"] for i in plain]
    assert "cannot reach" in bundle["provenance"]["rerank"]["skipped"]
    assert result.stderr.startswith("memcli: warning: rerank skipped: cannot reach")
    assert "Traceback" not in result.stderr


# -- the dense leg on the user's model server -------------------------------------------------
def test_a_query_whose_embeddings_server_is_down_says_so_in_one_line(cli, monkeypatch, stub):
    monkeypatch.setenv("MEMCLI_EMBEDDER", "openai")
    monkeypatch.setenv("MEMCLI_EMBED_BASE_URL", stub.base_url)
    monkeypatch.setenv("MEMCLI_EMBED_MODEL", "bge-large")
    monkeypatch.setenv("MEMCLI_EMBED_DIMENSION", str(stub.embedding_dim))
    assert cli("ingest", "-", input=ndjson(turns("s1", TEA, user="alice"))).exit_code == 0
    assert hits(ask(cli))
    stub.close()
    result = ask(cli)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("memcli: error: embedding request to ")
    assert "bug" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


# -- the client on its own -------------------------------------------------------------------
@pytest.mark.parametrize(
    "answer",
    [
        {"results": [{"index": 0, "relevance_score": 1.0}, {"index": 0, "relevance_score": 2.0}]},
        {"results": [{"index": 0, "relevance_score": 1.0}, {"index": 2, "relevance_score": 2.0}]},
        [{"index": 0, "score": 1.0}, {"index": 1, "score": "high"}],
        [{"index": 0, "score": 1.0}, {"index": 1, "score": float("nan")}],
        [{"index": True, "score": 1.0}, {"index": 1, "score": 1.0}],
        [1.0, 2.0],
        {"data": []},
    ],
)
def test_an_answer_that_is_not_one_finite_score_per_text_is_refused(answer):
    with pytest.raises(RerankError):
        parse_scores(answer, 2)


def test_either_answer_shape_is_read_in_the_order_sent():
    cohere = {
        "results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]
    }
    tei = [{"index": 1, "score": 0.9}, {"index": 0, "score": 0.1}]
    assert parse_scores(cohere, 2) == parse_scores(tei, 2) == [0.1, 0.9]


def test_a_top_larger_than_teis_batch_limit_goes_in_requests_of_32(rerank_stub):
    rerank_stub.scores = {"#39": 1.0, "#3 ": 0.5}
    client = HttpReranker(rerank_stub.url, wire="tei")
    try:
        scores = client.score("q", [f"#{i} text" for i in range(40)])
    finally:
        client.close()
    assert [len(body["texts"]) for body in rerank_stub.requests] == [32, 8]
    assert scores == [0.5 if i == 3 else 1.0 if i == 39 else 0.0 for i in range(40)]


def test_a_slow_server_costs_the_timeout_not_more(rerank_stub):
    rerank_stub.fail(delay=5.0)
    client = HttpReranker(rerank_stub.url, timeout=0.3)
    try:
        with pytest.raises(RerankError, match="within 0.3 s"):
            client.score("q", ["a", "b"])
    finally:
        client.close()
