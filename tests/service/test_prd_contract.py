"""The Agent Memory System PRD's section 7 as a contract: its example requests, sent to a real
HTTP server (and to the same server's /mcp), answered with every key of its example responses,
each with the document's type.

The fixtures are the document's JSON, copied as is (ids like "evt_01J..." are the document's
placeholders). Two deliberate departures, checked rather than skipped: memcli's chunks are its
episode memories and decisions are ledger rows, both keyed by integers, so `chunk_ids` and
`decision_id` hold integers where the example shows strings (every command takes them back as
integers: `history`, `forget`, `supersedes`); and the example's `relevant_decisions` section is
`decision_ledger`, the name the same document's section 8.1 gives it.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.support.http_api import OPERATOR, running_api
from tests.support.mcp import http_client, payload

# -- the document's section 7.1 -----------------------------------------------------------------
RECORD_EVENT_REQUEST = {
    "tenant_id": "t1",
    "session_id": "s1",
    "channel": "private",
    "actor": {"type": "human", "id": "user"},
    "kind": "message",
    "sensitivity": "none",
    "tags": ["topic:onboarding", "repo:legacy"],
    "content": {
        "text": "what this project for?"
    },
    "refs": []
}
RECORD_EVENT_RESPONSE = {
    "event_id": "evt_01J...",
    "chunk_ids": ["chk_01J..."],
    "created_at": "2025-02-09T10:30:00Z"
}

# -- the document's section 7.2 -----------------------------------------------------------------
BUILD_ACB_REQUEST = {
    "tenant_id": "t1",
    "session_id": "s1",
    "agent_id": "agentA",
    "channel": "private",
    "intent": "repo_onboarding",
    "query_text": "what this project for?",
    "max_tokens": 65000
}
BUILD_ACB_RESPONSE = {
    "acb_id": "acb_01J...",
    "budget_tokens": 65000,
    "token_used_est": 18400,
    "sections": [
        {
            "name": "rules",
            "items": [
                {
                    "type": "text",
                    "text": "(identity/rules text...)",
                    "refs": ["view:rules.project"]
                }
            ],
            "token_est": 1200
        },
        {
            "name": "recent_window",
            "items": [
                {
                    "type": "text",
                    "text": "User: what this project for?",
                    "refs": ["evt_01J..."]
                }
            ],
            "token_est": 120
        },
        {
            "name": "retrieved_evidence",
            "items": [
                {
                    "type": "text",
                    "text": "README excerpt...",
                    "refs": ["chk_01J...", "evt_01J..."]
                }
            ],
            "token_est": 9000
        },
        {
            "name": "relevant_decisions",
            "items": [
                {
                    "type": "decision",
                    "decision_id": "dec_01J...",
                    "text": "...",
                    "refs": ["evt_..."]
                }
            ],
            "token_est": 800
        }
    ],
    "omissions": [
        {
            "reason": "truncated_tool_output",
            "candidates": ["evt_..."],
            "artifact_id": "art_..."
        }
    ],
    "provenance": {
        "intent": "repo_onboarding",
        "query_terms": ["project", "for"],
        "candidate_pool_size": 800,
        "filters": {
            "sensitivity_allowed": ["none", "low", "high"]
        },
        "scoring": {
            "alpha": 0.6,
            "beta": 0.3,
            "gamma": 0.1
        }
    }
}

INTEGER_IDS = {"chunk_ids", "decision_id"}  # memcli's integer-keyed rows (module docstring)
SECTION_NAMES = {"relevant_decisions": "decision_ledger"}  # the document's section 8.1 name


def conforms(doc, got, where: str = "response", key: str = "") -> None:
    """`got` has every key of the document's `doc`, recursively, with the document's types
    (a number where it shows one: JSON has no int/float distinction for a 0.6)."""
    if isinstance(doc, dict):
        assert isinstance(got, dict), f"{where}: {got!r} is not an object"
        for name, value in doc.items():
            assert name in got, f"{where}: no {name!r} (has {sorted(got)})"
            conforms(value, got[name], f"{where}.{name}", name)
    elif isinstance(doc, list):
        assert isinstance(got, list), f"{where}: {got!r} is not an array"
        for i, item in enumerate(got if doc else []):  # each against the document's element
            conforms(doc[0], item, f"{where}[{i}]", key)
    elif isinstance(doc, str) and key in INTEGER_IDS:
        assert isinstance(got, int) and not isinstance(got, bool), f"{where}: {got!r}"
    elif isinstance(doc, bool) or isinstance(doc, str):
        assert type(got) is type(doc), f"{where}: {got!r} is not a {type(doc).__name__}"
    elif isinstance(doc, int):
        assert isinstance(got, int) and not isinstance(got, bool), f"{where}: {got!r}"
    elif isinstance(doc, float):
        assert isinstance(got, int | float) and not isinstance(got, bool), f"{where}: {got!r}"


def check_receipt(got) -> None:
    conforms(RECORD_EVENT_RESPONSE, got, "record_event")
    assert got["chunk_ids"] and got["created_at"].endswith("Z")


def check_bundle(got) -> None:
    """Every key of the document's bundle: the top level and provenance as they are; each
    section, item and omission against the document's of its kind."""
    top = {k: v for k, v in BUILD_ACB_RESPONSE.items() if k not in ("sections", "omissions")}
    conforms(top, got, "build_acb")
    assert got["budget_tokens"] == 65000 and got["token_used_est"] == got["token_used"] > 0
    assert got["provenance"]["intent"] == "repo_onboarding"
    by_name = {s["name"]: s for s in got["sections"]}
    for doc_section in BUILD_ACB_RESPONSE["sections"]:
        name = SECTION_NAMES.get(doc_section["name"], doc_section["name"])
        section = by_name[name]
        assert section["items"], f"section {name} is empty"
        conforms(doc_section, section, f"build_acb.sections[{name}]")
    for section in got["sections"]:
        conforms({"name": "", "items": [], "token_est": 0}, section, "build_acb.sections")
        for item in section["items"]:
            doc_item = BUILD_ACB_RESPONSE["sections"][3]["items"][0] if (
                item["type"] == "decision") else BUILD_ACB_RESPONSE["sections"][0]["items"][0]
            conforms(doc_item, item, f"build_acb.sections[{section['name']}].items")
    (doc_omission,) = BUILD_ACB_RESPONSE["omissions"]
    tool = [o for o in got["omissions"] if o["reason"] == "truncated_tool_output"]
    assert tool, got["omissions"]
    for omission in tool:
        conforms(doc_omission, omission, "build_acb.omissions")
    for omission in got["omissions"]:
        conforms({"reason": "", "candidates": [""]}, omission, "build_acb.omissions")
    from memcli.service.schemas import Bundle

    Bundle.model_validate(got)  # the model /openapi.json describes the answer with


