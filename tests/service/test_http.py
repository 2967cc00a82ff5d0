"""The HTTP API through a real uvicorn server on 127.0.0.1 and a real client (httpx).

Every route, validation errors, bearer tokens (required, tenant-bound), DNS-rebinding and
cross-site refusals, the OpenAPI document, and the auth decision for hosts off loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from memcli.errors import UsageError
from memcli.service.http.auth import is_loopback, load_auth
from memcli.service.http.routes import router
from tests.support.backend import write_lock_held
from tests.support.http_api import OPERATOR, T1_TOKEN, T2_TOKEN, running_api, write_token_file

# Every API route as (method, path template), from the routes the app serves.
ROUTES = [(method, route.path) for route in router.routes for method in sorted(route.methods)]


@pytest.fixture
def server(tmp_path, monkeypatch):
    with running_api(tmp_path, monkeypatch) as api:
        yield api


def _event(text: str, **extra) -> dict:
    return {"session_id": "s1", "user_id": "u1", "content": {"text": text}, **extra}


def _path(template: str) -> str:
    """A concrete path for a route's template."""
    return (template.replace("{memory_id:int}", "1").replace("{artifact_id}", "art_x")
            .replace("{app_id}", "a1"))


# -- every route ------------------------------------------------------------------------------
def test_events_record_dedupe_and_per_record_errors(server) -> None:
    with server.client() as c:
        r = c.post("/api/v1/events", json=_event("we deploy blue-green on Fridays",
                                                 event_id="e1", tenant_id="t1"))
        assert r.status_code == 200, r.text
        # One event, one object: the document's receipt beside the record's ingest report.
        first = r.json()
        assert first["event_id"] == "e1" and first["created"] == ["e1"]
        assert first["chunk_ids"] == first["memory_ids"] and len(first["chunk_ids"]) == 1
        assert first["created_at"].endswith("Z") and first["rejected"] == []
        # A batch, a list: a repeat names the stored event, with its chunks and time.
        again = c.post("/api/v1/events", json=[_event("we deploy blue-green on Fridays",
                                                      event_id="e1", tenant_id="t1")])
        (repeat,) = again.json()
        assert repeat["skipped"] == ["e1"] and repeat["created"] == []
        assert (repeat["event_id"], repeat["chunk_ids"], repeat["created_at"]) == (
            "e1", first["chunk_ids"], first["created_at"])
        mixed = c.post("/api/v1/events", json=[_event("fine", tenant_id="t1"),
                                               {"kind": "nonsense", "text": "x"}])
        assert mixed.status_code == 422
        fine, bad = mixed.json()
        assert fine["created"] == [fine["event_id"]] and fine["chunk_ids"]
        assert bad["event_id"] is None and bad["chunk_ids"] == [] and bad["created_at"] is None
        assert [p["line"] for p in bad["rejected"]] == [2]


def test_a_ledger_event_receipt_names_the_row_it_wrote(server) -> None:
    """A `decision` or `task_update` event's receipt names its ledger row (`ledger`), as the
    batch report of `memcli ingest` does; an event that writes no row names none."""
    with server.client(T1_TOKEN) as c:
        decision = {
            "kind": "decision",
            "event_id": "d-1",
            "content": {"decision": "Use SQLite", "rationale": ["one file"]},
        }
        task = {"kind": "task_update", "event_id": "t-1", "content": {"title": "ship 0.2"}}
        made, planned, said = c.post(
            "/api/v1/events", json=[decision, task, _event("nothing for the ledger")]
        ).json()
        (row,) = c.get("/api/v1/decisions/query").json()
        assert made["ledger"] == [{"event_id": "d-1", "decision_id": row["id"]}]
        task_id = planned["ledger"][0]["task_id"]
        assert planned["ledger"] == [{"event_id": "t-1", "task_id": task_id}]
        done = c.post("/api/v1/tasks", json={"task_id": task_id, "status": "done"}).json()
        assert done["title"] == "ship 0.2"  # the row the receipt names
        assert said["ledger"] == []
        again = c.post("/api/v1/events", json=decision).json()
        assert again["skipped"] == ["d-1"] and again["ledger"] == []  # nothing written twice


