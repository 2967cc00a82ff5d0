"""Shared by the tests of the Agent Memory System PRD's acceptance scenarios
(tests/retrieval/test_prd_scenarios.py, tests/retrieval/test_prd_scenarios_guards.py): the
CLI's JSON, a bundle's sections and items, the onboarding records of scenario A1."""

from __future__ import annotations

import json

from memcli.store.opener import open_database
from tests.support.records import ndjson

API_KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # the shape of an OpenAI key


def run_json(cli, *args, input=None):
    result = cli(*args, "--json", input=input)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def ingest(cli, records: list[dict]) -> dict:
    """`memcli ingest -` of these records; its report."""
    return run_json(cli, "ingest", "-", input=ndjson(records))


def save_checkpoint(cli, state: dict, thread: str = "s1") -> dict:
    """`memcli checkpoint save -` of this state for user u1 and `thread`."""
    return run_json(
        cli,
        "checkpoint",
        "save",
        "-",
        "--user-id",
        "u1",
        "--thread-id",
        thread,
        input=json.dumps(state),
    )


def bundle(cli, *args: str) -> dict:
    return run_json(cli, "acb", "build", "--no-track", *args)


def section(acb: dict, name: str) -> dict:
    return next(s for s in acb["sections"] if s["name"] == name)


def items(acb: dict, name: str) -> list[dict]:
    return section(acb, name)["items"]


def texts(acb: dict) -> str:
    return "\n".join(i.get("text", "") for s in acb["sections"] for i in s["items"])


def rows(db_path, sql: str, params: tuple = ()) -> list[tuple]:
    db = open_database(db_path)
    try:
        return [tuple(r) for r in db.execute(sql, params)]
    finally:
        db.close()


def ev(event_id: str, kind: str, content: dict, session: str = "s1", **extra) -> dict:
    return {
        "event_id": event_id,
        "session_id": session,
        "user_id": "u1",
        "kind": kind,
        "content": content,
        **extra,
    }


def _file_read(call_id: str, result_id: str, path: str, text: str) -> list[dict]:
    """An agent's read_file call and the tool's result."""
    return [
        ev(
            call_id,
            "tool_call",
            {"name": "read_file", "args": {"path": path}},
            actor={"type": "agent", "id": "coder"},
        ),
        ev(
            result_id,
            "tool_result",
            {"tool": "fs.read_file", "path": path, "text": text},
            actor={"type": "tool"},
        ),
    ]


ONBOARDING = [
    ev("a1-1", "message", {"text": "what this project for?"}),
    ev(
        "a1-2",
        "tool_call",
        {"name": "list_root", "args": {}},
        actor={"type": "agent", "id": "coder"},
    ),
    ev(
        "a1-3",
        "tool_result",
        {"tool": "list_root", "text": "README.md\npackage.json\nsrc/"},
        actor={"type": "tool"},
    ),
    *_file_read(
        "a1-4", "a1-5", "README.md", "# Ledgerly\nA billing service that issues invoices.\n"
    ),
    *_file_read("a1-6", "a1-7", "package.json", '{"name": "ledgerly", "main": "src/index.js"}'),
    ev(
        "a1-8",
        "message",
        {"text": "It is Ledgerly, a billing service issuing invoices."},
        actor={"type": "assistant"},
    ),
    ev(
        "a1-9",
        "decision",
        {
            "decision": "Project purpose hypothesis v0.1: a billing service",
            "rationale": "README.md and package.json say so",
        },
        refs=["a1-5", "a1-7"],
    ),
]
