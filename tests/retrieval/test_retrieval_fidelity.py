"""The rest of the evolution plan's retrieval order and metrics, and time travel, on both engines:
1-2 character CJK words through the trigram leg, the recency fallback when no leg finds
anything (its path in request metrics), one full-text hit rate for `stats --requests` and
`doctor`, and `as_of` reads through the CLI, the service operations and the MCP tools' requests.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from memcli.config import load_settings
from memcli.core.records import format_ts
from memcli.service import api, mcp_tools
from tests.support.backend import rows
from tests.support.records import ndjson, turns

# conftest: no SPLADE, one click command; SQLite and PostgreSQL (tests/support/backend.py)
pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]

CJK = ["我们昨天吃了北京烤鸭，很好吃", "明天去上海开会", "烤肉也不错", "서울 날씨가 좋다"]


def hits_of(result) -> list[dict]:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def texts(result) -> list[str]:
    return [h["text"] for h in hits_of(result)]


# -- 1-2 character CJK words -------------------------------------------------------------------
def test_one_and_two_character_cjk_words_are_found(cli):
    """The trigram index needs 3 characters: "烤鸭" (roast duck) found nothing before."""
    # One session each: the neighbours stage would bring a match's session turns along.
    records = [r for i, text in enumerate(CJK) for r in turns(f"z{i}", [text])]
    assert cli("ingest", "-", input=ndjson(records)).exit_code == 0
    strict = ("--legs", "lexical,trigram")
    assert texts(cli("query", "烤鸭", *strict)) == [CJK[0]]
    assert sorted(texts(cli("query", "烤", *strict))) == sorted([CJK[0], CJK[2]])
    assert texts(cli("query", "서울", *strict)) == [CJK[3]]
    # A 2-character word beside a longer run: each run is searched.
    assert texts(cli("query", "上海 北京烤鸭", *strict, "--top-k", "2")) == [CJK[0], CJK[1]]
    assert hits_of(cli("query", "火锅", *strict)) == []


# -- the recency fallback ----------------------------------------------------------------------
def test_no_match_falls_back_to_the_newest_memories_and_says_so(cli, monkeypatch):
    """Without an embedder, a query no full-text leg matches gets the newest memories in scope
    (the evolution plan's last step), marked by the `recent` leg; named legs stay strict."""
    monkeypatch.setenv("MEMCLI_EMBEDDER", "none")
    said = ["The kiwi harvest starts in May.", "Invoices go out monthly.",
            "The office moves to Porto."]
    assert cli("ingest", "-", input=ndjson(turns("s1", said, user="u1"))).exit_code == 0
    hits = hits_of(cli("query", "zebra quantum", "--user", "u1"))
    assert [h["text"] for h in hits] == said[::-1]  # newest first
    assert all(set(h["scores"]) == {"recent"} for h in hits)
    shown = cli("query", "zebra quantum", "--user", "u1", "--format", "text").stdout
    assert "[scope: user, no match: newest memories]" in shown
    assert hits_of(cli("query", "zebra quantum", "--user", "u1", "--legs", "lexical")) == []
    bundle = json.loads(cli("acb", "build", "--query", "zebra quantum", "--user", "u1",
                            "--json").stdout)
    assert bundle["provenance"]["retrieval_path"] == "user>recent"
    evidence = next(s for s in bundle["sections"] if s["name"] == "retrieved_evidence")
    assert evidence["items"] and "Porto" in evidence["items"][0]["text"]
    assert bundle["no_relevant"] is True  # the newest stand in; nothing was found
    # A query that matches does not fall back.
    assert "recent" not in hits_of(cli("query", "kiwi harvest", "--user", "u1"))[0]["scores"]
    stats = json.loads(cli("stats", "--requests", "--json").stdout)
    assert stats["paths"] == {"user": 2, "user>recent": 3}
    assert stats["by_command"]["acb"]["paths"] == {"user>recent": 1}
    assert stats["fallback_share"] == pytest.approx(0.6)


# -- one full-text hit rate ----------------------------------------------------------------------
def test_stats_hit_rate_is_the_full_text_rate_doctor_judges(cli):
    """The dense leg answers every query, so a hit rate over any leg said 1.0 while doctor
    found most requests short of full-text hits. Both now read one definition."""
    said = [f"The kiwi crate number {i} arrived." for i in range(5)] + ["Rain in Lisbon."]
    assert cli("ingest", "-", input=ndjson(turns("s1", said))).exit_code == 0
    for _ in range(15):
        assert cli("query", "kiwi crate", "--user", "u1").exit_code == 0  # 5 full-text hits
    for _ in range(10):
        assert cli("query", "umbrella", "--user", "u1").exit_code == 0  # none: dense only
    stats = json.loads(cli("stats", "--requests", "--json").stdout)
    assert stats["hit_rate"] == pytest.approx(0.6)
    assert stats["leg_hit_rates"]["dense"] == pytest.approx(1.0)
    assert stats["leg_hit_rates"]["any"] == pytest.approx(1.0)
    assert stats["leg_hit_rates"]["fulltext"] == pytest.approx(0.6)
    report = json.loads(cli("doctor", "--json").stdout)
    fulltext = next(c for c in report["checks"] if c["check"] == "requests:fulltext")
    assert fulltext["value"] == pytest.approx(1 - stats["hit_rate"])
    assert fulltext["status"] == "problem"  # 40 % short of 3 full-text hits > the 30 % trigger


# -- as_of ---------------------------------------------------------------------------------------
def _history(cli, db_path) -> tuple[str, str]:
    """Two events (January, April 2026) and a fact corrected once; returns the instant just
    before the correction and the instant it took effect."""
    events = [{"event_id": "e1", "user_id": "priya", "session_id": "p1",
               "ts": "2026-01-10T10:00:00Z", "content": {"text": "Priya lives in Lisbon."}},
              {"event_id": "e2", "user_id": "priya", "session_id": "p2",
               "ts": "2026-04-10T10:00:00Z", "content": {"text": "Priya moved to Madrid."}}]
    assert cli("ingest", "-", input=ndjson(events)).exit_code == 0
    old = json.loads(cli("remember", "Priya's editor is vim", "--user", "priya",
                         "--json").stdout)["id"]
    new = json.loads(cli("correct", str(old), "Priya's editor is helix", "--json").stdout)["id"]
    (valid_to,), = rows(db_path, "SELECT valid_to FROM memories WHERE id = ?", [old])
    (valid_from,), = rows(db_path, "SELECT valid_from FROM memories WHERE id = ?", [new])
    first = min(valid_to, valid_from)
    before = format_ts(datetime.fromisoformat(first.replace("Z", "+00:00"))
                       - timedelta(microseconds=1))
    return before, max(valid_to, valid_from)


def test_as_of_reads_what_was_valid_then(cli, db_path):
    before, after = _history(cli, db_path)
    ask = ("query", "where does Priya live, which editor", "--user-id", "priya", "--top-k", "50")
    march = texts(cli(*ask, "--as-of", "2026-03-01"))
    assert march == ["Priya lives in Lisbon."]  # Madrid came later; both facts even later
    then = texts(cli(*ask, "--as-of", before))
    assert "Priya's editor is vim" in then and "Priya's editor is helix" not in then
    assert "Priya moved to Madrid." in then
    now = texts(cli(*ask, "--as-of", after))
    assert "Priya's editor is helix" in now and "Priya's editor is vim" not in now
    assert "Priya's editor is vim" not in texts(cli(*ask))  # no as_of: what is current
    bundle = cli("acb", "build", "--query", "where does Priya live", "--user-id", "priya",
                 "--as-of", "2026-03-01T12:00:00+01:00", "--json").stdout
    assert "Lisbon" in bundle and "Madrid" not in bundle and "vim" not in bundle
    assert json.loads(bundle)["provenance"]["as_of"] == "2026-03-01T11:00:00.000000Z"
    for command in (("query", "x"), ("acb", "build", "--query", "x")):
        bad = cli(*command, "--as-of", "last spring")
        assert bad.exit_code == 2 and bad.stdout == ""
        assert bad.stderr.startswith("memcli: error: ") and bad.stderr.count("\n") == 1
        assert "as_of" in bad.stderr


def test_as_of_through_the_service_and_the_mcp_tools(cli, db_path, tmp_path, monkeypatch):
    _history(cli, db_path)
    service = api.Service(load_settings(db_path))
    scope = api.Binding(user_id="priya")
    try:
        found = service.run(api.query, scope, {"query": "where does Priya live",
                                               "as_of": "2026-03-01", "top_k": 50})
        assert [h["text"] for h in found] == ["Priya lives in Lisbon."]
        request = mcp_tools.TOOLS["memory_query"].request(
            {"query": "where does Priya live", "top_k": 50, "as_of": "2026-03-01"})
        assert [h["text"] for h in service.run(api.query, scope, request)] == [
            "Priya lives in Lisbon."]
        bundle = service.run(api.build_acb, scope, mcp_tools.TOOLS["memory_build_acb"].request(
            {"query": "where does Priya live", "as_of": "2026-03-01"}))
        assert "Lisbon" in json.dumps(bundle) and "Madrid" not in json.dumps(bundle)
        for operation, body in ((api.query, {"query": "x", "as_of": "soon"}),
                                (api.build_acb, {"query": "x", "as_of": "soon"})):
            with pytest.raises(api.UsageError, match="as_of"):
                service.run(operation, scope, body)
    finally:
        service.close()
