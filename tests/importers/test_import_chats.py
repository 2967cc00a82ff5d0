"""`memcli import --from chatgpt|claude`: another tool's chat export as events. The files are
small ones written here from the formats' shapes (no real conversations): the kept branch of
an edited ChatGPT message, empty and system turns, non-text parts, bad files; importing twice
adds nothing; a query finds the turns; a secret is redacted as ingest does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.backend import rows

pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]

SECRET = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


def _node(node_id, parent, children, role=None, parts=None, ts=None, content_type="text",
          **extra):
    message = None if role is None else {
        "id": node_id, "author": {"role": role}, "create_time": ts,
        "content": {"content_type": content_type, "parts": parts}, **extra}
    return {"id": node_id, "parent": parent, "children": children, "message": message}


def chatgpt_export() -> list[dict]:
    """One conversation whose second user message was edited: `u2old` and its answer are on
    the branch not kept; `current_node` ends the kept one."""
    mapping = {
        "root": _node("root", None, ["sys"]),
        "sys": _node("sys", "root", ["u1"], "system", ["You are a helpful assistant."], 1.0),
        "u1": _node("u1", "sys", ["a1"], "user", ["which teapot suits oolong?"], 1700000000.0),
        "a1": _node("a1", "u1", ["u2old", "u2"], "assistant", ["a yixing clay teapot"],
                    1700000010.5),
        "u2old": _node("u2old", "a1", ["a2old"], "user", ["and for pu-erh? (first try)"],
                       1700000020.0),
        "a2old": _node("a2old", "u2old", [], "assistant", ["the abandoned answer"],
                       1700000030.0),
        "u2": _node("u2", "a1", ["img"], "user", ["and for puerh tea, which kettle?"],
                    1700000040.0),
        "img": _node("img", "u2", ["blank"], "user",
                     [{"content_type": "image_asset_pointer", "asset_pointer": "file-x"},
                      {"name": "kettle.png"}], 1700000045.0, "multimodal_text"),
        "blank": _node("blank", "img", ["a2"], "assistant", [""], 1700000047.0),
        "a2": _node("a2", "blank", [], "assistant", [f"a gooseneck kettle; token {SECRET}"],
                    1700000050.0),
    }
    return [{"title": "Tea gear", "create_time": 1700000000.0, "conversation_id": "conv-gpt-1",
             "mapping": mapping, "current_node": "a2"}]


def claude_export() -> list[dict]:
    return [{
        "uuid": "conv-claude-1", "name": "Garden", "created_at": "2024-03-01T09:00:00Z",
        "chat_messages": [
            {"uuid": "m1", "sender": "human", "text": "when do I plant tomatoes?",
             "content": [{"type": "text", "text": "when do I plant tomatoes?"}],
             "created_at": "2024-03-01T09:00:01.000000Z"},
            {"uuid": "m2", "sender": "assistant", "text": "",
             "content": [{"type": "text", "text": ""}], "created_at": "2024-03-01T09:00:02Z"},
            {"uuid": "m3", "sender": "assistant", "text": "after the last frost, in may",
             "content": [{"type": "tool_use", "name": "search"},
                         {"type": "text", "text": "after the last frost, in may"}],
             "created_at": "2024-03-01T09:00:03+00:00"},
        ]}]


def _events(db_path):
    return rows(db_path, "SELECT event_id, ts, actor_type, session_id, user_id, app_id, content "
                         "FROM events ORDER BY ts, seq")


def test_chatgpt_keeps_the_branch_chosen_and_its_text_turns(cli, db_path, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(chatgpt_export()))
    result = cli("import", "--from", "chatgpt", str(path), "--user-id", "ann", "--app-id", "tea",
                 "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["added"], report["skipped"], report["conversations"]) == (5, 0, 1)
    events = _events(db_path)
    texts = [json.loads(e[6])["text"] for e in events]
    assert texts[:3] == ["which teapot suits oolong?", "a yixing clay teapot",
                         "and for puerh tea, which kettle?"]
    assert texts[3] == "[attachment: kettle.png]"  # the image part left out, its name kept
    assert texts[4].startswith("a gooseneck kettle") and len(texts) == 5
    assert [e[2] for e in events] == ["human", "agent", "human", "human", "agent"]
    assert [e[1] for e in events][:2] == ["2023-11-14T22:13:20.000000Z",
                                          "2023-11-14T22:13:30.500000Z"]
    assert {e[3:6] for e in events} == {("chatgpt:conv-gpt-1", "ann", "tea")}
    assert "abandoned" not in json.dumps(texts) and "helpful" not in json.dumps(texts)


def test_report_counts_the_turns_written(cli, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(chatgpt_export()))
    report = json.loads(cli("import", "--from", "chatgpt", str(path), "--json").stdout)
    assert report["added"] == 5 and report["counts"]["events"] == {"added": 5, "skipped": 0}


def test_claude_turns_with_roles_times_and_session(cli, db_path, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(claude_export()))
    result = cli("import", "--from", "claude", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    events = _events(db_path)
    assert [(e[1], e[2], json.loads(e[6])["text"]) for e in events] == [
        ("2024-03-01T09:00:01.000000Z", "human", "when do I plant tomatoes?"),
        ("2024-03-01T09:00:03.000000Z", "agent", "after the last frost, in may"),
    ]
    assert {e[3] for e in events} == {"claude:conv-claude-1"}


@pytest.mark.parametrize("fmt, export", [("chatgpt", chatgpt_export), ("claude", claude_export)])
def test_importing_twice_adds_nothing(cli, db_path, tmp_path, fmt, export):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(export()))
    first = json.loads(cli("import", "--from", fmt, str(path), "--json").stdout)
    again = cli("import", "--from", fmt, str(path), "--json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["added"] == 0
    assert json.loads(again.stdout)["skipped"] == first["added"] > 0
    assert len(_events(db_path)) == first["added"]


def test_a_query_finds_imported_turns_and_a_secret_is_redacted(cli, db_path, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(chatgpt_export()))
    report = json.loads(cli("import", "--from", "chatgpt", str(path), "--json").stdout)
    assert [r["kinds"] for r in report["redacted"]] == [["github_token"]]
    hits = json.loads(cli("query", "gooseneck kettle", "--json").stdout)
    found = [h for h in hits if "gooseneck" in h["text"]]
    assert found and found[0]["event_id"] == report["redacted"][0]["event_id"]
    stored = json.dumps(rows(db_path, "SELECT content FROM events"))
    assert SECRET not in stored and "[REDACTED:" in stored


@pytest.mark.parametrize("body, says", [
    (b"not json at all", "not JSON"),
    (b'{"title": "x"}', "mapping is not an object"),  # one conversation, as exporters save it
    (b'[{"title": "x", "mapping": []}]', "mapping is not an object"),
    (b'[{"id": "c", "mapping": {}, "current_node": "gone"}]', "lacks"),
    (b'["\xff\xfe tea"]', "not UTF-8"),
])
def test_a_bad_chatgpt_file_is_one_line_exit_2(cli, db_path, tmp_path, body, says):
    path = tmp_path / "conversations.json"
    path.write_bytes(body)
    result = cli("import", "--from", "chatgpt", str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith("memcli: error: ") and says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_bad_claude_file_and_an_unknown_format_are_refused(cli, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([{"uuid": "c", "chat_messages": [
        {"uuid": "m", "sender": "human", "text": "hi", "created_at": "yesterday"}]}]))
    result = cli("import", "--from", "claude", str(path))
    assert result.exit_code == 2 and "not an ISO 8601 time" in result.stderr
    result = cli("import", "--from", "gemini", str(path))
    assert result.exit_code == 2 and "chatgpt, claude" in result.stderr


def test_user_and_app_flags_are_for_chat_exports_only(cli, tmp_path):
    path = tmp_path / "memory.jsonl"
    path.write_text("")
    result = cli("import", str(path), "--user-id", "ann")
    assert result.exit_code == 2 and "only with --from" in result.stderr


FIXTURES = Path(__file__).parents[1] / "fixtures" / "imports"


def test_the_awkward_chatgpt_export_and_a_conversation_without_current_node(cli, db_path):
    result = cli("import", "--from", "chatgpt", str(FIXTURES / "chatgpt" / "conversations.json"),
                 "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["added"] == 7
    by_session: dict[str, list[str]] = {}
    for event in _events(db_path):
        by_session.setdefault(event[3], []).append(json.loads(event[6])["text"])
    assert by_session["chatgpt:gpt-branched"] == [
        "which kettle for green tea?", "a variable temperature kettle", "and which one is quiet?",
        "here is my counter\n[attachment: counter.jpg]",  # the file named, the empty turn gone
        "a gooseneck kettle with a slow boil mode"]
    # no current_node: the branch of the newest message, said on stderr, not nothing silently
    assert by_session["chatgpt:gpt-no-current"] == ["best water for gyokuro?",
                                                    "soft water at sixty degrees"]
    assert "conversation 2 (No current node) names no current_node" in result.stderr


def test_the_claude_export_with_an_attachment_and_an_empty_turn(cli, db_path):
    result = cli("import", "--from", "claude", str(FIXTURES / "claude" / "conversations.json"),
                 "--json")
    assert result.exit_code == 0, result.stderr
    assert [json.loads(e[6])["text"] for e in _events(db_path)] == [
        "my sourdough starter smells of acetone\n[attachment: starter-log.txt]",
        "It is hungry: feed it twice a day."]