@pytest.fixture(autouse=True)
def agent_a(tmp_path, monkeypatch) -> None:
    """The document's example agent `agentA`, given the supervisor's allowlist (an agent no
    allowlist names is refused)."""
    import memcli

    shipped = (Path(memcli.__file__).parent / "categories.yaml").read_text(encoding="utf-8")
    anchor = "  planner: ["
    assert anchor in shipped
    path = tmp_path / "categories.yaml"
    path.write_text(shipped.replace(anchor, "  agentA: [\"*\"]\n" + anchor), encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CATEGORIES", str(path))


def _setting(c) -> None:
    """What the document's onboarding scenario (A1) leaves before the bundle: a README read
    too long to keep whole, and a decision."""
    readme = "\n".join(f"line {i}: this project is a billing service for invoices"
                       for i in range(3000))
    read = c.post("/api/v1/events", json={
        "tenant_id": "t1", "session_id": "s1", "actor": {"type": "tool", "id": "fs"},
        "kind": "tool_result", "content": {"tool": "fs.read_file", "path": "README.md",
                                           "excerpt_text": readme}})
    assert read.status_code == 200, read.text
    decided = c.post("/api/v1/decisions", json={
        "tenant_id": "t1", "decision": "Project purpose hypothesis v0.1: a billing service",
        "refs": [read.json()["event_id"]]})
    assert decided.status_code == 200, decided.text


def test_http_answers_in_the_documents_shapes(tmp_path, monkeypatch) -> None:
    with running_api(tmp_path, monkeypatch) as api, api.client(OPERATOR) as c:
        _setting(c)
        one = c.post("/api/v1/events", json=RECORD_EVENT_REQUEST)
        assert one.status_code == 200, one.text
        check_receipt(one.json())
        # A batch: a list of the same objects, one per event, in order.
        batch = c.post("/api/v1/events", json=[
            {**RECORD_EVENT_REQUEST, "content": {"text": "it bills invoices monthly"}},
            {**RECORD_EVENT_REQUEST, "content": {"text": "and exports them to S3"}}])
        assert batch.status_code == 200, batch.text
        assert len(batch.json()) == 2
        for receipt in batch.json():
            check_receipt(receipt)
        bundle = c.post("/api/v1/acb/build", json=BUILD_ACB_REQUEST)
        assert bundle.status_code == 200, bundle.text
        check_bundle(bundle.json())


def test_mcp_tools_answer_in_the_documents_shapes(tmp_path, monkeypatch) -> None:
    """memory.record_event and memory.build_acb: the same shapes, in the tool result's
    `result`."""
    async def main(url: str) -> None:
        headers = {"Authorization": f"Bearer {OPERATOR}", "X-Memcli-Tenant": "t1"}
        async with http_client(f"{url}/mcp", headers) as client:
            recorded = payload(await client.call_tool("memory_record_event", {
                "text": RECORD_EVENT_REQUEST["content"]["text"], "session_id": "s1"}))
            check_receipt(recorded["result"])
            built = payload(await client.call_tool("memory_build_acb", {
                "query": BUILD_ACB_REQUEST["query_text"], "intent": "repo_onboarding",
                "session_id": "s1", "max_tokens": 65000}))
            check_bundle(built["result"])

    with running_api(tmp_path, monkeypatch) as api:
        with api.client(OPERATOR) as c:
            _setting(c)
        anyio.run(main, api.url)


def test_openapi_describes_the_answers(tmp_path, monkeypatch) -> None:
    with running_api(tmp_path, monkeypatch) as api, api.client(None) as c:
        doc = c.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    events = doc["paths"]["/api/v1/events"]["post"]["responses"]["200"]
    # One receipt, or a list of them (a union: an object is never an array).
    one, many = events["content"]["application/json"]["schema"]["anyOf"]
    assert one["$ref"] == many["items"]["$ref"] == "#/components/schemas/EventReceipt"
    assert set(RECORD_EVENT_RESPONSE) <= set(schemas["EventReceipt"]["properties"])
    acb = doc["paths"]["/api/v1/acb/build"]["post"]["responses"]["200"]
    assert acb["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/Bundle"
    assert set(BUILD_ACB_RESPONSE) <= set(schemas["Bundle"]["properties"])
    assert {"name", "items", "token_est"} <= set(schemas["BundleSection"]["properties"])
    assert {"reason", "candidates", "artifact_id"} <= set(schemas["Omission"]["properties"])
    assert set(BUILD_ACB_RESPONSE["provenance"]) <= set(schemas["Provenance"]["properties"])
    assert set(schemas["Scoring"]["properties"]) == {"alpha", "beta", "gamma"}