def test_acb_build_query_and_history(server) -> None:
    with server.client(T1_TOKEN) as c:
        c.post("/api/v1/events", json=_event("the staging database listens on port 5433"))
        hits = c.post("/api/v1/query", json={"query": "staging database port", "top_k": 3})
        assert hits.status_code == 200, hits.text
        assert hits.json()[0]["text"].startswith("the staging database")
        assert hits.json()[0]["tenant_id"] == "t1"
        bullets = c.post("/api/v1/query", json={"query": "staging port", "return": "bullets"})
        assert set(bullets.json()[0]) == {"id", "category", "text", "scope"}
        bundle = c.post("/api/v1/acb/build", json={"query_text": "staging port",
                                                   "session_id": "s1", "user_id": "u1"})
        assert bundle.status_code == 200, bundle.text
        assert "5433" in json.dumps(bundle.json()["sections"])
        memory_id = hits.json()[0]["id"]
        history = c.get(f"/api/v1/memories/{memory_id}/history")
        assert history.status_code == 200 and history.json()[0]["op"] == "ADD"


def test_artifacts_decisions_tasks_remember_forget(server) -> None:
    with server.client(T1_TOKEN) as c:
        out = c.post("/api/v1/events", json=_event("y" * 70_000, kind="tool_result")).json()
        art = c.get(f"/api/v1/artifacts/{out['artifacts'][0]}")
        assert art.status_code == 200 and art.json()["bytes"] >= 70_000
        assert c.get("/api/v1/artifacts/art_nope").status_code == 404
        d = c.post("/api/v1/decisions", json={"decision": "Use SQLite", "rationale": ["one file"]})
        assert d.status_code == 200 and d.json()["tenant_id"] == "t1"
        listed = c.get("/api/v1/decisions/query", params={"status": "all", "limit": "5"})
        assert [x["id"] for x in listed.json()] == [d.json()["id"]]
        task = c.post("/api/v1/tasks", json={"title": "write the HTTP tests"}).json()
        done = c.post("/api/v1/tasks", json={"task_id": task["id"], "status": "done"})
        assert done.json()["status"] == "done"
        fact = c.post("/api/v1/memories", json={"text": "Priya prefers green tea"})
        assert fact.status_code == 200 and fact.json()["status"] == "created"
        gone = c.delete(f"/api/v1/memories/{fact.json()['id']}")
        assert gone.status_code == 200 and gone.json()["state"] == "soft_deleted"


def test_app_memories_list_delete_one_and_all(server) -> None:
    with server.client(T1_TOKEN) as c:
        ids = [c.post("/api/v1/memories", json={"text": t, "app_id": "a1"}).json()["id"]
               for t in ("The billing export runs nightly", "Priya owns the release list")]
        c.post("/api/v1/memories", json={"text": "Weather widget uses Celsius", "app_id": "a2"})
        listed = c.get("/apps/a1/memories").json()
        assert sorted(m["id"] for m in listed["memories"]) == sorted(ids)
        assert c.delete(f"/apps/a2/memories/{ids[0]}").status_code == 404  # not a2's
        one = c.delete(f"/apps/a1/memories/{ids[0]}")
        assert one.status_code == 200 and one.json()["memories"] == 1
        assert c.delete("/apps/a1/memories").json()["memories"] == 1
        assert c.get("/apps/a1/memories").json()["memories"] == []
        assert len(c.get("/apps/a2/memories").json()["memories"]) == 1


def test_healthz_and_unknown_routes(server) -> None:
    with server.client(None) as c:
        assert c.get("/healthz").json()["status"] == "ok"
        missing = c.get("/api/v1/nothing")
        assert missing.status_code == 404 and "error" in missing.json()
        assert c.get("/api/v1/events").status_code == 405


