"""`memcli import --from claude-code|codex`: coding agents' transcripts as events. The files
in tests/fixtures/imports/ are written from the formats' public descriptions (no real
sessions): text turns, tool calls and their results, and what is left out (thinking,
reasoning, notices, sidechains, the environment Codex sends, the screen's copies of turns),
a byte that is not UTF-8 and a last line cut mid-write."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.support.backend import rows
from tests.support.cli import imported

pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]

FIXTURES = Path(__file__).parents[1] / "fixtures" / "imports"
CLAUDE = FIXTURES / "claude-code" / "projects"
TEASHOP = CLAUDE / "-home-ann-code-teashop" / "5d2a9c1e-0b7f-4c2e-9a41-3f8e2d6b7c10.jsonl"
CODEX = FIXTURES / "codex" / "sessions"
CODEX_NEW = "0199a2d7-41c4-78b1-b7cc-a45d62a89cd5"


def _events(db_path):
    found = rows(db_path, "SELECT event_id, ts, kind, actor_type, session_id, app_id, content "
                          "FROM events ORDER BY ts, seq")
    return [(*e[:6], json.loads(e[6])) for e in found]


def test_claude_code_turns_tool_calls_and_results(cli, db_path):
    report, stderr = imported(cli, "claude-code", str(CLAUDE))
    assert (report["added"], report["conversations"]) == (11, 2)
    events = _events(db_path)
    assert Counter(e[2] for e in events) == {"message": 7, "tool_call": 2, "tool_result": 2}
    assert {e[5] for e in events} == {"teashop", "garden"}  # the project is the app
    teashop = [e for e in events if e[5] == "teashop"]
    assert {e[4] for e in teashop} == {"5d2a9c1e-0b7f-4c2e-9a41-3f8e2d6b7c10"}
    assert [(e[2], e[3]) for e in teashop[:5]] == [
        ("message", "human"), ("message", "agent"), ("tool_call", "agent"),
        ("tool_result", "tool"), ("tool_call", "agent")]
    assert teashop[0][1] == "2025-09-01T10:00:05.000000Z"
    call, result = teashop[2][6], teashop[3][6]
    assert (call["name"], call["args"]) == ("Read", {
        "file_path": "/home/ann/code/teashop/pages/oolong.tsx"})
    assert result["tool"] == "Read" and "steep={180}" in result["excerpt_text"]
    failing = teashop[5][6]
    assert failing["is_error"] is True and "SteepTimer is not defined" in failing["excerpt_text"]
    texts = json.dumps([e[6] for e in events])
    for left_out in ("private musing", "Caveat", "/clear", "subagent's own chatter"):
        assert left_out not in texts
    assert "[attachment: image]\\nthe timer overlaps" in texts
    assert "caf\\ufffd layout" in texts  # the byte that was not UTF-8, replaced and said
    assert "not UTF-8" in stderr and "1 line(s) not a JSON object" in stderr


def test_a_project_folder_one_file_project_and_app_flags(cli, db_path):
    report, _ = imported(cli, "claude-code", str(CLAUDE), "--project", "garden")
    assert report["added"] == 2 and {e[5] for e in _events(db_path)} == {"garden"}
    report, _ = imported(cli, "claude-code", str(TEASHOP), "--app-id", "shop")
    assert report["added"] == 9
    assert {e[5] for e in _events(db_path)} == {"garden", "shop"}
    result = cli("import", "--from", "claude-code", str(CLAUDE), "--project", "nowhere")
    assert result.exit_code == 0 and "no claude-code turns of project 'nowhere'" in result.stderr


def test_transcript_turns_the_hooks_recorded_are_not_added_again(cli, db_path):
    payload = json.dumps({"session_id": "5d2a9c1e-0b7f-4c2e-9a41-3f8e2d6b7c10",
                          "transcript_path": str(TEASHOP)})
    assert cli("hook", "record", input=payload).exit_code == 0
    assert len(_events(db_path)) == 6  # the text turns (and a slash command import leaves out)
    report, _ = imported(cli, "claude-code", str(TEASHOP))
    assert (report["added"], report["skipped"]) == (4, 5)  # only the tool calls and results

    codex = next(CODEX.rglob(f"*{CODEX_NEW}.jsonl"))
    payload = json.dumps({"session_id": CODEX_NEW, "transcript_path": str(codex)})
    assert cli("hook", "record", input=payload).exit_code == 0
    report, _ = imported(cli, "codex", str(codex))
    assert (report["added"], report["skipped"]) == (4, 2)


def test_codex_rollouts_new_and_old(cli, db_path):
    report, _ = imported(cli, "codex", str(CODEX))
    assert (report["added"], report["conversations"]) == (8, 2)
    events = _events(db_path)
    new = [e for e in events if e[4] == CODEX_NEW]
    assert [(e[2], e[3]) for e in new] == [
        ("message", "human"), ("tool_call", "agent"), ("tool_result", "tool"),
        ("tool_call", "agent"), ("tool_result", "tool"), ("message", "agent")]
    assert new[0][6]["text"] == "why does the matcha checkout round prices wrong?"
    assert new[1][6]["args"] == {"command": ["rg", "round(", "src/checkout"]}
    assert new[2][6]["tool"] == "shell"
    assert new[2][6]["excerpt_text"] == "src/checkout/total.py:12: return round(price * 1.07, 1)\n"
    assert new[3][6]["name"] == "apply_patch" and "Update File" in new[3][6]["args"]
    assert {e[5] for e in new} == {"teashop"} and new[0][1] == "2025-10-29T00:59:40.000000Z"
    old = [e for e in events if e[4] != CODEX_NEW]
    assert [e[6]["text"] for e in old] == ["rename the sencha SKU column",
                                           "Renamed sku_code to sencha_sku in the migration."]
    assert {e[1] for e in old} == {"2025-05-07T17:24:21.123000Z"}  # the session's start
    texts = json.dumps([e[6] for e in events])
    assert "environment_context" not in texts and "developer instructions" not in texts


@pytest.mark.parametrize("fmt, path, count", [("claude-code", CLAUDE, 11),
                                              ("codex", CODEX, 8)])
def test_importing_twice_adds_nothing_and_a_query_finds_the_turns(cli, db_path, fmt, path,
                                                                  count):
    first, _ = imported(cli, fmt, str(path))
    again, _ = imported(cli, fmt, str(path))
    assert (first["added"], again["added"], again["skipped"]) == (count, 0, count)
    assert len(_events(db_path)) == count
    words = {"claude-code": "steeping timer oolong", "codex": "matcha checkout rounds"}[fmt]
    hits = json.loads(cli("query", words, "--json").stdout)
    assert hits and any(w in hits[0]["text"] for w in words.split())


def test_path_left_out_reads_where_the_tool_keeps_its_files(cli, db_path, tmp_path,
                                                            monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    result = cli("import", "--from", "codex")
    assert result.exit_code == 2 and f"no codex files at {tmp_path}/.codex/sessions" \
        in result.stderr
    shutil.copytree(CLAUDE, tmp_path / ".claude" / "projects")
    report, _ = imported(cli, "claude-code")
    assert report["added"] == 11


@pytest.mark.parametrize("args, says", [
    (["claude-code", "/nonexistent/projects"], "neither a file nor a folder"),
    (["codex", "-"], "reads files, not stdin"),
    (["chatgpt"], "--from chatgpt needs PATH"),
    (["mem0", "x.json", "--project", "teashop"], "--project does not apply to --from mem0"),
])
def test_bad_paths_are_one_line_exit_2(cli, args, says):
    result = cli("import", "--from", *args)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("memcli: error: ") and says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_resumed_session_copying_earlier_lines_adds_them_once(cli, db_path, tmp_path):
    project = tmp_path / "projects" / "-home-ann-code-teashop"
    project.mkdir(parents=True)
    lines = TEASHOP.read_bytes().split(b"\n")[:5]  # the summary, notices and the first turns
    (project / "a-first.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    resumed = [line.replace(b"5d2a9c1e-0b7f-4c2e-9a41-3f8e2d6b7c10", b"b-resumed")
               for line in lines]
    (project / "b-resumed.jsonl").write_bytes(b"\n".join(resumed) + b"\n")
    report, _ = imported(cli, "claude-code", str(tmp_path / "projects"))
    assert report["added"] == 2 and report["conversations"] == 1
