"""Every binding of a token (tenant, user, agent, app, categories) holds on every HTTP route and
every MCP tool, for reads and writes alike.

For each binding, rows are made inside it and just outside it (another tenant, user, app, or a
category the token or the agent's allowlist leaves out). Through the real HTTP app (and its
/mcp endpoint, as `memcli serve` mounts it), the bound token then: gets 200 for a row inside,
404 for a row outside (as for an id that does not exist, and the row is unchanged), 403 for a
request naming a scope outside its binding (in the body, query or headers), and never sees an
outside row in a listing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from memcli.config import bundled_text, load_settings
from memcli.service import api
from memcli.service.http.auth import load_auth
from memcli.service.http.fastapi_app import build_app
from tests.support.http_api import NO_SPARSE, OPERATOR, write_token_file

INSIDE = {"tenant_id": "t1", "user_id": "alice", "app_id": "a1", "category": "projects"}
# The categories a `categories=` token and the `planner` agent's allowlist both allow.
ALLOWED = ("projects", "decisions", "tasks")


@dataclass(frozen=True)
class Binding:
    name: str
    token_binding: str  # as in the token file
    outside: dict[str, str]  # the row just outside it: INSIDE with this changed
    header: tuple[str, str] | None  # a scope header naming another value
    field: tuple[str, str] | None  # a request field naming another value (key, value)


BINDINGS = (
    Binding("tenant", "tenant=t1", {"tenant_id": "t2"}, ("X-Memcli-Tenant", "t2"),
            ("tenant_id", "t2")),
    Binding("user", "tenant=t1 user=alice", {"user_id": "bob"}, ("X-Memcli-User", "bob"),
            ("user_id", "bob")),
    Binding("agent", "tenant=t1 agent=planner", {"category": "knowledge"},
            ("X-Memcli-Agent", "stylist"), ("agent_id", "stylist")),
    Binding("app", "tenant=t1 app=a1", {"app_id": "a2"}, ("X-Memcli-App", "a2"),
            ("app_id", "a2")),
    Binding("categories", f"tenant=t1 categories={','.join(ALLOWED)}",
            {"category": "knowledge"}, None, None),
)
TOKEN = "bound-token-0123456789abcdef"
OUT = "outx"  # the tag of every row outside the binding (in its text and ids)


@dataclass
class Rows:
    memory: int
    artifact: str
    decision: int | None  # None: a ledger row is always of its own category
    task: int | None


def _rows(svc: api.Service, where: dict[str, str], tag: str) -> Rows:
    """A memory, an artifact event, a decision and a task of scope `where`, made by the
    operator."""
    scope = {k: v for k, v in where.items() if k != "category"}
    op = api.Binding()
    memory = svc.run(api.remember, op, {**scope, "text": f"Quokka plan {tag}",
                                        "category": where["category"]})["id"]
    svc.run(api.record_events, op, {**scope, "kind": "artifact", "event_id": f"doc-{tag}",
                                    "session_id": f"s-{tag}", "category": where["category"],
                                    "text": f"design doc {tag}"})
    if where["category"] != INSIDE["category"]:  # decisions and tasks have their own
        return Rows(memory, f"doc-{tag}", None, None)
    decision = svc.run(api.record_decision, op, {**scope, "decision": f"Use {tag}"})["id"]
    task = svc.run(api.record_task, op, {**scope, "title": f"Ship {tag}"})["id"]
    return Rows(memory, f"doc-{tag}", decision, task)


@pytest.fixture(params=BINDINGS, ids=lambda b: b.name)
def bound(request, tmp_path, monkeypatch) -> Iterator[tuple[Binding, TestClient, Rows, Rows]]:
    binding = request.param
    settings = _settings(tmp_path, monkeypatch)
    svc = api.Service(settings)
    try:
        inside = _rows(svc, INSIDE, "in")
        outside = _rows(svc, {**INSIDE, **binding.outside}, OUT)
    finally:
        svc.close()
    with _client(tmp_path, settings, binding.token_binding) as client:
        yield binding, client, inside, outside


def _settings(tmp_path: Path, monkeypatch) -> Any:
    config = tmp_path / "config.yaml"
    config.write_text(NO_SPARSE, encoding="utf-8")
    categories = tmp_path / "categories.yaml"
    text = bundled_text("categories.yaml").replace(
        "allowlists:\n", f"allowlists:\n  planner: [{', '.join(ALLOWED)}]\n", 1)
    categories.write_text(text, encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    monkeypatch.setenv("MEMCLI_CATEGORIES", str(categories))
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    return load_settings(tmp_path / "memory.db")


@contextlib.contextmanager
def _client(tmp_path: Path, settings: Any, token_binding: str) -> Iterator[TestClient]:
    """The real HTTP app (with /mcp) over `settings`, as a client sending a token bound by
    `token_binding`."""
    tokens = write_token_file(tmp_path / "tokens", [OPERATOR, f"{TOKEN} {token_binding}"])
    auth = load_auth(host="127.0.0.1", port=0, token_file=tokens, no_token=False,
                     settings=settings)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(build_app(settings, auth), base_url="http://localhost",
                    headers=headers) as client:
        yield client


# -- one call per route and tool: (method, path, body or query) for a row --------------------
def _by_id(rows: Rows) -> dict[str, tuple[str, str, dict]]:
    """Every HTTP route acting on one row, for the rows `rows`."""
    calls = {
        "GET artifact": ("GET", f"/api/v1/artifacts/{rows.artifact}", {}),
        "GET history": ("GET", f"/api/v1/memories/{rows.memory}/history", {}),
        "DELETE memory": ("DELETE", f"/api/v1/memories/{rows.memory}", {}),
        "DELETE app memory": ("DELETE", f"/apps/a1/memories/{rows.memory}", {}),
    }
    if rows.decision is not None:
        calls["POST decision supersedes"] = ("POST", "/api/v1/decisions",
                                             {"decision": "Use more", "supersedes": rows.decision})
    if rows.task is not None:
        calls["POST task update"] = ("POST", "/api/v1/tasks",
                                     {"task_id": rows.task, "status": "done"})
    return calls


def _tools(rows: Rows) -> dict[str, tuple[str, dict]]:
    """Every MCP tool acting on one row."""
    calls = {
        "memory_get_artifact": ("memory_get_artifact", {"artifact_id": rows.artifact}),
        "memory_history": ("memory_history", {"memory_id": rows.memory}),
        "memory_forget": ("memory_forget", {"memory_id": rows.memory}),
        "memory_purge_app": ("memory_purge_app", {"app_id": "a1", "memory_id": rows.memory}),
    }
    if rows.decision is not None:
        calls["memory_record_decision"] = ("memory_record_decision",
                                           {"decision": "Use more", "supersedes": rows.decision})
    if rows.task is not None:
        calls["memory_update_task"] = ("memory_update_task", {"task_id": rows.task,
                                                              "status": "done"})
    return calls


def _http(client: TestClient, method: str, path: str, data: dict, **headers: str) -> int:
    if method == "POST":
        return client.post(path, json=data, headers=headers).status_code
    return client.request(method, path, params=data, headers=headers).status_code


def _tool(client: TestClient, name: str, arguments: dict) -> tuple[bool, str]:
    """(is_error, text) of one MCP tool call through /mcp."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}
    r = client.post("/mcp", json=body, headers={"Accept": "application/json, text/event-stream",
                                                "X-Memcli-Tools": "all"})
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    return bool(result.get("isError")), result["content"][0]["text"]