# -- validation --------------------------------------------------------------------------------
@pytest.mark.parametrize(("body", "headers", "status", "message"), [
    (b"{not json", {"Content-Type": "application/json"}, 400, "not JSON"),
    (b'{"query": "x"}', {"Content-Type": "text/plain"}, 400, "must be JSON"),
    (b"[1, 2]", {"Content-Type": "application/json"}, 400, "one JSON object"),
    (b'{"query": ""}', {"Content-Type": "application/json"}, 422, "bad query request: query"),
    (b'{"query": "x", "filters": {"colour": "red"}}', {"Content-Type": "application/json"},
     422, "filters.colour"),
    (b'{"query": "x", "top_k": "many"}', {"Content-Type": "application/json"}, 422, "top_k"),
    (b'{"query": "x", "as_of": "soon"}', {"Content-Type": "application/json"}, 422,
     "as_of: not an ISO 8601 time"),
])
def test_bad_bodies_are_one_line_errors(server, body, headers, status, message) -> None:
    with server.client() as c:
        r = c.post("/api/v1/query", content=body, headers=headers)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert message in error and "\n" not in error and "Traceback" not in r.text


def test_bad_query_parameters_and_models(server) -> None:
    with server.client() as c:
        assert c.get("/api/v1/decisions/query", params={"limit": "0"}).status_code == 422
        assert c.get("/api/v1/decisions/query", params={"colour": "red"}).status_code == 422
        bad = c.post("/api/v1/acb/build", json={"max_tokens": "lots"})
        assert bad.status_code == 422 and bad.json()["error"].startswith("bad acb request")
        assert c.post("/api/v1/tasks", json={"status": "done"}).status_code == 422
        # A lone surrogate (\ud800 in the JSON text) is not text SQLite or a model can take.
        lone = c.post("/api/v1/acb/build", content=b'{"query_text": "a\\ud800b"}',
                      headers={"Content-Type": "application/json"})
        assert lone.status_code == 422, lone.text
        empty = c.get("/api/v1/decisions/query", headers={"X-Memcli-Tenant": ""})
        assert empty.status_code == 400 and "empty tenant" in empty.json()["error"]


