"""`memcli import --from` on real files: exports and transcripts written by ChatGPT, Claude
Code and Codex, from the test data of public projects (tests/fixtures/real/README.md names each
file's source, commit and licence). Each is imported into a fresh database: its events by kind
and what was left out, by reason, are what the file holds; importing again adds nothing.
bench/results/importers-real.md lists the same numbers."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.support.backend import rows

pytestmark = [pytest.mark.usefixtures("fast_cli")]

REAL = Path(__file__).parents[1] / "fixtures" / "real"

# file: (format, chat turns, tool calls, tool results, left out by reason)
EXPECTED = {
    "chatgpt/image-generation.json": (
        "chatgpt",
        4,
        2,
        6,
        {"empty tool result": 4, "reasoning": 4, "empty": 1, "system or hidden": 1},
    ),
    "chatgpt/thinking-summaries.json": (
        "chatgpt",
        4,
        0,
        0,
        {"reasoning": 6, "empty tool call": 2, "empty tool result": 2},
    ),
    "claude-code/4c2ddfdc-b619-4525-8d03-1950fb1b0257.jsonl": (
        "claude-code",
        7,
        6,
        6,
        {"file-history-snapshot line": 6},
    ),
    "claude-code/agent-50243ee8.jsonl": ("claude-code", 0, 0, 0, {"subagent (sidechain) line": 2}),
    "claude-code/edge_cases.jsonl": (
        "claude-code",
        6,
        3,
        1,
        {
            "line not a JSON object": 3,
            "slash-command echo": 2,
            "line without a message": 1,
            "summary (the title)": 1,
        },
    ),
    "claude-code/incremental-simple-turn-2.jsonl": (
        "claude-code",
        6,
        1,
        0,
        {
            "summary (the title)": 15,
            "file-history-snapshot line": 3,
            "thinking": 3,
            "system line": 2,
        },
    ),
    "claude-code/representative_messages.jsonl": (
        "claude-code",
        7,
        2,
        2,
        {"summary (the title)": 1},
    ),
    "codex/rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl": (
        "codex",
        0,
        3,
        3,
        {"reasoning": 2, "event_msg line": 1},
    ),
    "codex/rollout-44444444-4444-4444-8444-444444444444.jsonl": ("codex", 2, 0, 0, {}),
    "codex/turn-1.jsonl": (
        "codex",
        2,
        0,
        0,
        {
            "event_msg line": 6,
            "context Codex sends": 1,
            "developer message": 1,
            "reasoning": 1,
            "turn_context line": 1,
        },
    ),
    "codex/turn-2.jsonl": (
        "codex",
        4,
        0,
        0,
        {
            "event_msg line": 12,
            "context Codex sends": 2,
            "developer message": 2,
            "reasoning": 2,
            "turn_context line": 2,
        },
    ),
}


def test_every_real_file_is_listed():
    files = {f"{p.parent.name}/{p.name}" for p in REAL.glob("*/*") if p.suffix != ".md"}
    assert files == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_real_file_imports_as_its_messages_say(cli, db_path, name):
    fmt, chat, calls, results, left_out = EXPECTED[name]
    result = cli("import", "--from", fmt, str(REAL / name), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    kinds = Counter(kind for (kind,) in rows(db_path, "SELECT kind FROM events"))
    assert (kinds["message"], kinds["tool_call"], kinds["tool_result"]) == (chat, calls, results)
    assert report["left_out"] == left_out and report["added"] == chat + calls + results
    again = json.loads(cli("import", "--from", fmt, str(REAL / name), "--json").stdout)
    assert (again["added"], again["skipped"]) == (0, report["added"])


@pytest.mark.parametrize("name", ["image-generation.json", "thinking-summaries.json"])
def test_every_chatgpt_message_kept_is_an_event_or_counted(cli, db_path, name):
    data = json.loads((REAL / "chatgpt" / name).read_text())
    node, on_branch = data["current_node"], 0
    while node is not None:
        on_branch += data["mapping"][node].get("message") is not None
        node = data["mapping"][node].get("parent")
    report = json.loads(
        cli("import", "--from", "chatgpt", str(REAL / "chatgpt" / name), "--json").stdout
    )
    assert report["added"] + sum(report["left_out"].values()) == on_branch


def test_a_chatgpt_tool_call_and_its_result_from_a_real_file(cli, db_path):
    cli("import", "--from", "chatgpt", str(REAL / "chatgpt" / "image-generation.json"))
    events = [
        (kind, actor, json.loads(content))
        for kind, actor, content in rows(
            db_path, "SELECT kind, actor_type, content FROM events ORDER BY seq"
        )
    ]
    calls = [c for k, _, c in events if k == "tool_call"]
    assert [(c["name"], c["args"]) for c in calls] == [
        ("internal_tool", "code 1"),
        ("internal_tool", "code 2"),
    ]
    last = [c for k, _, c in events if k == "tool_result"][-1]
    assert last["tool"] == "internal_tool" and last["call_id"] == calls[-1]["call_id"]
    assert {a for k, a, _ in events if k == "message"} == {"human"}


def test_the_exporters_files_share_an_id_and_keep_both_conversations(cli, db_path):
    """Both files say conversation `fixture`, messages `m-n1`...: the second file's different
    turns are added, not taken for the first's."""
    for name in ("image-generation.json", "thinking-summaries.json"):
        assert cli("import", "--from", "chatgpt", str(REAL / "chatgpt" / name)).exit_code == 0
    contents = [json.loads(c) for (c,) in rows(db_path, "SELECT content FROM events")]
    texts = {c.get("text") or c.get("excerpt_text") for c in contents}
    assert {"answer 1", "answer 2", "question 4", "tool text 4"} <= texts


def test_a_folder_of_real_transcripts_in_one_import(cli, db_path):
    result = cli("import", "--from", "claude-code", str(REAL / "claude-code"), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    by_file = sum(e[1] + e[2] + e[3] for n, e in EXPECTED.items() if n.startswith("claude-code/"))
    assert report["added"] == by_file
