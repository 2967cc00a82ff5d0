"""Decisions and tasks recorded as events (kinds `decision`, `task_update`): ingest writes the
ledger row with the event, in one transaction, on both engines. The real CLI and library."""

from __future__ import annotations

import json

import pytest

from memcli import Memory
from memcli.ledger import entries as ledger
from memcli.providers.embedders import HashEmbedder
from tests.support.records import ndjson

pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]


def run_json(cli, *args, input=None):
    result = cli(*args, "--json", input=input)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def section(bundle: dict, name: str) -> dict:
    return next(s for s in bundle["sections"] if s["name"] == name)


def event(event_id: str, kind: str, content: dict, **extra) -> dict:
    return {"event_id": event_id, "session_id": "s1", "user_id": "u1", "kind": kind,
            "content": content, **extra}


def test_a_decision_event_is_a_ledger_row_citing_it(cli):
    decision = event("evt-d1", "decision",
                     {"decision": "Use SQLite for storage", "rationale": ["offline", "one file"],
                      "constraints": "no server", "scope": "user"}, refs=["evt-0"])
    report = run_json(cli, "ingest", "-", input=ndjson([decision]))
    assert report["created"] == ["evt-d1"]
    [row] = run_json(cli, "decision", "list")
    assert report["ledger"] == [{"event_id": "evt-d1", "decision_id": row["id"]}]
    assert row["decision"] == "Use SQLite for storage" and row["scope"] == "user"
    assert row["rationale"] == ["offline", "one file"] and row["constraints"] == ["no server"]
    assert row["refs"] == ["evt-d1", "evt-0"] and row["user_id"] == "u1"
    # The bundle's ledger shows it, citing the event.
    items = section(run_json(cli, "acb", "build", "--user", "u1", "--no-track"),
                    "decision_ledger")["items"]
    assert [i["decision_id"] for i in items] == [row["id"]] and "evt-d1" in items[0]["refs"]
    # The same event again is a repeat: no second row.
    again = run_json(cli, "ingest", "-", input=ndjson([decision]))
    assert again["skipped"] == ["evt-d1"] and again["ledger"] == []
    assert len(run_json(cli, "decision", "list", "--status", "all")) == 1
    # A later decision event supersedes it by id.
    run_json(cli, "ingest", "-", input=ndjson([event(
        "evt-d2", "decision", {"text": "Use PostgreSQL", "supersedes": row["id"]})]))
    by_text = {d["decision"]: d for d in run_json(cli, "decision", "list", "--status", "all")}
    assert by_text["Use SQLite for storage"]["status"] == "superseded"
    assert by_text["Use PostgreSQL"]["supersedes"] == row["id"]
    assert by_text["Use PostgreSQL"]["refs"] == ["evt-d2"]


def test_task_update_events_create_and_change_a_task(cli):
    created = run_json(cli, "ingest", "-", input=ndjson([event(
        "evt-t1", "task_update", {"title": "Write the migration", "details": "v2 schema"})]))
    [task] = run_json(cli, "task", "list")
    assert created["ledger"] == [{"event_id": "evt-t1", "task_id": task["id"]}]
    assert (task["title"], task["details"], task["status"]) == (
        "Write the migration", "v2 schema", "open")
    assert task["refs"] == ["evt-t1"]
    run_json(cli, "ingest", "-", input=ndjson([event(
        "evt-t2", "task_update", {"task_id": task["id"], "status": "doing",
                                  "text": "started on it"})]))
    [task] = run_json(cli, "task", "list")
    assert task["status"] == "doing" and task["title"] == "Write the migration"
    assert task["refs"] == ["evt-t1", "evt-t2"]
    items = section(run_json(cli, "acb", "build", "--user", "u1", "--no-track"),
                    "task_state")["items"]
    assert [i["task_id"] for i in items] == [task["id"]] and "[doing]" in items[0]["text"]


def test_a_ledger_event_that_cannot_be_written_is_rejected_whole(cli):
    bad = [event("evt-x1", "task_update", {"task_id": 42, "status": "done"}),
           event("evt-x2", "decision", {"rationale": ["no decision given"]}),
           event("evt-x3", "task_update", {"title": "t", "status": "someday"})]
    result = cli("ingest", "-", "--json", input=ndjson(bad))
    report = json.loads(result.stdout)
    assert report["created"] == [] and report["ledger"] == []
    reasons = {r["line"]: r["reason"] for r in report["rejected"]}
    assert "no task with id 42" in reasons[1]
    assert "content.decision" in reasons[2] and "content.status" in reasons[3]
    assert run_json(cli, "decision", "list") == [] and run_json(cli, "task", "list") == []


def test_the_event_and_its_row_share_one_transaction(db_path):
    """Two events of one batch supersede the same decision: the second fails under the lock,
    and its event is rolled back with it; the first lands, row and event together."""
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        first = ledger.add_decision(memory, "Use SQLite", user_id="u1")
        report = memory.ingest([
            event("evt-a", "decision", {"decision": "Use PostgreSQL", "supersedes": first["id"]}),
            event("evt-b", "decision", {"decision": "Use DuckDB", "supersedes": first["id"]}),
        ])
        assert report.created == ["evt-a"]
        assert [r.event_id for r in report.rejected] == ["evt-b"]
        assert "already superseded" in report.rejected[0].reason
        events = [r["event_id"] for r in memory.db.query(
            "SELECT event_id FROM events WHERE kind != 'command'")]  # not decision add's own
        assert events == ["evt-a"]
        active = ledger.list_decisions(memory)
        assert [d["decision"] for d in active] == ["Use PostgreSQL"]
        assert active[0]["refs"] == ["evt-a"]