def test_busy_database_is_503_with_retry_after(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MEMCLI_BUSY_TIMEOUT", "0.2")
    with running_api(tmp_path, monkeypatch) as api, api.client() as c:
        assert c.post("/api/v1/events", json=_event("first")).status_code == 200
        with write_lock_held(api.db):
            r = c.post("/api/v1/events", json=_event("second"))
        assert r.status_code == 503, r.text
        assert r.headers["Retry-After"] == "1" and r.json()["exit_code"] == 75


# -- tokens and tenants ------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "template"), ROUTES, ids=lambda r: str(r))
def test_every_api_route_needs_the_token(server, method, template) -> None:
    for token in (None, "wrong-token-0123456789abcdef"):
        with server.client(token) as c:
            r = c.request(method, _path(template), json={} if method == "POST" else None)
        assert r.status_code == 401, (token, r.text)
        assert r.headers["WWW-Authenticate"] == "Bearer"


def test_a_tenant_bound_token_never_reads_another_tenant(server) -> None:
    with server.client(T1_TOKEN) as one, server.client(T2_TOKEN) as two:
        one.post("/api/v1/events", json=_event("tenant one launch codeword is walrus"))
        one.post("/api/v1/decisions", json={"decision": "tenant one picks walrus"})
        two.post("/api/v1/events", json=_event("tenant two launch codeword is heron"))
        hits = two.post("/api/v1/query", json={"query": "launch codeword"}).json()
        assert hits and {h["tenant_id"] for h in hits} == {"t2"}
        assert "walrus" not in json.dumps(hits)
        # Naming the other tenant, in a header or in the body, is refused, never answered.
        sneaky = server.client(T2_TOKEN, **{"X-Memcli-Tenant": "t1"})
        with sneaky:
            r = sneaky.post("/api/v1/query", json={"query": "launch codeword"})
        assert r.status_code == 403 and "walrus" not in r.text
        r = two.post("/api/v1/query", json={"query": "codeword",
                                            "filters": {"tenant_id": "t1"}})
        assert r.status_code == 403
        assert two.get("/api/v1/decisions/query", params={"tenant_id": "t1"}).status_code == 403
        assert two.get("/api/v1/decisions/query").json() == []
        r = two.post("/api/v1/events", json=_event("planted", tenant_id="t1"))
        assert r.status_code == 403
        bundle = two.post("/api/v1/acb/build", json={"query_text": "launch codeword"})
        assert bundle.status_code == 200 and "walrus" not in bundle.text
    # The operator token (unbound) may narrow itself to a tenant with the header.
    with server.client(OPERATOR, **{"X-Memcli-Tenant": "t1"}) as op:
        assert "walrus" in op.post("/api/v1/query", json={"query": "launch codeword"}).text


def test_host_header_rebinding_and_cross_site_origins_are_refused(server) -> None:
    with server.client() as c:
        rebound = c.get("/api/v1/decisions/query", headers={"Host": "evil.example"})
        assert rebound.status_code == 400
        ok = c.get("/api/v1/decisions/query", headers={"Host": "localhost"})
        assert ok.status_code == 200
        cross = c.get("/api/v1/decisions/query", headers={"Origin": "https://evil.example"})
        assert cross.status_code == 403
        same = c.get("/api/v1/decisions/query", headers={"Origin": "http://127.0.0.1"})
        assert same.status_code == 200


def test_no_token_on_loopback_only_with_the_flag(tmp_path, monkeypatch) -> None:
    with running_api(tmp_path, monkeypatch, token_file=None, no_token=True) as api:
        with api.client(None) as c:
            assert c.get("/api/v1/decisions/query").status_code == 200


def test_the_auth_decision_off_loopback(tmp_path) -> None:
    from memcli.config import load_settings

    settings = load_settings(tmp_path / "m.db")
    for host in ("0.0.0.0", "192.168.1.20", "::"):
        assert not is_loopback(host)
        with pytest.raises(UsageError, match="without a token"):
            load_auth(host=host, port=8080, token_file=None, no_token=True, settings=settings)
        # No token file: one is generated (0600) and required.
        auth = load_auth(host=host, port=8080, token_file=None, no_token=False,
                         settings=settings)
        assert auth.required and auth.token_file is not None
        assert auth.token_file.stat().st_mode & 0o077 == 0
        assert auth.check(None) is None and auth.check("Bearer nope") is None
        secret = auth.token_file.read_text().strip()
        assert auth.check(f"Bearer {secret}") is not None
    assert "evil.example" not in load_auth(host="192.168.1.20", port=1, token_file=None,
                                           no_token=False, settings=settings).allowed_hosts
    for host in ("127.0.0.1", "::1", "localhost"):
        assert is_loopback(host)
        assert load_auth(host=host, port=1, token_file=None, no_token=True,
                         settings=settings).required is False


def test_token_files_are_checked(tmp_path) -> None:
    from memcli.config import load_settings

    settings = load_settings(tmp_path / "m.db")

    def load(path):
        return load_auth(host="127.0.0.1", port=1, token_file=path, no_token=False,
                         settings=settings)

    readable = write_token_file(tmp_path / "open", [OPERATOR], mode=0o644)
    with pytest.raises(UsageError, match="readable by others"):
        load(readable)
    with pytest.raises(UsageError, match="at least 16"):
        load(write_token_file(tmp_path / "short", ["abc"]))
    with pytest.raises(UsageError, match="bad binding"):
        load(write_token_file(tmp_path / "bad", [f"{OPERATOR} colour=red"]))
    with pytest.raises(UsageError, match="no token"):
        load(write_token_file(tmp_path / "empty", ["# nothing"]))
    with pytest.raises(UsageError, match="exclude"):
        load_auth(host="127.0.0.1", port=1, token_file=readable, no_token=True,
                  settings=settings)
    auth = load(write_token_file(tmp_path / "ok", [
        OPERATOR, f"{T1_TOKEN} tenant=t1 agent=planner categories=tasks,notes"]))
    bound = auth.check(f"Bearer {T1_TOKEN}")
    assert bound is not None and bound.tenant == "t1" and bound.categories == ("tasks", "notes")
    assert auth.check(f"Bearer {OPERATOR}").tenant is None
    assert auth.check(f"Basic {OPERATOR}") is None


# -- OpenAPI -----------------------------------------------------------------------------------
def test_openapi_lists_every_route_with_its_models(server) -> None:
    with server.client(None) as c:
        doc = c.get("/openapi.json").json()
    served = {(method.lower(), path.replace(":int}", "}")) for method, path in ROUTES}
    listed = {(m, p) for p, ops in doc["paths"].items() for m in ops if p != "/healthz"}
    assert listed == served and len(served) == 13
    body = doc["paths"]["/api/v1/query"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["$ref"] == "#/components/schemas/QueryRequest"
    assert "filters" in doc["components"]["schemas"]["QueryRequest"]["properties"]
    assert "query" in doc["components"]["schemas"]["AcbRequest"]["properties"]
    assert "EventIn" in doc["components"]["schemas"]
    params = {p["name"] for p in doc["paths"]["/api/v1/decisions/query"]["get"]["parameters"]}
    assert {"status", "limit", "tenant_id"} <= params


def test_the_agent_header_applies_its_allowlist_server_side(server) -> None:
    with server.client() as c:
        c.post("/api/v1/events", json=_event("the quarterly offsite is in Lisbon"))
        assert c.post("/api/v1/query", json={"query": "offsite Lisbon"}).json()
    # The planner's allowlist (goals, tasks, projects, decisions) has no `event`: the header
    # binds the agent, so its queries never return an event, and asking for one is refused.
    with server.client(OPERATOR, **{"X-Memcli-Agent": "planner"}) as planner:
        assert planner.post("/api/v1/query", json={"query": "offsite Lisbon"}).json() == []
        asked = planner.post("/api/v1/query", json={"query": "offsite",
                                                    "categories": ["event"]})
        assert asked.status_code == 403
        other = planner.post("/api/v1/query", json={"query": "offsite", "agent": "supervisor"})
        assert other.status_code == 403


def test_the_unix_socket_needs_no_token_but_keeps_a_tokens_binding(tmp_path, monkeypatch
                                                                    ) -> None:
    # The daemon's 0600 Unix socket: only its user can connect (as to the CLI socket).
    with running_api(tmp_path, monkeypatch, uds=tmp_path / "http.sock") as api:
        with api.client(None) as c:
            assert c.post("/api/v1/events", json=_event("socket one", tenant_id="t1")
                          ).status_code == 200
        with api.client("wrong-token-0123456789abcdef") as c:
            assert c.get("/api/v1/decisions/query").status_code == 401
        with api.client(T2_TOKEN) as c:
            r = c.post("/api/v1/query", json={"query": "socket", "filters": {"tenant_id": "t1"}})
            assert r.status_code == 403


def test_a_request_waiting_on_the_database_does_not_block_others(tmp_path, monkeypatch
                                                                  ) -> None:
    monkeypatch.setenv("MEMCLI_BUSY_TIMEOUT", "30")
    with running_api(tmp_path, monkeypatch) as api, api.client() as c:
        assert c.post("/api/v1/events", json=_event("first")).status_code == 200
        answers: list[int] = []
        with write_lock_held(api.db):
            writer = threading.Thread(target=lambda: answers.append(
                api.client().post("/api/v1/events", json=_event("queued")).status_code))
            writer.start()
            time.sleep(0.5)  # let the write reach the server and wait for the lock
            # The write waits on a worker thread; the event loop still answers other
            # requests meanwhile (a read included). Were it blocked, these would wait for the
            # lock this test holds, until the write gave up (503) and the writer ended.
            assert c.get("/healthz").status_code == 200
            assert c.get("/api/v1/decisions/query").status_code == 200
            assert writer.is_alive() and answers == []
        writer.join(60)  # the lock is released: the queued write goes through
        assert answers == [200]  # queued, then written: never dropped
        hits = c.post("/api/v1/query", json={"query": "queued"}).json()
        assert hits[0]["text"] == "queued"


def test_a_missing_token_file_is_created_0600(tmp_path) -> None:
    from memcli.config import load_settings

    path = tmp_path / "new" / "tokens"
    auth = load_auth(host="10.1.2.3", port=1, token_file=path, no_token=False,
                     settings=load_settings(tmp_path / "m.db"))
    assert auth.required and str(path) in (auth.notice or "")
    assert path.stat().st_mode & 0o777 == 0o600
    again = load_auth(host="10.1.2.3", port=1, token_file=path, no_token=False,
                      settings=load_settings(tmp_path / "m.db"))
    assert again.tokens == auth.tokens and again.notice is None


def test_http_answers_with_the_json_the_cli_prints(tmp_path, monkeypatch, cli) -> None:
    # `cli` runs the real CLI on the same file (tmp_path/memory.db) as this server.
    with running_api(tmp_path, monkeypatch) as api, api.client(T1_TOKEN) as c:
        c.post("/api/v1/events", json=_event("the staging database listens on port 5433"))
        c.post("/api/v1/decisions", json={"decision": "Use SQLite", "rationale": ["one file"]})
        request = {"query": "staging database port", "top_k": 3}
        over_http = c.post("/api/v1/query", json=request).json()
        decisions = c.get("/api/v1/decisions/query").json()
        history = c.get(f"/api/v1/memories/{over_http[0]['id']}/history").json()
    in_cli = json.loads(cli("query", "-", "--json", "--tenant", "t1",
                            input=json.dumps(request)).stdout)
    for hit in (*over_http, *in_cli):  # a query counts an access, which moves the boosts
        hit.pop("score"), hit.pop("scores"), hit.pop("boosts")
    assert over_http == in_cli and over_http
    assert decisions == json.loads(cli("decision", "list", "--json", "--tenant", "t1").stdout)
    assert history == json.loads(cli("history", str(in_cli[0]["id"]), "--json",
                                     "--tenant", "t1").stdout)


# -- any body -----------------------------------------------------------------------------------
def _json_values():
    from hypothesis import strategies as st

    keys = st.sampled_from(["query", "text", "content", "filters", "tenant_id", "user_id",
                            "top_k", "return", "categories", "query_text", "max_tokens",
                            "caps", "since", "decision", "supersedes", "task_id", "title",
                            "status", "kind", "event_id", "ts", "steps", "agent"]) | st.text(
        max_size=8)
    leaves = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
              | st.floats() | st.text(max_size=20))
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(keys, inner, max_size=5), max_leaves=12)


