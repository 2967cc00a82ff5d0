"""The app-memory design's app limit holds after every app write: `remember --app`, `decision
add --app`, `task add --app`, not only for the apps a `consolidate` run touched.

A plain write uses FIFO (the oldest unpinned memory of the scope is soft-deleted) and never
calls a model, even with one configured (README "App memory limit")."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def small(cli, monkeypatch, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("lifecycle: {app_memory_limit: 3}\n", encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    # A model configured but unreachable: a plain write must not call it (nor fail for it).
    monkeypatch.setenv("MEMCLI_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MEMCLI_LLM_MODEL", "unreachable")
    return cli


def active_app_memories(cli, user: str | None = "u1") -> list[dict]:
    args = ["query", "zebra", "--app", "shop", "--json", "--top-k", "50"]
    if user:
        args += ["--user", user]
    out = cli(*args)
    assert out.exit_code == 0, out.stderr
    return [h for h in json.loads(out.stdout) if h["app_id"] == "shop" and h["kind"] != "episode"]


def test_remember_past_the_limit_compacts_the_oldest(small):
    ids = []
    for text in ("zebra alpha likes tea", "zebra bravo owns a bike", "zebra charlie plays chess",
                 "zebra delta reads poems"):
        out = small("remember", text, "--app", "shop", "--user", "u1", "--json")
        assert out.exit_code == 0, out.stderr
        ids.append(json.loads(out.stdout)["id"])
    last = json.loads(out.stdout)
    (report,) = last["compaction"]
    assert (report["limit"], report["before"], report["after"]) == (3, 4, 3)
    assert [(a["action"], a["target_id"], a["method"]) for a in report["actions"]] == [
        ("delete", ids[0], "fifo")]
    assert "over its limit of 3" in out.stderr
    assert sorted(h["id"] for h in active_app_memories(small)) == sorted(ids[1:])


def test_decision_and_task_writes_count_and_other_scopes_are_untouched(small):
    assert small("remember", "zebra one", "--app", "shop", "--user", "u2").exit_code == 0
    first = json.loads(small("remember", "zebra first note", "--app", "shop", "--user", "u1",
                             "--json").stdout)
    for i in range(2):
        assert small("decision", "add", f"zebra decision {i}", "--app", "shop",
                     "--user", "u1").exit_code == 0
    done = small("task", "add", "zebra task", "--app", "shop", "--user", "u1", "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["compaction"][0]["actions"][0]["target_id"] == first["id"]
    assert len(active_app_memories(small)) == 3
    assert len(active_app_memories(small, "u2")) == 1  # another user's scope: not counted


def test_decision_and_task_events_are_held_to_the_limit(small):
    """A decision or task recorded as an event of an app counts as `decision add --app` does:
    past the limit, the oldest memory of the scope is soft-deleted in the record's write."""
    first = json.loads(small("remember", "zebra first note", "--app", "shop", "--user", "u1",
                             "--json").stdout)
    records = [{"event_id": f"d{i}", "kind": "decision", "user_id": "u1", "app_id": "shop",
                "session_id": "s1", "content": {"decision": f"zebra decision {i}"}}
               for i in range(2)]
    records.append({"event_id": "t1", "kind": "task_update", "user_id": "u1",
                    "app_id": "shop", "session_id": "s1", "content": {"title": "zebra task"}})
    out = small("ingest", "-", "--json", input="\n".join(map(json.dumps, records)))
    assert out.exit_code == 0, out.stderr
    ledger = json.loads(out.stdout)["ledger"]
    assert [entry["event_id"] for entry in ledger] == ["d0", "d1", "t1"]
    assert "compaction" not in ledger[0] and "compaction" not in ledger[1]
    (report,) = ledger[2]["compaction"]
    assert [(a["action"], a["target_id"], a["method"]) for a in report["actions"]] == [
        ("delete", first["id"], "fifo")]
    assert "over its limit of 3" in out.stderr
    assert len(active_app_memories(small)) == 3
