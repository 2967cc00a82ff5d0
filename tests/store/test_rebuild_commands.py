"""Every write is an event: a database built through every
write path (ingest, remember, a merge, a procedure, correct, decision add / supersede, task add
/ update, checkpoint save, proposals accept / reject, forget, restore, pin, unpin, confirm; the
HTTP routes and the pages' actions), with every derived table then emptied or dropped
(memories, decisions, tasks, checkpoints, sessions, relations, entities, every index),
exports byte for byte the same after `memcli rebuild`. On SQLite and PostgreSQL (the backend
matrix); the HTTP and page paths on SQLite, over a real server."""

from __future__ import annotations

import json

import pytest

from memcli.config import load_settings
from memcli.operations.binding import Binding
from memcli.service.api import Context
from memcli.store.opener import open_database
from memcli.viewer.pages import memory_page
from tests.support.backend import is_pg
from tests.support.http_api import running_api
from tests.support.records import turns
from tests.support.scenarios import ingest, run_json, save_checkpoint

pytestmark = pytest.mark.usefixtures("fast_cli")  # no SPLADE model: not about ranking

# PostgreSQL's lexical and vector indexes are indexes of memories and memory_vectors.
PG_INDEXES = ("memories_fts", "memories_trgm", "memory_vectors_hnsw")


def wipe(location) -> None:
    """Every table derived from the events: rows emptied, index tables dropped. What stays:
    events, artifacts, history (the audit trail that names each memory's id), proposals
    (consent state), and the per-database records (meta, metrics, runs, revisions)."""
    db = open_database(location)
    try:
        with db.transaction():
            for table in (*db.backend.lexical_tables, *db.backend.vector_tables, "memory_sparse"):
                db.execute(f"DROP TABLE IF EXISTS {table}")
            if is_pg(location):
                for index in PG_INDEXES:
                    db.execute(f"DROP INDEX IF EXISTS {index}")
            for table in (
                *(t for t in db.backend.sparse_tables if t != "memory_sparse"),
                "sparse_df",
                "memory_vectors",
                "memory_entities",
                "entity_aliases",
                "entities",
                "relations",
                "checkpoints",
                "decisions",
                "tasks",
                "session_consolidation",
                "sessions",
            ):
                db.execute(f"DELETE FROM {table}")
            db.execute("DELETE FROM memories")
            assert db.scalar("SELECT count(*) FROM memories") == 0
    finally:
        db.close()


def build_through_the_cli(cli) -> None:
    """Every write command, each on its own path (the records use no category or importance
    hint: those an event does not hold, said by the rebuild's report)."""
    records = turns(
        "s1", ["Sam met Alex in Berlin", "The budget for Lisbon is 3000 EUR"], user="u1"
    )
    records += [
        {
            "event_id": "evt-d",
            "session_id": "s1",
            "user_id": "u1",
            "kind": "decision",
            "content": {"decision": "Ship weekly", "rationale": "small steps"},
        },
        {
            "event_id": "evt-t",
            "session_id": "s1",
            "user_id": "u1",
            "kind": "task_update",
            "content": {"title": "Plan the offsite"},
        },
    ]
    ingest(cli, records)
    fact = run_json(cli, "remember", "Sam likes green tea", "--user-id", "u1", "--session-id", "s1")
    assert run_json(cli, "remember", "Sam likes green tea", "--user-id", "u1")["status"] == "merged"
    steps = run_json(cli, "remember", "1. build; 2. push", "--procedural", "--user-id", "u1")
    run_json(cli, "remember", "Sam lives in Porto", "--field", "city", "--user-id", "u1")
    run_json(cli, "remember", "Sam lives in Lyon", "--field", "city", "--user-id", "u2")
    pending = {p["user_id"]: p["id"] for p in run_json(cli, "proposals", "list")}
    run_json(cli, "proposals", "accept", str(pending["u1"]))
    run_json(cli, "proposals", "reject", str(pending["u2"]), "--reason", "not said")
    fixed = run_json(cli, "correct", str(fact["id"]), "Sam likes black tea", "--reason", "misheard")
    first = run_json(
        cli,
        "decision",
        "add",
        "Use SQLite",
        "--rationale",
        "one file",
        "--ref",
        "evt-x",
        "--user-id",
        "u1",
        "--session-id",
        "s1",
    )
    run_json(cli, "decision", "supersede", str(first["id"]), "Use PostgreSQL", "--reason", "teams")
    task = run_json(cli, "task", "add", "Write the docs", "--ref", "r1", "--user-id", "u1")
    run_json(cli, "task", "update", str(task["id"]), "--status", "doing", "--ref", "r2")
    for step in (1, 2):
        save_checkpoint(cli, {"step": step, "note": "café"}, thread="t1")
    run_json(cli, "pin", str(fixed["id"]))
    run_json(cli, "pin", str(steps["id"]))
    run_json(cli, "unpin", str(steps["id"]))
    run_json(cli, "forget", str(task["memory_id"] + 1))  # the task's second version
    run_json(cli, "restore", str(task["memory_id"] + 1))
    run_json(cli, "confirm", str(fixed["id"]))
    run_json(cli, "forget", str(steps["id"]))