@pytest.mark.long  # hypothesis bodies against a real server
def test_any_json_body_is_answered_without_a_500(server) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    posts = [path for method, path in ROUTES if method == "POST"]

    @settings(max_examples=120, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(path=st.sampled_from(posts), body=_json_values())
    def check(path: str, body) -> None:
        with server.client() as c:  # NaN and Infinity too: Python's json reads them
            r = c.post(path, content=json.dumps(body).encode(),
                       headers={"Content-Type": "application/json"})
        assert r.status_code in (200, 400, 403, 404, 422), (path, body, r.text)
        if r.status_code != 200:
            out = r.json()
            if isinstance(out, list):  # a batch of events with a rejected record: receipts
                assert path == "/api/v1/events" and any(x["rejected"] for x in out)
            else:
                assert "\n" not in out.get("error", "")

    check()


_FIRST_REQUESTS = """
import sys
from starlette.testclient import TestClient
from memcli.config import load_settings
from memcli.service.http.auth import load_auth
from memcli.service.http.fastapi_app import build_app
settings = load_settings(sys.argv[1])
auth = load_auth(token_file=None, no_token=True, settings=settings, host="127.0.0.1", port=None)
with TestClient(build_app(settings, auth), base_url="http://localhost") as client:
    print(client.post("/api/v1/tasks", json={"title": "ship", "user_id": "u"}).status_code)
    print(client.post("/api/v1/query", json={"query": "ship", "user_id": "u"}).status_code)
    print(client.get("/api/v1/decisions/query").status_code)
"""


def test_the_first_requests_print_no_warning(tmp_path) -> None:
    """A route's first request builds its deferred request model; pydantic's warning that the
    body parameter's alias has no effect there went into `memcli serve`'s log once a route."""
    from tests.support.daemon import daemon_env

    db = tmp_path / "w.db"
    done = subprocess.run([sys.executable, "-c", _FIRST_REQUESTS, str(db)],
                          env=daemon_env(tmp_path / "home", db), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["200", "200", "200"]
    assert "Warning" not in done.stderr, done.stderr
