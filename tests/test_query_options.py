"""Every option of `memcli query` is a field of the query request, so `POST /api/v1/query` and
the MCP `memory_query` tool say it with the CLI's effect: `legs`, `sensitivity`, `widen`
(`--no-widen`), `explain` and `all_tenants`, the last only for a caller no tenant binds. The
bundle and the query spell what they share alike; the old spellings are still read on the
wire (until 0.2.0) and appear in no schema. A bad value is a 4xx (a tool error, exit 2) in one
line."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp import Client
from typer.testing import CliRunner

from memcli.cli.app import app
from memcli.config import load_settings
from memcli.service.api import Binding
from memcli.service.mcp_server import build_mcp
from tests.support.http_api import OPERATOR, T1_TOKEN, running_api, write_token_file
from tests.support.mcp import error_text, payload
from tests.support.records import ndjson

TASKS_TOKEN = "tasks-only-token-0123456789abcd"
RECORDS = [
    {"event_id": "e1", "tenant_id": "t1", "user_id": "u1", "session_id": "s1",
     "ts": "2025-01-01T10:00:00Z", "text": "kiwi pie at the picnic"},
    {"event_id": "e2", "tenant_id": "t1", "user_id": "u1", "session_id": "s1",
     "ts": "2025-01-01T10:01:00Z", "text": "kiwi jam recipe, kept close", "sensitivity": "high"},
    {"event_id": "e3", "tenant_id": "t1", "user_id": "u1", "session_id": "s1",
     "ts": "2025-01-01T10:02:00Z", "text": "buy kiwi for the tasks list", "category": "tasks"},
    {"event_id": "e4", "tenant_id": "t1", "user_id": "u1", "session_id": "s2",
     "ts": "2025-01-02T10:00:00Z", "text": "kiwi smoothie on tuesday"},
    {"event_id": "e5", "tenant_id": "t2", "user_id": "u9", "session_id": "s9",
     "ts": "2025-01-03T10:00:00Z", "text": "kiwi farm of another tenant"},
]
# (the request's options, the same as flags): each must change the answer, and the same way.
OPTIONS = [
    ({"legs": ["lexical"]}, ["--legs", "lexical"]),
    ({"legs": "lexical,trigram"}, ["--legs", "lexical,trigram"]),
    ({"sensitivity": ["high"]}, ["--sensitivity", "high"]),
    ({"session_id": "s2", "widen": False}, ["--session-id", "s2", "--no-widen"]),
    ({"explain": True}, ["--explain"]),
]


@pytest.fixture
def served(tmp_path, monkeypatch):
    tokens = write_token_file(tmp_path / "token-file", [
        OPERATOR, f"{T1_TOKEN} tenant=t1", f"{TASKS_TOKEN} tenant=t1 categories=tasks"])
    with running_api(tmp_path, monkeypatch, token_file=tokens) as api:
        ingested = _cli(api.db, "ingest", "-", input=ndjson(RECORDS))
        assert ingested.exit_code == 0, ingested.stderr
        yield api


def _cli(db, *args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(app, [*args, "--db", str(db)], input=input,
                              catch_exceptions=False)


def _shape(answer: Any) -> Any:
    """What a query answered, without its timing: the hits' ids and legs, and with `explain`
    the scope and path that answered."""
    if isinstance(answer, dict):
        return {"scope": answer["scope"], "path": answer["path"], "hits": _shape(answer["hits"])}
    return [(hit["id"], sorted(hit["scores"])) for hit in answer]


def _mcp(db, binding: Binding, *calls: dict[str, Any]) -> list[Any]:
    """Each `memory_query` call's result through the SDK's client, on a server bound so."""
    async def main() -> list[Any]:
        server = build_mcp(load_settings(db), binding, ("memory_query", "memory_build_acb"))
        async with Client(server) as client:
            return [await client.call_tool(call.pop("tool", "memory_query"), call)
                    for call in calls]

    return anyio.run(main)


def test_http_and_mcp_take_every_query_option_with_the_clis_effect(served) -> None:
    plain = json.loads(_cli(served.db, "query", "kiwi", "--tenant-id", "t1", "--json").stdout)
    mcp = _mcp(served.db, Binding(tenant="t1"), *[{"query": "kiwi", **given}
                                                  for given, _ in OPTIONS])
    with served.client() as client:
        for (given, flags), tool in zip(OPTIONS, mcp, strict=True):
            by_cli = _cli(served.db, "query", "kiwi", "--tenant-id", "t1", *flags, "--json")
            assert by_cli.exit_code == 0, by_cli.stderr
            expected = _shape(json.loads(by_cli.stdout))
            assert expected != _shape(plain), flags  # the option changes the answer
            http = client.post("/api/v1/query", json={"query": "kiwi", "tenant_id": "t1",
                                                      **given})
            assert http.status_code == 200, http.text
            assert _shape(http.json()) == expected, given
            assert _shape(payload(tool)["result"]) == expected, given
    explained = json.loads(_cli(served.db, "query", "kiwi", "--tenant-id", "t1", "--explain",
                                "--json").stdout)
    assert explained["path"] == "all" and explained["legs"]["lexical"] >= 1


def test_all_tenants_is_an_operators_and_a_bound_caller_is_refused(served) -> None:
    every = json.loads(_cli(served.db, "query", "kiwi", "--all-tenants", "--json").stdout)
    assert {hit["tenant_id"] for hit in every} == {"t1", "t2"}
    request = {"query": "kiwi", "all_tenants": True}
    with served.client() as operator:
        answer = operator.post("/api/v1/query", json=request)
        assert answer.status_code == 200 and _shape(answer.json()) == _shape(every)
    with served.client(T1_TOKEN) as bound:
        refused = bound.post("/api/v1/query", json=request)
        assert refused.status_code == 403, refused.text
        assert "bound to tenant 't1'" in refused.json()["error"] and "kiwi farm" not in refused.text
        both = bound.post("/api/v1/query", json={**request, "tenant_id": "t2"})
        assert both.status_code == 422 and "exclude each other" in both.json()["error"]
    unbound, = _mcp(served.db, Binding(), dict(request))
    assert _shape(payload(unbound)["result"]) == _shape(every)
    tenant, = _mcp(served.db, Binding(tenant="t1"), dict(request))
    assert "bound to tenant 't1'" in error_text(tenant)


def test_an_empty_category_list_keeps_a_bound_allowlist(served) -> None:
    """`"categories": []` asks for no category in particular: a token bound to `tasks` still
    reads tasks only (it read every category before)."""
    with served.client(TASKS_TOKEN) as client:
        for request in ({"query": "kiwi"}, {"query": "kiwi", "categories": []}):
            answer = client.post("/api/v1/query", json=request)
            assert answer.status_code == 200, answer.text
            hits = answer.json()
            assert hits and {hit["category"] for hit in hits} == {"tasks"}, request


def test_old_spellings_are_read_on_the_wire_and_shown_nowhere(served) -> None:
    new = {"tenant_id": "t1", "user_id": "u1", "query": "kiwi", "budget_tokens": 300,
           "agent_id": "planner", "track": False}
    old = {"tenant_id": "t1", "user": "u1", "query_text": "kiwi", "max_tokens": 300,
           "agent": "planner", "track": False}
    with served.client() as client:
        bundles = [client.post("/api/v1/acb/build", json=body) for body in (new, old)]
        assert [b.status_code for b in bundles] == [200, 200], bundles[1].text
        assert bundles[0].json()["acb_id"] == bundles[1].json()["acb_id"]
        assert bundles[1].json()["budget_tokens"] == 300
        queries = [client.post("/api/v1/query", json={"query": "kiwi", "tenant_id": "t1", **a})
                   for a in ({"agent_id": "reader"}, {"agent": "reader"})]
        assert queries[0].json() and _shape(queries[0].json()) == _shape(queries[1].json())
        both = client.post("/api/v1/acb/build", json={**new, "max_tokens": 200})
        assert both.status_code == 422 and "max_tokens" in both.json()["error"]
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert {"query", "budget_tokens", "agent_id"} <= set(schemas["AcbRequest"]["properties"])
    assert not {"query_text", "max_tokens", "agent", "user"} & set(
        schemas["AcbRequest"]["properties"])
    assert "agent" not in schemas["QueryRequest"]["properties"]
    tool, = _mcp(served.db, Binding(tenant="t1", user_id="u1"),
                 {"tool": "memory_build_acb", "query_text": "kiwi", "max_tokens": 300})
    assert payload(tool)["result"]["budget_tokens"] == 300
    cli = _cli(served.db, "acb", "build", "--tenant-id", "t1", "--user-id", "u1",
               "--query-text", "kiwi", "--max-tokens", "300", "--no-track", "--json")
    assert cli.exit_code == 0 and json.loads(cli.stdout)["budget_tokens"] == 300


# (a bad option, the same as flags, the field the one-line error names)
BAD = [
    ({"legs": ["magic"]}, ["--legs", "lexical,magic"], "legs"),
    ({"sensitivity": ["secret"]}, ["--sensitivity", "secret"], "sensitivity"),
    ({"widen": "perhaps"}, None, "widen"),
    ({"explain": "loudly"}, None, "explain"),
]


def test_a_bad_option_is_a_one_line_4xx_tool_error_and_exit_2(served) -> None:
    tools = _mcp(served.db, Binding(), *[{"query": "kiwi", **given} for given, _, _ in BAD])
    with served.client() as client:
        for (given, flags, field), tool in zip(BAD, tools, strict=True):
            bad = client.post("/api/v1/query", json={"query": "kiwi", **given})
            error = bad.json()["error"]
            assert bad.status_code == 422 and field in error and "\n" not in error, bad.text
            assert field in error_text(tool) and "\n" not in error_text(tool), given
            if flags is not None:
                out = _cli(served.db, "query", "kiwi", *flags)
                assert out.exit_code == 2 and len(out.stderr.splitlines()) == 1, out.stderr
                assert out.stderr.startswith("memcli: error: "), out.stderr