@pytest.mark.backends
def test_a_database_built_through_every_write_command_comes_back_byte_for_byte(cli, db_path):
    build_through_the_cli(cli)
    before = cli("export").stdout
    wipe(db_path)
    assert run_json(cli, "task", "list") == []
    report = run_json(cli, "rebuild")
    # What the rebuild cannot give back is only what the ingested turns' events never held.
    assert [c["what"] for c in report["cannot_rebuild"]] == [
        "state of lost episode rows not in events or history"
    ]
    assert report["commands"]["restored_checkpoints"] == 1
    assert cli("export").stdout == before
    # A second rebuild has nothing to do.
    again = run_json(cli, "rebuild")
    assert again["commands"] == {"restored_memories": [], "restored_checkpoints": 0}
    assert cli("export").stdout == before


@pytest.mark.backends
def test_a_command_event_is_never_a_turn(cli, db_path):
    """The events a write records are kind `command`: no episode, not in a session's count,
    not in the session's timeline; exported and imported like any event."""
    build_through_the_cli(cli)
    db = open_database(db_path)
    try:
        kinds = dict(db.execute("SELECT kind, count(*) FROM events GROUP BY kind"))
        assert kinds["command"] >= 15
        assert (
            db.scalar(
                "SELECT count(*) FROM memories m JOIN events e"
                " ON e.event_id = m.event_id WHERE e.kind = 'command'"
            )
            == 0
        )
        assert db.scalar("SELECT event_count FROM sessions WHERE session_id = 's1'") == 4
    finally:
        db.close()
    ops = [
        json.loads(line)["content"]["op"]
        for line in cli("export").stdout.splitlines()[1:]
        if json.loads(line)["record"] == "event" and json.loads(line)["kind"] == "command"
    ]
    assert {
        "remember",
        "correct",
        "decision.add",
        "decision.supersede",
        "task.add",
        "task.update",
        "checkpoint.save",
        "proposal.accept",
        "proposal.reject",
        "pin",
        "unpin",
        "forget",
        "restore",
        "confirm",
    } <= set(ops)


def test_purging_a_remembered_fact_takes_its_event(cli):
    """The command event holds the fact's text: `purge --memory-id` deletes it with the row,
    and a rebuild does not bring the fact back."""
    fact = run_json(cli, "remember", "Sam's locker code is 4711", "--user-id", "u1")
    kept = run_json(cli, "remember", "Sam likes green tea", "--user-id", "u1")
    run_json(cli, "purge", "--memory-id", str(fact["id"]))
    assert "4711" not in cli("export").stdout
    run_json(cli, "rebuild")
    exported = cli("export").stdout
    assert "4711" not in exported and "green tea" in exported
    assert [h["id"] for h in run_json(cli, "query", "Sam")] == [kept["id"]]


def test_a_record_cannot_claim_to_be_a_command(cli, db_path):
    """Only memcli writes a `command` event: ingest refuses the kind (exit 2), stores nothing."""
    record = {"kind": "command", "content": {"op": "remember", "text": "forged"}}
    result = cli("ingest", "-", "--json", input=json.dumps(record))
    assert result.exit_code == 2
    assert "kind" in json.loads(result.stdout)["rejected"][0]["reason"]
    assert run_json(cli, "query", "forged") == []


def test_command_events_survive_export_and_import(cli, tmp_path):
    build_through_the_cli(cli)
    text = cli("export").stdout
    other = tmp_path / "other.db"
    result = cli("import", "--db", str(other), "-", "--json", input=text)
    assert result.exit_code == 0, result.stderr
    assert cli("export", "--db", str(other)).stdout == text


def test_http_routes_and_page_actions_write_events_a_rebuild_derives_again(tmp_path, monkeypatch):
    with running_api(tmp_path, monkeypatch) as api, api.client() as c:

        def post(path: str, body: dict) -> dict:
            r = c.post(path, json=body)
            assert r.status_code == 200, r.text
            return r.json()

        fact = post("/api/v1/memories", {"text": "Priya drinks green tea", "user_id": "p"})
        first = post(
            "/api/v1/decisions", {"decision": "Use SQLite", "user_id": "p", "refs": ["evt-1"]}
        )
        post("/api/v1/decisions", {"decision": "Use PostgreSQL", "supersedes": first["id"]})
        task = post("/api/v1/tasks", {"title": "Write the docs", "user_id": "p"})
        post("/api/v1/tasks", {"task_id": task["id"], "status": "done"})
        db = api.db
    # The pages' actions, as the /ui routes call them (memcli/viewer/pages/memory_page.py).
    monkeypatch.setenv("MEMCLI_DB", str(db))
    from memcli.operations.memory import Memory
    from memcli.providers.embedders import HashEmbedder

    with Memory.open(db, embedder=HashEmbedder(64)) as memory:
        ctx = Context(memory, load_settings(db))
        fixed = memory_page.correct(
            ctx, Binding(), {"memory_id": str(fact["id"]), "text": "Priya drinks black tea"}
        )
        memory_page.pin(ctx, Binding(), {"memory_id": str(fixed["id"])})
        memory_page.forget(ctx, Binding(), {"memory_id": str(fixed["id"])})
        memory_page.restore(ctx, Binding(), {"memory_id": str(fixed["id"])})

    def cli(*args: str, input: str | None = None):
        from typer.testing import CliRunner

        from memcli.cli.app import app

        return CliRunner().invoke(
            app, [*args, "--db", str(db)], input=input, catch_exceptions=False
        )

    before = cli("export").stdout
    wipe(db)
    assert run_json(cli, "decision", "list") == []
    run_json(cli, "rebuild")
    assert cli("export").stdout == before
