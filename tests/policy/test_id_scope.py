"""Commands that act on one id stay in the caller's tenant.

For every command that takes an id, a row is made in one tenant and the command is run as each
of the two others: it answers exactly as for an id that does not exist (exit 1, the same
message) and no table changes; run as the row's own tenant, it works. Lifecycle jobs and id
commands given a database path that does not exist say so and create nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from memcli.cli.app import app
from tests.support.backend import rows
from tests.support.cli import CliRunner

pytestmark = [pytest.mark.backends, pytest.mark.usefixtures("fast_cli")]

TENANTS = ("acme", "default", "other")  # "default": no MEMCLI_TENANT at all
MISSING = 987654
# Every table a command on one id could change (the event log is append-only).
TABLES = ("memories", "history", "decisions", "tasks", "proposals", "checkpoints", "relations",
          "events", "artifacts")


@pytest.fixture
def run(db_path, monkeypatch):
    """The real CLI as `tenant` (None: the configured default)."""
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    monkeypatch.setenv("MEMCLI_DB", str(db_path))
    runner = CliRunner()

    def invoke(tenant: str | None, *args: str, input: str | None = None):
        env = {"MEMCLI_TENANT": tenant if tenant != "default" else None}
        return runner.invoke(app, list(args), input=input, env=env, catch_exceptions=False)

    invoke.db = db_path  # type: ignore[attr-defined]
    return invoke


def made(run, tenant: str, *args: str, input: str | None = None) -> dict:
    result = run(tenant, *args, "--json", input=input)
    assert result.exit_code == 0, (args, result.stderr)
    return json.loads(result.stdout)


def a_fact(run, tenant: str) -> str:
    return str(made(run, tenant, "remember", f"Quokkas of {tenant} like tea.")["id"])


def a_forgotten_fact(run, tenant: str) -> str:
    fact = a_fact(run, tenant)
    made(run, tenant, "forget", fact)
    return fact


def a_pinned_fact(run, tenant: str) -> str:
    fact = a_fact(run, tenant)
    made(run, tenant, "pin", fact)
    return fact


def a_decision(run, tenant: str) -> str:
    return str(made(run, tenant, "decision", "add", "Use SQLite for the store.")["id"])


def a_task(run, tenant: str) -> str:
    return str(made(run, tenant, "task", "add", "Ship the quokka release")["id"])


def an_artifact(run, tenant: str) -> str:
    output = "line of tool output\n" * 5000  # over the 64 KB excerpt: kept as an artifact
    record = {"kind": "tool_result", "session_id": "s1", "event_id": f"tool-{tenant}",
              "content": {"output": output}}
    made(run, tenant, "ingest", "-", input=json.dumps(record))
    found = rows(run.db, "SELECT artifact_id FROM artifacts a JOIN events e"
                 " ON e.event_id = a.event_id WHERE e.tenant_id = ?", (tenant,))
    return found[0][0]


def an_artifact_event(run, tenant: str) -> str:
    record = {"kind": "artifact", "session_id": "s1", "event_id": f"doc-{tenant}",
              "text": "the design doc, v3"}
    made(run, tenant, "ingest", "-", input=json.dumps(record))
    return f"doc-{tenant}"


def a_proposal(run, tenant: str) -> str:
    from memcli import Memory
    from memcli.store.proposals_sql import insert_proposal

    with Memory.open(run.db) as memory, memory.db.transaction():
        return str(insert_proposal(memory.db, {
            "tenant_id": tenant, "user_id": "priya", "field": "city", "value": "Porto",
            "text": "Priya lives in Porto.", "origin": "consolidate", "status": "pending",
            "created_at": "2025-01-01T00:00:00Z", "expires_at": "2999-01-01T00:00:00Z"}))


def a_checkpoint(run, tenant: str) -> str:
    made(run, tenant, "checkpoint", "save", "--user", "priya", "--thread", f"t-{tenant}",
         "--data", '{"step": 3}')
    return f"t-{tenant}"


@dataclass(frozen=True)
class IdCommand:
    name: str
    make: Callable  # (run, tenant) -> the id the command is given
    args: tuple[str, ...]  # "{id}" stands for the id


COMMANDS = (
    IdCommand("forget", a_fact, ("forget", "{id}")),
    IdCommand("restore", a_forgotten_fact, ("restore", "{id}")),
    IdCommand("pin", a_fact, ("pin", "{id}")),
    IdCommand("unpin", a_pinned_fact, ("unpin", "{id}")),
    IdCommand("confirm", a_fact, ("confirm", "{id}")),
    IdCommand("correct", a_fact, ("correct", "{id}", "Quokkas like coffee.")),
    IdCommand("related", a_fact, ("related", "{id}")),
    IdCommand("history", a_fact, ("history", "{id}")),
    IdCommand("artifact", an_artifact, ("artifact", "{id}")),
    IdCommand("artifact-event", an_artifact_event, ("artifact", "{id}")),
    IdCommand("decision-supersede", a_decision,
              ("decision", "supersede", "{id}", "Use PostgreSQL for the store.")),
    IdCommand("task-update", a_task, ("task", "update", "{id}", "--status", "done")),
    IdCommand("proposals-accept", a_proposal, ("proposals", "accept", "{id}")),
    IdCommand("proposals-reject", a_proposal, ("proposals", "reject", "{id}")),
    IdCommand("checkpoint-load", a_checkpoint,
              ("checkpoint", "load", "--user", "priya", "--thread", "{id}")),
)


def snapshot(location) -> dict[str, list]:
    return {t: sorted(rows(location, f"SELECT * FROM {t}"), key=repr) for t in TABLES}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_an_id_of_another_tenant_is_not_found_and_nothing_changes(command, run, db_path):
    owner, *intruders = TENANTS
    for tenant in TENANTS:  # every tenant holds such a row: the intruders' own ids exist too
        if tenant != owner:
            command.make(run, tenant)
    row_id = command.make(run, owner)
    args = [a.replace("{id}", row_id) for a in command.args]
    before = snapshot(db_path)
    for tenant in intruders:
        missing = run(tenant, *[a.replace("{id}", str(MISSING)) for a in command.args])
        assert missing.exit_code == 1, missing.stderr
        result = run(tenant, *args)
        assert result.exit_code == 1, (tenant, result.stdout)
        assert result.stdout == ""
        assert result.stderr == missing.stderr.replace(str(MISSING), row_id), tenant
        assert snapshot(db_path) == before, tenant
    result = run(owner, *args)
    assert result.exit_code == 0, result.stderr


JOBS = (("consolidate",), ("decay",), ("reflect",), ("insights",), ("embed",), ("reindex",),
        ("forget", "1"), ("restore", "1"), ("pin", "1"), ("unpin", "1"), ("confirm", "1"),
        ("correct", "1", "new text"), ("decision", "supersede", "1", "new"),
        ("task", "update", "1", "--status", "done"), ("proposals", "accept", "1"),
        ("proposals", "reject", "1"))


@pytest.mark.sqlite_only
@pytest.mark.parametrize("args", JOBS, ids=" ".join)
def test_a_job_on_a_missing_database_creates_nothing(args, run, tmp_path, db_path):
    del db_path  # a path of its own, in a folder that does not exist either
    missing = tmp_path / "nowhere" / "memory.db"
    result = run(None, *args, "--db", str(missing))
    assert result.exit_code == 1, result.stdout
    assert result.stderr.startswith("memcli: error: no memcli database at ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not missing.exists() and not Path(missing.parent).exists()