def _snapshot(db: Path) -> list:
    from tests.support.backend import rows

    return [rows(db, f"SELECT * FROM {t} ORDER BY 1") for t in
            ("memories", "decisions", "tasks", "history")]


def test_a_row_outside_the_binding_is_not_found_and_unchanged(bound, tmp_path) -> None:
    binding, client, inside, outside = bound
    leaks = []
    before = _snapshot(tmp_path / "memory.db")
    for route, (method, path, data) in _by_id(outside).items():
        status = _http(client, method, path, data)
        if status != 404:
            leaks.append(f"{route}: {status}")
    for tool, (name, arguments) in _tools(outside).items():
        is_error, text = _tool(client, name, arguments)
        if not (is_error and "no " in text):
            leaks.append(f"{tool}: {text[:80]}")
    assert leaks == [], f"{binding.name} binding: {leaks}"
    assert _snapshot(tmp_path / "memory.db") == before


def test_a_row_inside_the_binding_is_answered(bound) -> None:
    binding, client, inside, _outside = bound
    failed = []
    for route, (method, path, data) in _by_id(inside).items():
        if route.startswith("DELETE") or route.startswith("POST"):
            continue  # the writes are checked through MCP below (one write per row)
        status = _http(client, method, path, data)
        if status != 200:
            failed.append(f"{route}: {status}")
    for tool, (name, arguments) in _tools(inside).items():
        is_error, text = _tool(client, name, arguments)
        if is_error:
            failed.append(f"{tool}: {text[:80]}")
    assert failed == [], f"{binding.name} binding: {failed}"


