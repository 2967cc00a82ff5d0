"""`memcli rebuild` brings back the decisions and tasks recorded as events (`decision`,
`task_update`): the event log is the ground truth, the ledger rows are derived from it. The
real CLI, on SQLite and PostgreSQL (tests/support/backend.py)."""

from __future__ import annotations

import json

import pytest

from memcli.store.opener import open_database
from tests.support.backend import is_pg
from tests.support.records import ndjson

pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]

# Times a rebuild cannot give back exactly: a row's are its memory's ADD history time.
TIMES = ("created_at", "updated_at")


def run_json(cli, *args, input=None):
    result = cli(*args, "--json", input=input)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def event(event_id: str, kind: str, content: dict, **extra) -> dict:
    return {"event_id": event_id, "session_id": "s1", "user_id": "u1", "kind": kind,
            "content": content, **extra}


def ledger(cli) -> dict:
    """What `decision list` and `task list` show, times aside."""
    return {name: [{k: v for k, v in row.items() if k not in TIMES} for row in
                   run_json(cli, name, "list", *args)]
            for name, args in (("decision", ("--status", "all")), ("task", ()))}


def record(cli) -> dict:
    """Two decisions (the second supersedes the first), a task created then moved to doing,
    and a second task, all as events; the first task's memory is pinned."""
    run_json(cli, "ingest", "-", input=ndjson([
        event("evt-d1", "decision", {"decision": "Use SQLite", "rationale": ["one file"],
                                     "constraints": "offline"}, refs=["evt-0"]),
        event("evt-t1", "task_update", {"title": "Write the migration", "details": "v2"}),
        event("evt-t2", "task_update", {"title": "Ship the docs"})]))
    first = {d["decision"]: d for d in run_json(cli, "decision", "list")}["Use SQLite"]
    tasks = {t["title"]: t for t in run_json(cli, "task", "list")}
    migration = tasks["Write the migration"]
    run_json(cli, "ingest", "-", input=ndjson([
        event("evt-d2", "decision", {"text": "Use PostgreSQL", "supersedes": first["id"]}),
        event("evt-t3", "task_update", {"task_id": migration["id"], "status": "doing"})]))
    migration = {t["title"]: t for t in run_json(cli, "task", "list")}["Write the migration"]
    assert cli("pin", str(migration["memory_id"])).exit_code == 0
    return {"decision": first, "task": migration, "docs": tasks["Ship the docs"]}


def damage(db_path, sql: str) -> None:
    db = open_database(db_path)
    try:
        with db.transaction():
            db.execute(sql)
    finally:
        db.close()


def scalar(db_path, sql: str, params: tuple = ()):
    db = open_database(db_path)
    try:
        return db.scalar(sql, params)
    finally:
        db.close()


def drop_memories(db_path) -> None:
    """The memories table dropped: its foreign keys take the decisions and tasks with it
    (PostgreSQL: TRUNCATE CASCADE empties them, as SQLite's DROP does by cascade)."""
    damage(db_path, "TRUNCATE memories CASCADE" if is_pg(db_path) else "DROP TABLE memories")


