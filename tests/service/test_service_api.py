"""memcli.service.api: the operations HTTP and MCP share, called directly on a real file.

Each operation answers with the payload the CLI prints for the same request (checked against
the real CLI), and a bound scope only narrows: another tenant, user, agent or app is refused or
not found, never answered."""

from __future__ import annotations

import json

import pytest

from memcli.config import load_settings
from memcli.errors import DatabaseBusyError, NotAllowedError, NotFoundError, UsageError
from memcli.service import api

NO_SPARSE = "retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0, entity: 0.5, trigram: 0.5}\n"


@pytest.fixture
def service(tmp_path, monkeypatch, db_path):
    config = tmp_path / "config.yaml"
    config.write_text(NO_SPARSE, encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    monkeypatch.setenv("MEMCLI_DB", str(db_path))
    svc = api.Service(load_settings(db_path))
    try:
        yield svc
    finally:
        svc.close()


T1 = api.Binding(tenant="t1")
T2 = api.Binding(tenant="t2")


def _event(text: str, **extra) -> dict:
    return {"session_id": "s1", "user_id": "u1", "content": {"text": text}, **extra}


def test_record_events_is_ingest_with_per_record_problems_and_dedupe(service) -> None:
    out = service.run(api.record_events, T1, [_event("blue-green deploys on Fridays",
                                                     event_id="e1"),
                                              {"kind": "nonsense", "text": "x"}])
    # A list of records, a list of receipts (one per record, in order).
    made, bad = out
    assert made["created"] == ["e1"] and len(made["memory_ids"]) == 1
    assert made["event_id"] == "e1" and made["chunk_ids"] == made["memory_ids"]
    assert [p["line"] for p in bad["rejected"]] == [2] and bad["created"] == []
    again = service.run(api.record_events, T1, _event("blue-green deploys on Fridays",
                                                      event_id="e1"))
    assert again["skipped"] == ["e1"] and again["created"] == []
    secret = service.run(api.record_events, T1, _event("my key is sk-abcdefghijklmnopqrstuvwx"))
    assert secret["redacted"], secret  # the one redaction path (memcli.policy.redaction)


@pytest.mark.backends
def test_record_events_receipts_per_record_on_both_engines(service) -> None:
    """The Agent Memory System PRD's receipt (`event_id`, `chunk_ids`, `created_at`) per
    record, in order: a repeat names the stored event with its chunks, and a caller bound to
    another tenant learns nothing of that tenant's event but that its id is taken."""
    long_text = " ".join(f"word{i}" for i in range(1500))  # more than one chunk
    made = service.run(api.record_events, T1, [_event(long_text, event_id="long"),
                                               _event("short note", event_id="short")])
    assert [m["event_id"] for m in made] == ["long", "short"]
    assert len(made[0]["chunk_ids"]) > 1 and made[0]["chunk_ids"] == made[0]["memory_ids"]
    assert made[1]["chunk_ids"] == made[1]["memory_ids"] and len(made[1]["chunk_ids"]) == 1
    assert made[0]["chunk_ids"] == sorted(made[0]["chunk_ids"]) < made[1]["chunk_ids"]
    again = service.run(api.record_events, T1, _event("short note"))  # same content: a repeat
    assert again["skipped"] == ["short"] and again["memory_ids"] == []
    assert (again["event_id"], again["chunk_ids"], again["created_at"]) == (
        "short", made[1]["chunk_ids"], made[1]["created_at"])
    other = service.run(api.record_events, T2, _event("another tenant's note", event_id="short"))
    assert other["skipped"] == ["short"]
    assert other["chunk_ids"] == [] and other["created_at"] is None


def test_record_events_refuses_a_record_of_another_tenant(service) -> None:
    with pytest.raises(NotAllowedError):
        service.run(api.record_events, T1, _event("x", tenant_id="t2"))
    # A bound user cannot be escaped by an explicit null (a tenant-wide write).
    bound_user = api.Binding(tenant="t1", user_id="u1")
    service.run(api.record_events, bound_user, {"user_id": None, "text": "null user note"})
    rows = service.run(api.query, T1, {"query": "null user note"})
    assert rows[0]["user_id"] == "u1"
    out = service.run(api.record_events, T1, _event("defaults to the bound tenant"))
    rows = service.run(api.query, T1, {"query": "defaults bound tenant"})
    assert out["memory_ids"] and rows and {r["tenant_id"] for r in rows} == {"t1"}


def test_query_matches_the_cli_payload(service, cli) -> None:
    service.run(api.record_events, T1, _event("the staging database lives on port 5433"))
    request = {"query": "staging database port", "filters": {"tenant_id": "t1"}, "top_k": 3}
    ours = service.run(api.query, api.Binding(), request)
    theirs = json.loads(cli("query", "-", "--json", input=json.dumps(request)).stdout)
    for hit in (*ours, *theirs):
        hit.pop("score"), hit.pop("scores"), hit.pop("boosts")  # access counts move ranks
    assert ours == theirs and ours
    bullets = service.run(api.query, T1, {**request, "return": "bullets"})
    assert set(bullets[0]) == {"id", "category", "text", "scope"}


def test_query_never_widens_the_bound_scope(service) -> None:
    service.run(api.record_events, T1, _event("tenant one secret plan"))
    service.run(api.record_events, T2, _event("tenant two secret plan"))
    with pytest.raises(NotAllowedError):
        service.run(api.query, T2, {"query": "secret plan", "filters": {"tenant_id": "t1"}})
    hits = service.run(api.query, T2, {"query": "secret plan"})
    assert hits and {h["tenant_id"] for h in hits} == {"t2"}
    # A category allowlist bound by the server narrows; asking outside it is refused.
    narrow = api.Binding(tenant="t1", categories=("tasks",))
    assert service.run(api.query, narrow, {"query": "secret plan"}) == []
    with pytest.raises(NotAllowedError):
        service.run(api.query, narrow, {"query": "secret plan", "categories": ["event"]})


def test_build_acb_is_the_cli_bundle_in_the_bound_tenant(service) -> None:
    service.run(api.record_events, T1, _event("we chose SQLite for the store"))
    bundle = service.run(api.build_acb, T1, {"query_text": "store", "session_id": "s1",
                                              "user_id": "u1", "track": False})
    assert bundle["sections"] and "provenance" in bundle
    text = json.dumps(bundle)
    assert "SQLite" in text
    other = service.run(api.build_acb, T2, {"query_text": "store", "track": False})
    assert "SQLite" not in json.dumps(other["sections"])
    with pytest.raises(NotAllowedError):
        service.run(api.build_acb, T2, {"tenant_id": "t1"})
    with pytest.raises(UsageError, match="bad acb request"):
        service.run(api.build_acb, T1, {"max_tokens": "many"})


def test_get_artifact_only_in_its_tenant(service) -> None:
    out = service.run(api.record_events, T1, _event("x" * 70_000, kind="tool_result"))
    art = out["artifacts"][0]
    got = service.run(api.get_artifact, T1, {"artifact_id": art})
    assert got["bytes"] >= 70_000 and got["text"].startswith("x")
    with pytest.raises(NotFoundError):
        service.run(api.get_artifact, T2, {"artifact_id": art})
    # An event of kind `artifact` is fetched by its event id, in its tenant only.
    service.run(api.record_events, T1, _event("the design doc, v3", kind="artifact",
                                               event_id="evt_doc"))
    doc = service.run(api.get_artifact, T1, {"artifact_id": "evt_doc"})
    assert doc["text"] == "the design doc, v3"
    with pytest.raises(NotFoundError):
        service.run(api.get_artifact, T2, {"artifact_id": "evt_doc"})
    service.run(api.record_events, T1, _event("just a message", event_id="evt_msg"))
    with pytest.raises(NotFoundError):  # an event of another kind is not an artifact
        service.run(api.get_artifact, T1, {"artifact_id": "evt_msg"})


def test_decisions_tasks_remember_forget_history(service) -> None:
    d = service.run(api.record_decision, T1, {"decision": "Use SQLite", "rationale": ["simple"]})
    assert service.run(api.query_decisions, T1, {})[0]["id"] == d["id"]
    assert service.run(api.query_decisions, T2, {}) == []
    newer = service.run(api.record_decision, T1, {"decision": "Use Postgres",
                                                   "supersedes": d["id"]})
    assert newer["supersedes"] == d["id"]
    with pytest.raises(NotFoundError):
        service.run(api.record_decision, T2, {"decision": "steal", "supersedes": newer["id"]})
    task = service.run(api.record_task, T1, {"title": "write tests"})
    done = service.run(api.record_task, T1, {"task_id": task["id"], "status": "done"})
    assert done["status"] == "done"
    with pytest.raises(NotFoundError):
        service.run(api.record_task, T2, {"task_id": task["id"], "status": "open"})
    fact = service.run(api.remember, T1, {"text": "Priya prefers tea"})
    with pytest.raises(NotFoundError):  # another tenant's memory: not found, untouched
        service.run(api.forget, T2, {"memory_id": fact["id"]})
    assert service.run(api.forget, T1, {"memory_id": fact["id"]})["state"] == "soft_deleted"
    ops = [r["op"] for r in service.run(api.memory_history, T1, {"memory_id": fact["id"]})]
    assert ops == ["DELETE", "ADD"]
    with pytest.raises(NotFoundError):  # another tenant's memory has no history here
        service.run(api.memory_history, T2, {"memory_id": fact["id"]})
    # A caller bound to a user or an app sees and forgets only that user's or app's memories.
    note = service.run(api.remember, T1, {"text": "Ravi's note on the roadmap", "user_id": "ravi"})
    for bound in (api.Binding(tenant="t1", user_id="priya"), api.Binding(tenant="t1", app_id="a1")):
        with pytest.raises(NotFoundError):
            service.run(api.memory_history, bound, {"memory_id": note["id"]})
        with pytest.raises(NotFoundError):
            service.run(api.forget, bound, {"memory_id": note["id"]})


def test_app_memories_list_and_delete(service) -> None:
    a = service.run(api.remember, T1, {"text": "The billing export runs nightly",
                                       "app_id": "a1"})
    b = service.run(api.remember, T1, {"text": "Priya owns the mobile release checklist",
                                       "app_id": "a1"})
    service.run(api.remember, T1, {"text": "Weather widget uses Celsius", "app_id": "a2"})
    listed = service.run(api.app_memories, T1, {"app_id": "a1"})
    assert sorted(m["id"] for m in listed["memories"]) == sorted([a["id"], b["id"]])
    assert service.run(api.app_memories, T2, {"app_id": "a1"})["memories"] == []
    with pytest.raises(NotFoundError):  # a memory of another app is not this app's to delete
        service.run(api.delete_app_memories, T1, {"app_id": "a2", "memory_id": a["id"]})
    one = service.run(api.delete_app_memories, T1, {"app_id": "a1", "memory_id": a["id"]})
    assert one["memories"] == 1 and one["dry_run"] is False
    rest = service.run(api.delete_app_memories, T1, {"app_id": "a1"})
    assert rest["memories"] == 1
    assert service.run(api.app_memories, T1, {"app_id": "a1"})["memories"] == []
    assert len(service.run(api.app_memories, T1, {"app_id": "a2"})["memories"]) == 1


def test_errors_map_to_one_status_each() -> None:
    assert api.status_for(NotFoundError("x")) == (404, {})
    assert api.status_for(NotAllowedError("x")) == (403, {})
    assert api.status_for(UsageError("x")) == (422, {})
    assert api.status_for(api.BadRequest("x")) == (400, {})
    assert api.status_for(DatabaseBusyError("x")) == (503, {"Retry-After": "1"})
    assert api.status_for(RuntimeError("x")) == (500, {})
    assert api.error_payload(RuntimeError("boom\nline two"))["error"].count("\n") == 0
