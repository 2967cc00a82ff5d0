"""Decisions, tasks and checkpoints through the real CLI and the library."""

from __future__ import annotations

import json

import pytest

from memcli.errors import NotFoundError, UsageError
from memcli.ledger import entries as ledger

# `@backends`: SQLite and PostgreSQL (tests/support/backend.py), for each test reaching the
# store's SQL. Tests of logic that another test already walks on both engines stay
# SQLite-only: a PostgreSQL case costs ~2.5x a SQLite one.
backends = pytest.mark.backends


@pytest.fixture(autouse=True)
def without_sparse_leg(tmp_path, monkeypatch):
    """SPLADE runs a real model; ledger writes do not need it to be tested."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0, entity: 0.5, trigram: 0.5}\n"
    )
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))


def run_json(cli, *args, input=None):
    result = cli(*args, "--json", input=input)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


# -- decisions --------------------------------------------------------------------------------
@backends
def test_decision_add_records_every_field_and_a_searchable_memory(cli):
    row = run_json(
        cli,
        "decision",
        "add",
        "Use SQLite for storage",
        "-r",
        "offline",
        "-r",
        "one file",
        "--constraint",
        "no server",
        "--alternative",
        "Postgres",
        "--consequence",
        "single writer",
        "--ref",
        "evt_1",
        "--scope",
        "user",
        "--user",
        "u1",
        "--session",
        "s1",
    )
    assert row["status"] == "active" and row["scope"] == "user"
    assert row["rationale"] == ["offline", "one file"] and row["refs"] == ["evt_1"]
    assert row["constraints"] == ["no server"] and row["alternatives"] == ["Postgres"]
    hits = run_json(cli, "query", "which database for storage", "--user", "u1")
    decision_hit = next(h for h in hits if h["kind"] == "decision")
    assert decision_hit["id"] == row["memory_id"] and decision_hit["category"] == "decisions"
    assert decision_hit["source_ids"] == ["evt_1"]
    assert "Rationale: offline; one file" in decision_hit["text"]


@backends
def test_supersession_is_traceable(cli):
    old = run_json(cli, "decision", "add", "Use SQLite", "--user", "u1")
    new = run_json(
        cli,
        "decision",
        "supersede",
        str(old["id"]),
        "Use SQLite with WAL",
        "-r",
        "readers never block",
        "--reason",
        "concurrency",
    )
    assert new["supersedes"] == old["id"] and new["user_id"] == "u1"
    listed = run_json(cli, "decision", "list", "--status", "all")
    by_id = {d["id"]: d for d in listed}
    assert by_id[old["id"]]["status"] == "superseded"
    assert by_id[old["id"]]["superseded_by"] == new["id"]
    assert [d["id"] for d in run_json(cli, "decision", "list")] == [new["id"]]
    # The memories: old superseded (kept), an edge, and the audit trail says why.
    edges = run_json(cli, "related", str(old["memory_id"]))
    assert [(e["kind"], e["other_id"], e["direction"]) for e in edges] == [
        ("supersedes", new["memory_id"], "in")
    ]
    history = run_json(cli, "history", str(old["memory_id"]))
    update = next(h for h in history if h["op"] == "UPDATE")
    assert update["meta"]["superseded_by"] == new["memory_id"]
    assert update["meta"]["reason"] == "concurrency"
    assert not any(
        h["id"] == old["memory_id"] for h in run_json(cli, "query", "SQLite", "--user", "u1")
    )
    # The bundle shows the active decision and where it came from.
    bundle = run_json(cli, "acb", "build", "--user", "u1")
    ledger_items = next(s for s in bundle["sections"] if s["name"] == "decision_ledger")["items"]
    assert [i["decision_id"] for i in ledger_items] == [new["id"]]
    assert ledger_items[0]["text"].endswith(f"(supersedes D{old['id']})")
    again = cli("decision", "supersede", str(old["id"]), "something else")
    assert again.exit_code == 2 and f"already superseded by {new['id']}" in again.stderr


def test_decision_input_errors(cli):
    assert cli("decision", "add", "x", "--scope", "galaxy").exit_code == 2
    secret = cli("decision", "add", "x", "--sensitivity", "secret")
    assert secret.exit_code == 2 and "never stored" in secret.stderr
    missing = cli("decision", "supersede", "42", "y")
    assert missing.exit_code == 1 and missing.stderr == "memcli: error: no decision with id 42\n"
    assert run_json(cli, "decision", "list") == []


# -- tasks ------------------------------------------------------------------------------------
@backends
def test_task_lifecycle_keeps_every_version(cli):
    task = run_json(
        cli, "task", "add", "Write the bench", "--details", "10k and 100k", "--user", "u1"
    )
    assert task["status"] == "open"
    doing = run_json(cli, "task", "update", str(task["id"]), "--status", "doing", "--ref", "evt_9")
    assert doing["status"] == "doing" and doing["refs"] == ["evt_9"]
    assert doing["memory_id"] != task["memory_id"]
    history = run_json(cli, "history", str(task["memory_id"]))
    assert history[0]["op"] == "UPDATE"
    assert history[0]["meta"]["superseded_by"] == doing["memory_id"]
    run_json(cli, "task", "add", "Second", "--user", "u1")
    run_json(cli, "task", "update", str(task["id"]), "--status", "done")
    assert [t["title"] for t in run_json(cli, "task", "list", "--status", "open")] == ["Second"]
    assert len(run_json(cli, "task", "list")) == 2
    bundle = run_json(cli, "acb", "build", "--user", "u1")
    state = next(s for s in bundle["sections"] if s["name"] == "task_state")["items"]
    assert [i["text"] for i in state] == ["T2 [open] Second"]  # done tasks leave the section


@backends
def test_task_state_orders_doing_first(memory):
    a = ledger.add_task(memory, "first", user_id="u1")
    ledger.add_task(memory, "second", user_id="u1")
    ledger.update_task(memory, a["id"], status="doing")
    from tests.support.bundles import build_acb

    bundle = build_acb(memory, {"user_id": "u1", "track": False})
    state = next(s for s in bundle["sections"] if s["name"] == "task_state")["items"]
    assert [i["status"] for i in state] == ["doing", "open"]


def test_task_input_errors(cli, memory):
    assert cli("task", "add", "x", "--status", "blocked").exit_code == 2
    assert cli("task", "update", "7", "--status", "done").exit_code == 1
    task = ledger.add_task(memory, "x")
    with pytest.raises(UsageError, match="already looks like that"):
        ledger.update_task(memory, task["id"], status="open")
    with pytest.raises(UsageError):
        ledger.list_tasks(memory, statuses=("blocked",))


@backends
def test_purging_a_user_removes_their_ledger_rows(cli):
    run_json(cli, "decision", "add", "keep me", "--user", "u2")
    d = run_json(cli, "decision", "add", "forget me", "--user", "u1")
    run_json(cli, "decision", "supersede", str(d["id"]), "forget me too")
    run_json(cli, "task", "add", "forget this task", "--user", "u1")
    assert cli("purge", "--user", "u1").exit_code == 0
    assert [r["decision"] for r in run_json(cli, "decision", "list", "--status", "all")] == [
        "keep me"
    ]
    assert run_json(cli, "task", "list") == []


# -- checkpoints ------------------------------------------------------------------------------
@backends
def test_checkpoint_roundtrip_and_overwrite(cli):
    saved = run_json(
        cli,
        "checkpoint",
        "save",
        "-",
        "--user",
        "u1",
        "--thread",
        "t1",
        input='{"step": 2, "plan": ["a", "b"], "名前": "ü"}',
    )
    assert saved["version"] == 1 and "data" not in saved
    loaded = run_json(cli, "checkpoint", "load", "--user", "u1", "--thread", "t1")
    assert loaded["data"] == {"step": 2, "plan": ["a", "b"], "名前": "ü"}
    again = run_json(
        cli, "checkpoint", "save", "--data", '{"step": 3}', "--user", "u1", "--thread", "t1"
    )
    assert again["version"] == 2 and again["created_at"] == saved["created_at"]
    assert run_json(cli, "checkpoint", "load", "--user", "u1", "--thread", "t1")["data"] == {
        "step": 3
    }
    other = cli("checkpoint", "load", "--user", "u1", "--thread", "t2")
    assert other.exit_code == 1 and "no checkpoint" in other.stderr


def test_checkpoint_input_errors(cli, memory):
    assert (
        cli("checkpoint", "save", "--data", "{nope", "--user", "u", "--thread", "t").exit_code == 2
    )
    assert cli("checkpoint", "save", "--data", "{}", "--thread", "t").exit_code == 2
    assert cli("checkpoint", "save", "--user", "u", "--thread", "t").exit_code == 2
    with pytest.raises(NotFoundError):
        ledger.load_checkpoint(memory, user_id="u", thread_id="t")
    with pytest.raises(UsageError):
        ledger.save_checkpoint(memory, {"a": 1}, user_id="u", thread_id="t", sensitivity="secret")


@backends
def test_every_checkpoint_save_is_in_history_and_older_versions_load(cli):
    for step in (1, 2, 3):
        run_json(cli, "checkpoint", "save", "--data", json.dumps({"step": step}),
                 "--user", "u1", "--thread", "t1")
    rows = [h for h in run_json(cli, "history", "--user", "u1") if h["actor"] == "checkpoint"]
    assert [(h["op"], h["new_ref"], h["session_id"]) for h in rows] == [
        ("UPDATE", "checkpoint v3", "t1"), ("UPDATE", "checkpoint v2", "t1"),
        ("ADD", "checkpoint v1", "t1")]
    first = run_json(cli, "checkpoint", "load", "--user", "u1", "--thread", "t1",
                     "--version", "1")
    assert (first["version"], first["data"]) == (1, {"step": 1})
    assert first["updated_at"] == rows[-1]["ts"]
    latest = run_json(cli, "checkpoint", "load", "--user", "u1", "--thread", "t1",
                      "--version", "3")
    assert (latest["version"], latest["data"]) == (3, {"step": 3})
    beyond = cli("checkpoint", "load", "--user", "u1", "--thread", "t1", "--version", "4")
    assert beyond.exit_code == 2 and "versions run from 1 to 3" in beyond.stderr
    # A purge of the user takes the old versions with the checkpoint.
    run_json(cli, "checkpoint", "save", "--data", "{}", "--user", "u2", "--thread", "t1")
    assert cli("purge", "--user", "u1").exit_code == 0
    assert all(h["meta"] == {} for h in run_json(cli, "history", "--user", "u1"))
    kept = cli("checkpoint", "load", "--user", "u2", "--thread", "t1")
    assert kept.exit_code == 0