def test_decisions_and_tasks_from_events_come_back(cli, db_path):
    rows = record(cli)
    before = ledger(cli)
    assert [d["status"] for d in before["decision"]] == ["active", "superseded"]
    assert [t["status"] for t in before["task"]] == ["open", "doing"]
    drop_memories(db_path)
    assert ledger(cli) == {"decision": [], "task": []}
    report = run_json(cli, "rebuild")
    assert ledger(cli) == before  # ids, fields, refs, supersession, status, memory ids
    assert sorted(report["ledger"]["restored_decisions"]) == sorted(
        d["id"] for d in before["decision"])
    # (the episodes' rows come back with ingest's defaults: said, and nothing else)
    assert [c for c in report["cannot_rebuild"] if "episode" not in c["what"]] == []
    # The task's memory came back pinned, its first version superseded by its second.
    assert scalar(db_path, "SELECT pinned FROM memories WHERE id = ?",
                  (rows["task"]["memory_id"],)) == 1
    assert scalar(db_path, "SELECT count(*) FROM memories WHERE kind = 'task'"
                  " AND state = 'superseded'") == 1
    # A bundle shows them again; a second rebuild has nothing left to do.
    bundle = run_json(cli, "acb", "build", "--user", "u1", "--no-track")
    sections = {s["name"]: s for s in bundle["sections"]}
    assert [i["decision_id"] for i in sections["decision_ledger"]["items"]] == [
        before["decision"][0]["id"]]
    assert sorted(i["task_id"] for i in sections["task_state"]["items"]) == sorted(
        t["id"] for t in before["task"])
    again = run_json(cli, "rebuild")
    assert again["ledger"]["restored_decisions"] == again["ledger"]["restored_tasks"] == []


def test_emptied_ledger_tables_come_back_over_their_memories(cli, db_path):
    record(cli)
    before = ledger(cli)
    memories = scalar(db_path, "SELECT count(*) FROM memories")
    damage(db_path, "DELETE FROM decisions")
    damage(db_path, "DELETE FROM tasks")
    report = run_json(cli, "rebuild")
    assert ledger(cli) == before
    assert report["ledger"]["restored_memories"] == []  # the memories were there
    assert scalar(db_path, "SELECT count(*) FROM memories") == memories


def test_a_purged_task_is_not_brought_back(cli, db_path):
    rows = record(cli)
    purged = run_json(cli, "purge", "--memory", str(rows["docs"]["memory_id"]))
    assert purged["memories"] == 1
    before = ledger(cli)
    assert rows["docs"]["id"] not in [t["id"] for t in before["task"]]
    drop_memories(db_path)
    run_json(cli, "rebuild")
    assert ledger(cli) == before
    plan = run_json(cli, "rebuild", "--dry-run")
    assert plan["ledger"]["restored_tasks"] == []


def test_a_decision_added_by_command_comes_back_from_its_event(cli, db_path):
    """`decision add` records a `command` event first and derives its row from it: with its
    memory and row gone, a rebuild brings both back (it was kept, or reported lost, before)."""
    record(cli)
    added = run_json(cli, "decision", "add", "Keep one config file", "--user", "u1")
    run_json(cli, "rebuild")
    assert added["id"] in [d["id"] for d in run_json(cli, "decision", "list")]
    drop_memories(db_path)
    report = run_json(cli, "rebuild")
    assert added["id"] in report["ledger"]["restored_decisions"]
    assert [c for c in report["cannot_rebuild"] if "episode" not in c["what"]] == []
    back = {d["id"]: d for d in run_json(cli, "decision", "list")}[added["id"]]
    assert {k: v for k, v in back.items() if k != "redacted"} == {
        k: v for k, v in added.items() if k not in ("redacted",)}


def test_a_high_decision_comes_back_sealed(cli, db_path, monkeypatch):
    """A `high` decision event: its row and memory come back encrypted, readable with the key."""
    import base64

    monkeypatch.setenv("MEMCLI_KEY", base64.b64encode(b"k" * 32).decode())
    run_json(cli, "ingest", "-", input=ndjson([event(
        "evt-h1", "decision", {"decision": "Rotate the Zurich vault keys monthly"},
        sensitivity="high")]))
    before = ledger(cli)
    assert [d["decision"] for d in before["decision"]] == ["Rotate the Zurich vault keys monthly"]
    drop_memories(db_path)
    run_json(cli, "rebuild")
    assert ledger(cli) == before
    db = open_database(db_path)
    try:
        stored = [r["decision"] for r in db.stream("SELECT decision FROM decisions", raw=True)]
        memory = [r["content"] for r in db.stream(
            "SELECT content FROM memories WHERE kind = 'decision'", raw=True)]
    finally:
        db.close()
    assert [s.startswith("enc:v1:") for s in stored + memory] == [True, True]