# Every route, with a request naming a scope: (method, path, body or query params, where the
# scope goes: "body", "query", "filters").
NAMED = {
    "POST events": ("POST", "/api/v1/events", {"text": "x", "session_id": "s9"}, "body"),
    "POST acb/build": ("POST", "/api/v1/acb/build", {"query_text": "plan"}, "body"),
    "GET artifact": ("GET", "/api/v1/artifacts/doc-in", {}, "query"),
    "POST decision": ("POST", "/api/v1/decisions", {"decision": "Use x"}, "body"),
    "POST decision supersedes": ("POST", "/api/v1/decisions",
                                 {"decision": "Use x", "supersedes": 1}, "body"),
    "GET decisions": ("GET", "/api/v1/decisions/query", {}, "query"),
    "POST task": ("POST", "/api/v1/tasks", {"title": "x"}, "body"),
    "POST task update": ("POST", "/api/v1/tasks", {"task_id": 1, "status": "done"}, "body"),
    "POST query": ("POST", "/api/v1/query", {"query": "plan"}, "filters"),
    "GET history": ("GET", "/api/v1/memories/1/history", {}, "query"),
    "POST memory": ("POST", "/api/v1/memories", {"text": "x"}, "body"),
    "DELETE memory": ("DELETE", "/api/v1/memories/1", {}, "query"),
    "GET app memories": ("GET", "/apps/a1/memories", {}, "query"),
    "DELETE app memories": ("DELETE", "/apps/a1/memories", {}, "query"),
    "DELETE app memory": ("DELETE", "/apps/a1/memories/1", {}, "query"),
}
# The scope keys each route's request may name (its model's fields).
FIELDS = {
    "GET artifact": ("tenant_id",), "GET history": ("tenant_id",),
    "DELETE memory": ("tenant_id",), "GET decisions": ("tenant_id", "user_id", "app_id"),
    "GET app memories": ("tenant_id", "user_id"), "DELETE app memories": ("tenant_id", "user_id"),
    "DELETE app memory": ("tenant_id", "user_id"),
}
CATEGORY_FIELDS = {"POST events": "category", "POST memory": "category",
                   "POST acb/build": "categories", "POST query": "categories"}


def test_a_request_naming_a_scope_outside_the_binding_is_refused(bound) -> None:
    binding, client, _inside, _outside = bound
    accepted = []
    for route, (method, path, data, where) in NAMED.items():
        if binding.header is not None:  # the scope headers name it
            status = _http(client, method, path, data, **dict([binding.header]))
            if status != 403:
                accepted.append(f"{route} (header): {status}")
        if binding.field is not None:
            key, value = binding.field
            if key not in FIELDS.get(route, ("tenant_id", "user_id", "agent_id", "app_id")):
                continue
            if where == "filters" and key == "agent_id":  # the asking agent (agent_id filters)
                named = {**data, "agent": value}
            elif where == "filters":
                named = {**data, "filters": {key: value}}
            else:
                named = {**data, key: value}
            status = _http(client, method, path, named)
            if status != 403:
                accepted.append(f"{route} ({key}): {status}")
        elif route in CATEGORY_FIELDS:
            key = CATEGORY_FIELDS[route]
            named = {**data, key: "knowledge" if key == "category" else ["knowledge"]}
            status = _http(client, method, path, named)
            if status != 403:
                accepted.append(f"{route} ({key}): {status}")
    assert accepted == [], f"{binding.name} binding: {accepted}"


def test_a_listing_never_shows_a_row_outside_the_binding(bound) -> None:
    binding, client, _inside, _outside = bound
    shown = []
    listings = {
        "POST query": client.post("/api/v1/query", json={"query": "Quokka plan", "top_k": 50}),
        "POST acb/build": client.post("/api/v1/acb/build", json={"query_text": "Quokka plan",
                                                                  "track": False}),
        "GET decisions": client.get("/api/v1/decisions/query"),
        "GET app memories": client.get("/apps/a1/memories"),
    }
    for route, r in listings.items():
        assert r.status_code == 200, (route, r.text)
        if OUT in r.text:
            shown.append(route)
    tools = {"memory_query": {"query": "Quokka plan", "top_k": 50},
             "memory_build_acb": {"query": "Quokka plan"}, "memory_query_decisions": {},
             "memory_app_memories": {"app_id": "a1"}}
    for name, arguments in tools.items():
        is_error, text = _tool(client, name, arguments)
        assert not is_error, (name, text)
        if OUT in text:
            shown.append(name)
    assert shown == [], f"{binding.name} binding: {shown}"


def test_a_bundle_holds_only_the_bound_categories(tmp_path, monkeypatch) -> None:
    """Every section of a bundle, not only its retrieved evidence: a `categories=projects`
    token gets no tasks, decisions or conversation turns."""
    settings = _settings(tmp_path, monkeypatch)
    svc = api.Service(settings)
    try:
        op = api.Binding()
        svc.run(api.record_decision, op, {"tenant_id": "t1", "decision": f"Use {OUT} db"})
        svc.run(api.record_task, op, {"tenant_id": "t1", "title": f"Ship {OUT} db"})
        svc.run(api.record_events, op, {"tenant_id": "t1", "session_id": "s1",
                                        "text": f"we talked about {OUT} db"})
        svc.run(api.remember, op, {"tenant_id": "t1", "text": "The zebra db project",
                                   "category": "projects", "session_id": "s1"})
    finally:
        svc.close()
    with _client(tmp_path, settings, "tenant=t1 categories=projects") as client:
        r = client.post("/api/v1/acb/build", json={"query_text": f"{OUT} zebra db",
                                                   "session_id": "s1", "track": False})
        assert r.status_code == 200, r.text
        sections = r.json()["sections"]
        assert OUT not in json.dumps(sections)
        assert "zebra" in json.dumps(sections)  # the bound category's memory is there
        is_error, text = _tool(client, "memory_build_acb", {"query": f"{OUT} zebra db",
                                                            "session_id": "s1"})
        assert not is_error and OUT not in json.dumps(json.loads(text)["result"]["sections"])
