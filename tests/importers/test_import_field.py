"""What importing real exports found (the field test): a ChatGPT message addressed to a tool
is a tool call, not a chat turn, and nothing is left out without a count; one bad
conversation or line leaves out itself, not the export; a file of another format is refused
before a database is created; input is read as a stream within stated limits; Claude Code
lines without a sessionId and links out of the folder; two conversations sharing an id."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from memcli.importers import stream
from tests.support.backend import rows

pytestmark = [pytest.mark.usefixtures("fast_cli")]


def _node(node_id, parent, role=None, content=None, recipient="all", name=None, **meta):
    message = (
        None
        if role is None
        else {
            "id": node_id,
            "author": {"role": role, "name": name},
            "create_time": 1.7e9,
            "content": content,
            "recipient": recipient,
            "metadata": meta,
        }
    )
    return {"id": node_id, "parent": parent, "children": [], "message": message}


def _text(*parts):
    return {"content_type": "text", "parts": list(parts)}


def tool_conversation(conv_id="conv-tools", texts=("draft the tea guide", "Done.")):
    """A conversation as ChatGPT exports one with canvas, file search and a code cell: the
    messages to a tool carry `recipient`, the tools answer as `author.role` tool."""
    doc = {"name": "Tea guide", "type": "document", "content": "Oolong: 90 degrees."}
    chain = [
        ("u1", "user", _text(texts[0]), "all", None),
        (
            "t1",
            "assistant",
            {"content_type": "thoughts", "thoughts": [{"summary": "plan"}]},
            "all",
            None,
        ),
        (
            "c1",
            "assistant",
            {"content_type": "code", "language": "json", "text": json.dumps(doc)},
            "canmore.create_textdoc",
            None,
        ),
        (
            "r1",
            "tool",
            _text("Successfully created text document 'Tea guide'"),
            "all",
            "canmore.create_textdoc",
        ),
        ("c2", "assistant", _text('{"queries": ["steeping times"]}'), "file_search.msearch", None),
        ("r2", "tool", _text(""), "all", "file_search"),  # an empty result
        (
            "c3",
            "assistant",
            {"content_type": "code", "language": "python", "text": "print(90 - 5)"},
            "python",
            None,
        ),
        ("r3", "tool", {"content_type": "execution_output", "text": "85"}, "all", "python"),
        ("s1", "system", _text("You are ChatGPT"), "all", None),
        ("a1", "assistant", _text(texts[1]), "all", None),
    ]
    mapping = {"root": _node("root", None)}
    parent = "root"
    for node_id, role, content, recipient, name in chain:
        mapping[node_id] = _node(node_id, parent, role, content, recipient, name)
        parent = node_id
    return {
        "conversation_id": conv_id,
        "title": "Tea guide",
        "mapping": mapping,
        "current_node": parent,
    }


def _events(db_path):
    return [
        (kind, actor, json.loads(content))
        for kind, actor, content in rows(
            db_path, "SELECT kind, actor_type, content FROM events ORDER BY ts, seq"
        )
    ]


def _write(tmp_path, data, name="conversations.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.mark.backends
def test_chatgpt_messages_to_a_tool_are_tool_calls_and_results(cli, db_path, tmp_path):
    path = _write(tmp_path, [tool_conversation()])
    result = cli("import", "--from", "chatgpt", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    events = _events(db_path)
    assert [(k, a) for k, a, _ in events] == [
        ("message", "human"),
        ("tool_call", "agent"),
        ("tool_result", "tool"),
        ("tool_call", "agent"),
        ("tool_call", "agent"),
        ("tool_result", "tool"),
        ("message", "agent"),
    ]
    canvas, made = events[1][2], events[2][2]
    assert canvas["name"] == "canmore.create_textdoc" and canvas["args"]["name"] == "Tea guide"
    assert made["tool"] == "canmore.create_textdoc" and made["call_id"] == canvas["call_id"]
    code, output = events[4][2], events[5][2]
    assert (code["name"], code["args"], code["language"]) == ("python", "print(90 - 5)", "python")
    assert output["excerpt_text"] == "85" and output["call_id"] == code["call_id"]
    chat = [c["text"] for k, _, c in events if k == "message"]
    assert chat == ["draft the tea guide", "Done."]  # no raw tool JSON among the chat turns
    report = json.loads(result.stdout)
    assert report["left_out"] == {"empty tool result": 1, "reasoning": 1, "system or hidden": 1}
    assert (
        "chatgpt: left out 3: 1 empty tool result, 1 reasoning, 1 system or hidden" in result.stderr
    )


def test_a_bad_conversation_is_left_out_with_a_note_and_the_rest_imported(cli, db_path, tmp_path):
    broken = tool_conversation("conv-broken")
    broken["current_node"] = "gone"
    export = [
        tool_conversation("conv-1"),
        broken,
        {"title": "no mapping"},
        tool_conversation("conv-2"),
    ]
    result = cli("import", "--from", "chatgpt", str(_write(tmp_path, export)), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["conversations"] == 2 and report["added"] == 14
    assert report["left_out"]["unreadable conversation"] == 2
    assert (
        "conversation 2 (Tea guide) left out: conversation 2 names a node 'gone'" in result.stderr
    )
    assert "conversation 3 (no mapping) left out" in result.stderr


def test_a_bad_line_of_a_transcript_is_left_out_and_the_rest_imported(cli, db_path, tmp_path):
    folder = tmp_path / "projects" / "p"
    folder.mkdir(parents=True)
    line = {
        "type": "user",
        "uuid": "u1",
        "sessionId": "s1",
        "cwd": "/p",
        "message": {"role": "user", "content": "keep me"},
    }
    (folder / "s1.jsonl").write_text(
        json.dumps(line)
        + "\n{cut off\n"
        + json.dumps({**line, "uuid": "u2", "message": {"role": "user", "content": "and me"}})
        + "\n"
    )
    result = cli("import", "--from", "claude-code", str(folder), "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["added"] == 2
    assert "s1.jsonl: 1 line(s) not a JSON object were left out" in result.stderr


@pytest.mark.parametrize("fmt", ["mem0", "codex", "claude-code", "claude", "basic-memory"])
def test_a_file_of_another_format_is_refused_before_a_database_exists(cli, db_path, tmp_path, fmt):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([tool_conversation()], indent=2))  # as ChatGPT writes it
    result = cli("import", "--from", fmt, str(path))
    assert result.exit_code == 2, result.stdout
    assert result.stderr.startswith(f"memcli: error: not a {fmt} export")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not Path(db_path).exists()
    if fmt in ("mem0", "claude"):  # the hint names the format it looks like
        assert "give --from chatgpt" in result.stderr


def test_an_endless_input_is_a_one_line_error(cli, db_path):
    result = cli("import", "--from", "chatgpt", "/dev/zero")
    assert result.exit_code == 2
    assert result.stderr.startswith("memcli: error: not a chatgpt export: not JSON")
    assert not Path(db_path).exists()
    result = cli("import", "--from", "mem0", "-", input="\0" * 200_000)  # not copied first
    assert result.exit_code == 2 and "not a mem0 export: not JSON" in result.stderr


def test_an_endless_input_to_a_memcli_import_is_a_one_line_error(cli, db_path):
    result = cli("import", "/dev/zero")
    assert result.exit_code == 2 and "not a memcli export header" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not Path(db_path).exists()


def test_input_past_the_stated_limits_is_a_one_line_error(cli, db_path, tmp_path, monkeypatch):
    conversation = tool_conversation()
    body = json.dumps([conversation] * 40)  # about 100 KB
    monkeypatch.setattr(stream, "MAX_INPUT_BYTES", 50_000)
    result = cli("import", "--from", "chatgpt", "-", input=body)
    assert result.exit_code == 2 and not Path(db_path).exists()
    assert "standard input is larger than" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    monkeypatch.setattr(stream, "MAX_INPUT_BYTES", 10_000_000)
    monkeypatch.setattr(stream, "MAX_ITEM_BYTES", 1_000)  # one conversation is ~2.5 KB
    result = cli("import", "--from", "chatgpt", str(_write(tmp_path, [conversation])))
    assert result.exit_code == 2 and "one item of the chatgpt export is larger" in result.stderr


def test_standard_input_is_read_as_a_stream(cli, db_path):
    body = json.dumps([tool_conversation("a"), tool_conversation("b")])
    result = cli("import", "--from", "chatgpt", "-", "--json", input=body)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["added"] == 14


@pytest.mark.backends
def test_two_conversations_sharing_an_id_keep_all_their_turns(cli, db_path, tmp_path):
    first = tool_conversation("shared", ("which kettle?", "A gooseneck kettle."))
    second = tool_conversation("shared", ("which cup?", "A porcelain cup."))
    path = _write(tmp_path, [first, second, first])  # merged by hand: one of them twice
    report = json.loads(cli("import", "--from", "chatgpt", str(path), "--json").stdout)
    texts = [c.get("text") for k, _, c in _events(db_path) if k == "message"]
    assert Counter(texts) == {
        "which kettle?": 1,
        "A gooseneck kettle.": 1,
        "which cup?": 1,
        "A porcelain cup.": 1,
    }
    # the second adds its two chat turns (its tool turns repeat the first's), the third none
    assert report["added"] == 9 and report["skipped"] == 5 + 7
    again = json.loads(cli("import", "--from", "chatgpt", str(path), "--json").stdout)
    assert again["added"] == 0


def test_a_claude_code_line_without_session_id_joins_its_file_session(cli, db_path, tmp_path):
    folder = tmp_path / "projects" / "-home-ann-tea"
    folder.mkdir(parents=True)
    lines = [
        {
            "type": "user",
            "uuid": "u1",
            "sessionId": "sess-1",
            "cwd": "/home/ann/tea",
            "message": {"role": "user", "content": "first"},
        },
        {
            "type": "assistant",
            "uuid": "a1",
            "cwd": "/home/ann/tea",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "second"}]},
        },
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {}},
    ]
    (folder / "sess-1.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    result = cli("import", "--from", "claude-code", str(tmp_path / "projects"), "--json")
    assert result.exit_code == 0, result.stderr
    assert rows(db_path, "SELECT DISTINCT session_id FROM events") == [("sess-1",)]
    assert "1 line(s) without a sessionId joined the file's session (sess-1)" in result.stderr
    assert json.loads(result.stdout)["left_out"] == {"file-history-snapshot line": 1}


def test_links_out_of_the_folder_are_not_followed(cli, db_path, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    secret = {
        "type": "user",
        "uuid": "x1",
        "sessionId": "other",
        "cwd": "/x",
        "message": {"role": "user", "content": "not under the folder"},
    }
    (outside / "other.jsonl").write_text(json.dumps(secret) + "\n")
    folder = tmp_path / "projects" / "p"
    folder.mkdir(parents=True)
    mine = {
        **secret,
        "uuid": "m1",
        "sessionId": "mine",
        "message": {"role": "user", "content": "under the folder"},
    }
    (folder / "mine.jsonl").write_text(json.dumps(mine) + "\n")
    os.symlink(outside / "other.jsonl", folder / "linked.jsonl")
    os.symlink(outside, tmp_path / "projects" / "linked-folder")
    result = cli("import", "--from", "claude-code", str(tmp_path / "projects"), "--json")
    assert result.exit_code == 0, result.stderr
    texts = [c["text"] for _, _, c in _events(db_path)]
    assert texts == ["under the folder"]
    assert "2 link(s) out of" in result.stderr
