"""Decisions and todos that `consolidate` extracts reach the ledger: `decision list`,
`task list`, and a bundle's decision ledger and task state.

Every model reply comes from the scripted HTTP stub through the real `openai` client."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import NO_SPARSE_CONFIG, use_stub_model
from tests.support.lifecycle import conversation, extraction
from tests.support.records import ndjson

DECISION = "Priya decided to use Postgres for the billing service."
TODO = "Priya will send the rota to the team."

# SQLite and PostgreSQL (tests/support/backend.py)
pytestmark = pytest.mark.backends


@pytest.fixture
def lcli(cli, monkeypatch, tmp_path, stub):
    use_stub_model(monkeypatch, tmp_path, stub, NO_SPARSE_CONFIG)
    return cli


def consolidate_one(lcli, stub, **lists) -> dict:
    records = conversation(
        "s1", ["For billing we go with Postgres.", "I'll send the rota to the team."]
    ) + conversation("s2", ["Hello again!"], day=2)
    assert lcli("ingest", "-", input=ndjson(records)).exit_code == 0
    stub.enqueue_json(extraction("Priya chose a database and promised the rota.", **lists))
    out = lcli("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    return json.loads(out.stdout)


def test_a_consolidated_decision_and_todo_reach_the_ledger_and_the_bundle(lcli, stub):
    report = consolidate_one(lcli, stub, decisions=[DECISION], todos=[TODO])
    added = {a["kind"]: a for a in report["sessions"][0]["added"]}
    assert "decision_id" in added["decision"] and "task_id" in added["task"]

    decisions = json.loads(lcli("decision", "list", "--user", "priya", "--json").stdout)
    assert [d["decision"] for d in decisions] == [DECISION]
    assert decisions[0]["session_id"] == "s1" and decisions[0]["refs"][0].startswith("mem:")
    tasks = json.loads(lcli("task", "list", "--user", "priya", "--json").stdout)
    assert [(t["title"], t["status"]) for t in tasks] == [(TODO, "open")]

    bundle = json.loads(lcli("acb", "build", "--user", "priya", "--json").stdout)
    sections = {s["name"]: s for s in bundle["sections"]}
    ledger_text = " ".join(i["text"] for i in sections["decision_ledger"]["items"])
    assert "Postgres for the billing service" in ledger_text
    task_text = " ".join(i["text"] for i in sections["task_state"]["items"])
    assert "send the rota" in task_text


def test_a_decision_already_in_the_ledger_is_not_added_twice(lcli, stub):
    made = lcli("decision", "add", DECISION, "--user", "priya", "--json")
    assert made.exit_code == 0, made.stderr
    first = json.loads(made.stdout)
    report = consolidate_one(lcli, stub, decisions=[DECISION])
    session = report["sessions"][0]
    assert [m["into"] for m in session["merged"]] == [first["memory_id"]]
    assert not [a for a in session["added"] if a["kind"] == "decision"]
    decisions = json.loads(lcli("decision", "list", "--user", "priya", "--json").stdout)
    assert [d["id"] for d in decisions] == [first["id"]]
