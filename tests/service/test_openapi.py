"""/openapi.json documents what every route returns, and what the routes return matches it.

The document is FastAPI's, generated from the routes' request and answer models; these tests
read it as a client does (over HTTP, from a real server) and validate real answers against the
schemas it publishes, with a JSON Schema validator rather than memcli's own models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from starlette.requests import Request
from starlette.responses import Response

from memcli import Memory
from memcli.derived import writer as derive
from tests.retrieval.test_acb_decisions import QUERY, on_day, supersession
from tests.support.http_api import NO_SPARSE, T1_TOKEN, running_api
from tests.support.records import turns

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server(tmp_path, monkeypatch):
    with running_api(tmp_path, monkeypatch) as api:
        yield api


def _schema(doc: dict, path: str, method: str, status: int = 200) -> dict:
    """The published JSON schema of a route's answer (`status`), with the document's
    components beside it so its references resolve."""
    answer = doc["paths"][path][method]["responses"][str(status)]
    schema = answer["content"]["application/json"]["schema"]
    return {**schema, "components": doc["components"]}


def test_every_route_publishes_a_schema_for_what_it_returns(server) -> None:
    with server.client(None) as c:
        doc = c.get("/openapi.json").json()
    operations = [(path, method, op) for path, ops in doc["paths"].items()
                  for method, op in ops.items()]
    assert len(operations) == 14  # 13 API routes and /healthz
    for path, method, op in operations:
        schema = _schema(doc, path, method)
        assert {k: v for k, v in schema.items() if k != "components"}, (path, method)
        Draft202012Validator.check_schema(schema)
        if path == "/healthz":
            continue
        # Refusals are documented with the error body they carry, FastAPI's own 422 replaced.
        for status in (400, 401, 403, 404, 413, 422, 503, 507):
            assert str(status) in op["responses"], (path, method, status)
        error = _schema(doc, path, method, 401)
        assert error["$ref"] == "#/components/schemas/ErrorBody"
        assert op["security"] == [{"bearer": []}]
        if method == "post":
            assert op["requestBody"]["content"]["application/json"]["schema"], path
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    assert set(doc["components"]["schemas"]["ErrorBody"]["required"]) == {"error", "exit_code"}


def test_real_answers_validate_against_the_published_schemas(server) -> None:
    with server.client(None) as c:
        doc = c.get("/openapi.json").json()
        health = c.get("/healthz")
        assert c.head("/healthz").status_code == 200  # a probe asking for headers only

    def check(response, path: str, method: str) -> None:
        assert response.status_code in (200, 422), response.text
        errors = sorted(Draft202012Validator(_schema(doc, path, method, response.status_code))
                        .iter_errors(response.json()), key=str)
        assert not errors, (path, method, [e.message for e in errors[:3]])

    check(health, "/healthz", "get")
    with server.client(T1_TOKEN) as c:
        event = {"session_id": "s1", "user_id": "u1",
                 "content": {"text": "the staging database listens on port 5433"}}
        check(c.post("/api/v1/events", json=event), "/api/v1/events", "post")
        rejected = c.post("/api/v1/events", json=[event, {"kind": "nonsense"}])
        assert rejected.status_code == 422
        check(rejected, "/api/v1/events", "post")
        hits = c.post("/api/v1/query", json={"query": "staging database port"})
        assert hits.json(), hits.text
        check(hits, "/api/v1/query", "post")
        check(c.post("/api/v1/query", json={"query": "staging", "return": "bullets"}),
              "/api/v1/query", "post")
        memory_id = hits.json()[0]["id"]
        check(c.get(f"/api/v1/memories/{memory_id}/history"),
              "/api/v1/memories/{memory_id}/history", "get")
        check(c.post("/api/v1/acb/build", json={"query_text": "staging port"}),
              "/api/v1/acb/build", "post")
        decision = c.post("/api/v1/decisions", json={"decision": "Use SQLite"})
        check(decision, "/api/v1/decisions", "post")
        check(c.get("/api/v1/decisions/query"), "/api/v1/decisions/query", "get")
        check(c.post("/api/v1/tasks", json={"title": "write the contract test"}),
              "/api/v1/tasks", "post")
        fact = c.post("/api/v1/memories", json={"text": "Priya prefers green tea",
                                                "app_id": "a1"})
        check(fact, "/api/v1/memories", "post")
        check(c.get("/apps/a1/memories"), "/apps/{app_id}/memories", "get")
        check(c.delete(f"/api/v1/memories/{fact.json()['id']}"),
              "/api/v1/memories/{memory_id}", "delete")
        check(c.delete("/apps/a1/memories"), "/apps/{app_id}/memories", "delete")
        # A refusal carries the documented error body.
        refused = c.post("/api/v1/query", json={"query": ""})
        assert refused.status_code == 422
        errors = list(Draft202012Validator(_schema(doc, "/api/v1/query", "post", 422))
                      .iter_errors(refused.json()))
        assert not errors, refused.text


def test_a_bundle_s_marked_evidence_is_documented_field_by_field(tmp_path, monkeypatch) -> None:
    """A3 and A4 over HTTP: a bundle holding a superseded decision's evidence
    (`superseded_by`), the decision's folded turn and summary (`duplicates`) and a drifted
    summary (`conflicts_with`) validates against the published schema, and every field of
    every item is one the published BundleItem declares: items allow more fields than they
    list, so validation alone would pass an undocumented one."""
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    config = tmp_path / "config.yaml"
    config.write_text(NO_SPARSE, encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    with Memory.configured(tmp_path / "memory.db") as memory:  # the file the server opens
        supersession(memory)
        drifted_summary(memory)
    with running_api(tmp_path, monkeypatch) as api, api.client() as c:
        doc = c.get("/openapi.json").json()
        bundles = [
            c.post("/api/v1/acb/build", json={"user_id": "u1", "session_id": session,
                                              "query_text": text, "track": False})
            for session, text in (("s3", QUERY), ("d2", "launch date confirmed launch"))
        ]
    schema = _schema(doc, "/api/v1/acb/build", "post")
    declared = set(doc["components"]["schemas"]["BundleItem"]["properties"])
    seen: set[str] = set()
    for bundle in bundles:
        assert bundle.status_code == 200, bundle.text
        errors = list(Draft202012Validator(schema).iter_errors(bundle.json()))
        assert not errors, [e.message for e in errors[:3]]
        for section in bundle.json()["sections"]:
            for item in section["items"]:
                assert set(item) <= declared, (section["name"], sorted(set(item) - declared))
                seen |= set(item)
    assert {"superseded_by", "duplicates", "conflicts_with", "score"} <= seen


def drifted_summary(memory) -> None:
    """Session d1 settles the launch on 12 May; a model's summary of it says 20 May; d2 asks."""
    memory.ingest(turns("d1", ["The launch moves to 12 May.", "Confirmed: launch on 12 May."]))
    memory.ingest(on_day(turns("d2", ["What did we settle?"]), 2))
    episodes = [r["id"] for r in memory.db.query(
        "SELECT id FROM memories WHERE session_id = 'd1' AND kind = 'episode' ORDER BY id")]
    with memory.db.transaction():
        derive.write_memory(
            memory, content="The team confirmed the launch date: the launch is on 20 May.",
            kind="summary", category="event", source_ids=episodes, user_id="u1",
            session_id="d1", attributes={"method": "llm"})


