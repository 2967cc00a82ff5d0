"""One meaning per field: `agent_id` on a read is the asking
agent on `query` as on `acb build` (its allowlist applies), the writing agent is `written_by`;
importance bounds are memcli's 0-1 scale; a bundle budget never passes 65,000 tokens. Through
the real CLI and a real HTTP server."""

from __future__ import annotations

import json

import pytest

from tests.support.http_api import running_api
from tests.support.records import ndjson

pytestmark = pytest.mark.usefixtures("fast_cli")  # no SPLADE model: not about ranking


def _usage_error(result) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memcli: error: "), result.stderr
    return lines[0]


def _seed(cli) -> None:
    records = [
        {
            "event_id": "p1",
            "user_id": "u1",
            "agent_id": "planner",
            "category": "tasks",
            "text": "The kiwi harvest plan starts in May",
        },
        {
            "event_id": "s1",
            "user_id": "u1",
            "agent_id": "stylist",
            "category": "preferences",
            "text": "The kiwi labels are written in a friendly tone",
        },
    ]
    assert cli("ingest", "-", "--json", input=ndjson(records)).exit_code == 0


def _ids(cli, *args) -> list[str]:
    out = cli("query", "kiwi", "--top-k", "20", "--json", *args)
    assert out.exit_code == 0, out.stderr
    return sorted(h["event_id"] for h in json.loads(out.stdout))


def test_agent_id_on_query_is_the_asking_agent_and_written_by_the_writer(cli):
    _seed(cli)
    # The planner's allowlist (goals, tasks, projects, decisions) applies, as in acb build;
    # before, --agent-id kept the planner's own writings and ignored its allowlist.
    assert _ids(cli, "--agent-id", "planner") == ["p1"]
    assert _ids(cli, "--agent-id", "stylist") == ["s1"]
    line = _usage_error(cli("query", "kiwi", "--agent-id", "planner", "--categories", "tone"))
    assert "agent 'planner' may not read category tone" in line
    # The writing agent is a filter of its own.
    assert _ids(cli, "--written-by", "stylist") == ["s1"]
    assert _ids(cli, "--written-by", "planner", "--agent-id", "stylist") == []
    # The spec's top-level `agent` is the asking agent too; its filters.agent_id is refused.
    request = {"query": "kiwi", "agent": "stylist", "top_k": 20}
    out = cli("query", "-", "--json", input=json.dumps(request))
    assert [h["event_id"] for h in json.loads(out.stdout)] == ["s1"]
    old = {"query": "kiwi", "filters": {"agent_id": "planner"}}
    line = _usage_error(cli("query", "-", input=json.dumps(old)))
    assert "filters.agent_id" in line and "written_by" in line


def test_http_query_reads_agent_id_and_written_by(tmp_path, monkeypatch):
    with running_api(tmp_path, monkeypatch) as api, api.client() as c:
        for text, agent, category in (
            ("kiwi harvest plan", "planner", "tasks"),
            ("kiwi friendly tone", "stylist", "preferences"),
        ):
            r = c.post(
                "/api/v1/events", json={"text": text, "agent_id": agent, "category": category}
            )
            assert r.status_code == 200, r.text
        asked = c.post("/api/v1/query", json={"query": "kiwi", "agent_id": "planner"})
        assert [h["category"] for h in asked.json()] == ["tasks"]
        written = c.post("/api/v1/query", json={"query": "kiwi", "written_by": "stylist"})
        assert [h["agent_id"] for h in written.json()] == ["stylist"]
        scale = c.post("/api/v1/query", json={"query": "kiwi", "importance_min": 3})
        assert scale.status_code == 422 and "0-1 scale" in scale.json()["error"]
        budget = c.post("/api/v1/acb/build", json={"query_text": "kiwi", "max_tokens": 70000})
        assert budget.status_code == 422 and "65,000" in budget.json()["error"]


def test_importance_outside_zero_to_one_is_refused_naming_the_scale(cli):
    _seed(cli)
    for args in (("--importance-min", "3"), ("--importance-max", "5")):
        line = _usage_error(cli("query", "kiwi", *args))
        assert "0-1 scale" in line and "1-5" in line
    spec = {"query": "kiwi", "filters": {"importance_min": 2, "importance_max": 5}}
    assert "0-1 scale" in _usage_error(cli("query", "-", input=json.dumps(spec)))
    assert cli("query", "kiwi", "--importance-min", "0.5").exit_code == 0
    # The spec's `importance_min: 1` (its lowest) is memcli's highest: said when it empties
    # the answer, rather than a silent `[]`.
    spec = {"query": "kiwi", "filters": {"importance_min": 1}}
    out = cli("query", "-", "--json", input=json.dumps(spec))
    assert out.exit_code == 0 and json.loads(out.stdout) == []
    assert "importance is on memcli's 0-1 scale, where 1 is the highest" in out.stderr


def test_a_bundle_budget_above_65000_tokens_is_refused(cli, tmp_path, monkeypatch):
    _seed(cli)
    line = _usage_error(cli("acb", "build", "-q", "kiwi", "--budget-tokens", "1000000"))
    assert "at most 65,000 tokens" in line
    body = {"query_text": "kiwi", "max_tokens": 65001}
    assert "65,000" in _usage_error(cli("acb", "build", "-", input=json.dumps(body)))
    ok = cli("acb", "build", "-q", "kiwi", "--budget-tokens", "65000", "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["budget_tokens"] == 65000
    config = tmp_path / "config.yaml"
    config.write_text("acb:\n  max_tokens: 100000\n", encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    assert "65,000" in _usage_error(cli("acb", "build", "-q", "kiwi"))
