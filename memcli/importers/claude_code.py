"""Claude Code transcripts: `~/.claude/projects/<project>/<session>.jsonl`, one JSON object a
line. Lines of `type` user or assistant hold a `message` ({role, content}: a string or typed
blocks); an assistant's `tool_use` blocks are tool calls, a user line's `tool_result` blocks
their results. Each line has its `uuid`, `sessionId`, `timestamp` and `cwd` (the project).
Left out: `thinking` blocks, `isMeta` lines (notices Claude Code writes itself), sidechains
(a subagent's own conversation), slash-command echoes, and `summary` lines (the title).

A text turn's event id is the one `memcli hook record` gives it, so a transcript the hooks
recorded as it ran adds nothing when imported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memcli.importers.files import each_file, find, json_lines, text_of
from memcli.importers.turns import Notes, Turn, agent_event_id, bad, loose_ts

FMT = "claude-code"
PROJECTS = True  # turns name their project: --project selects, and it is their app
DEFAULT_PATH = "~/.claude/projects"
LINE_KEYS = {"uuid", "sessionId", "message", "summary", "leafUuid", "messageId"}
NOISE = ("<command-name>", "<command-message>", "<local-command-", "<command-args>")


def read(path: Path, notes: Notes) -> Iterator[Turn]:
    seen: set[str] = set()  # a resumed session's file starts with copies of the earlier lines
    files = find(path, "*.jsonl", FMT, notes)
    if not files:
        raise bad(FMT, f"no .jsonl transcripts under {path}")
    known = yield from each_file(
        files, lambda file, counts: _file_turns(file, notes, seen, counts), notes,
        "Claude Code transcript")
    if not known:
        raise bad(FMT, f"{path} holds no line of a Claude Code transcript "
                       "(objects with type, uuid, sessionId and message)")


def _file_turns(file: Path, notes: Notes, seen: set[str], counts: dict[str, int],
                ) -> Iterator[Turn]:
    title: str | None = None
    session = file.stem  # Claude Code names a transcript after its session
    joined = 0  # lines without a sessionId, given the file's
    tools: dict[str, str] = {}  # tool_use id -> tool name, for the results
    for _, entry in json_lines(file, FMT, notes):
        kind = entry.get("type")
        if not isinstance(kind, str) or not (LINE_KEYS & entry.keys()):
            continue  # not a transcript line: counted for the file as a whole
        counts["lines"] += 1
        if kind == "summary" and isinstance(entry.get("summary"), str):
            title = title or entry["summary"]
            notes.skip("summary (the title)")
            continue
        if kind not in ("user", "assistant"):
            notes.skip(f"{kind} line")  # file-history-snapshot, system, progress, ...
            continue
        reason = _left_out(entry)
        if reason is not None:
            notes.skip(reason)
            continue
        uuid = entry["uuid"]
        if uuid in seen:
            continue  # a copy of a line already read (a resumed session)
        seen.add(uuid)
        given, where = entry.get("sessionId"), entry.get("cwd")
        if isinstance(given, str) and given:
            session = given
        else:
            joined += 1
        cwd = where if isinstance(where, str) else ""
        base: dict[str, Any] = {"conversation_id": session, "ts": loose_ts(entry.get("timestamp")),
                "title": title, "session_id": session,
                "project": tuple(p for p in (Path(cwd).name, cwd, file.parent.name) if p)}
        message = entry["message"]
        role = message.get("role") or kind
        text = text_of(message.get("content")).strip()
        blocks = message.get("content") if isinstance(message.get("content"), list) else []
        if text.startswith(NOISE):
            notes.skip("slash-command echo")
        elif role in ("user", "assistant") and text:
            yield Turn(message_id=uuid, role=role, text=text,
                       event_id=agent_event_id(session, uuid), **base)
        for block in blocks:
            if isinstance(block, dict):
                turn = _tool_turn(block, uuid, tools, base)
                if turn is not None:
                    yield turn
                elif block.get("type") in ("thinking", "redacted_thinking"):
                    notes.skip("thinking")
    if joined:
        notes.append(f"{file.name}: {joined} line(s) without a sessionId joined the file's "
                     f"session ({session})")


def _left_out(entry: dict[str, Any]) -> str | None:
    """Why a user or assistant line is not imported, or None."""
    if entry.get("isMeta"):
        return "notice Claude Code wrote (isMeta)"
    if entry.get("isSidechain"):
        return "subagent (sidechain) line"
    if not isinstance(entry.get("message"), dict):
        return "line without a message"
    if not isinstance(entry.get("uuid"), str) or not entry["uuid"]:
        return "line without a uuid"
    return None


def _tool_turn(block: dict[str, Any], uuid: str, tools: dict[str, str],
               base: dict[str, Any]) -> Turn | None:
    call_id = block.get("id") if block.get("type") == "tool_use" else block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        return None
    if block.get("type") == "tool_use" and isinstance(block.get("name"), str):
        tools[call_id] = block["name"]
        args = block.get("input") if isinstance(block.get("input"), dict) else {}
        return Turn(message_id=f"{uuid}:{call_id}", role="assistant", kind="tool_call",
                    text=f"{block['name']}({json.dumps(args, ensure_ascii=False)})",
                    extra={"name": block["name"], "args": args, "call_id": call_id}, **base)
    if block.get("type") == "tool_result":
        output = text_of(block.get("content"))
        extra = {"output": output, "call_id": call_id, "is_error": bool(block.get("is_error"))}
        if call_id in tools:
            extra["tool"] = tools[call_id]
        return Turn(message_id=f"{uuid}:{call_id}", role="tool", kind="tool_result",
                    text=output or "(no output)", extra=extra, **base)
    return None