def test_commands_that_do_not_serve_do_not_import_the_web_framework(tmp_path) -> None:
    code = ("import sys\nfrom memcli.cli.entry import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('fastapi', 'starlette', 'uvicorn') if m in sys.modules),"
            " file=sys.stderr)")
    run = tmp_path / "run"  # a runtime folder of its own: no daemon answers there
    run.mkdir(mode=0o700)
    env = {**os.environ, "MEMCLI_DB": str(tmp_path / "m.db"), "MEMCLI_EMBEDDER": "hash",
           "XDG_RUNTIME_DIR": str(run)}
    for args in (["--help"], ["stats"]):
        done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.stderr.strip().splitlines()[-1] == "[]", (args, done.stderr)


@pytest.mark.parametrize(("method", "path", "body", "message"), [
    ("GET", "/api/v1/decisions/query?limit=0", None, "bad decisions query: limit: "),
    ("GET", "/api/v1/decisions/query?colour=red", None, "bad decisions query: colour: "),
    ("GET", "/api/v1/memories/0/history", None, "bad history request: memory_id: "),
    ("DELETE", "/apps/a1/memories/3?limit=5", None, "bad app memories request: limit: "),
    ("POST", "/api/v1/decisions", {"decision": ""}, "bad decision: decision: "),
    ("POST", "/api/v1/tasks", {"title": "t", "status": "later"}, "bad task: status: "),
    ("POST", "/api/v1/acb/build", {"max_tokens": "lots"}, "bad acb request: max_tokens: "),
    ("POST", "/api/v1/query", {}, "bad query request: query: Field required (see `memcli"),
])
def test_validation_errors_are_the_clis_one_line(server, method, path, body, message) -> None:
    with server.client() as c:
        r = c.request(method, path, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["exit_code"] == 2 and set(r.json()) == {"error", "exit_code"}
    assert r.json()["error"].startswith(message) and "\n" not in r.json()["error"]


def test_an_answer_its_model_refuses_is_never_sent() -> None:
    """The route class checks every answer against the route's published model: an operation
    answering another shape is a 500 naming a bug, not a document that lies."""
    from fastapi import APIRouter, FastAPI
    from starlette.testclient import TestClient

    from memcli.service.http.api_route import ApiRoute, Call, operation
    from memcli.service.http.auth import LOOPBACK_NAMES, Auth
    from memcli.service.schemas import Health

    class Service:  # runs the operation as it is, without a database
        def run(self, op, scope, request):
            return op(None, scope, request)

    router = APIRouter(route_class=ApiRoute)

    @router.get("/fine", response_model=Health)
    @operation("request")
    def fine(request: Request) -> Response:
        call: Call = request.state.memcli_call
        return call.run(lambda _ctx, _scope, _req: {"status": "ok", "version": "1"})

    @router.get("/wrong", response_model=Health)
    @operation("request")
    def wrong(request: Request) -> Response:
        call: Call = request.state.memcli_call
        return call.run(lambda _ctx, _scope, _req: {"status": "ok", "verison": "1"})

    app = FastAPI()
    app.include_router(router)
    app.state.auth = Auth(tokens=(), allowed_hosts=LOOPBACK_NAMES)
    app.state.service = Service()
    with TestClient(app, base_url="http://localhost") as c:
        assert c.get("/fine").json() == {"status": "ok", "version": "1"}
        refused = c.get("/wrong")
    assert refused.status_code == 500
    assert "a bug in memcli" in refused.json()["error"] and "verison" not in refused.text


# Every route, asked once in a fresh process with every warning recorded (as a test run and a
# server's log see them: pytest resets the warning filters for each test).
_FIRST_REQUESTS = r"""
import json, sys, warnings
from starlette.testclient import TestClient
from memcli.config import load_settings
from memcli.service.http.auth import load_auth
from memcli.service.http.fastapi_app import build_app

settings = load_settings(sys.argv[1])
auth = load_auth(host="127.0.0.1", port=0, token_file=None, no_token=True, settings=settings)
with warnings.catch_warnings(record=True) as caught:
    warnings.resetwarnings()
    warnings.simplefilter("always")
    with TestClient(build_app(settings, auth), base_url="http://127.0.0.1") as client:
        doc = client.get("/openapi.json").json()
        for path, ops in doc["paths"].items():
            url = path.replace("{memory_id}", "1").replace("{app_id}", "a1") \
                      .replace("{artifact_id}", "x")
            for method in ops:
                body = {} if method == "post" else None
                assert client.request(method, url, json=body).status_code < 500, url
print(json.dumps([f"{w.category.__name__}: {w.message}" for w in caught
                  if issubclass(w.category, UserWarning)]))
"""


def test_no_route_warns_on_its_first_request(tmp_path) -> None:
    """Before, pydantic warned once per route and process that FastAPI's body alias has no
    effect (103 lines in a test run, one per route in `memcli serve`'s log)."""
    env = {**os.environ, "MEMCLI_EMBEDDER": "hash", "XDG_RUNTIME_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _FIRST_REQUESTS, str(tmp_path / "m.db")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
