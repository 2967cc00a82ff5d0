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

from memcli.importers.files import find, json_lines, text_of
from memcli.importers.turns import Turn, agent_event_id, loose_ts

FMT = "claude-code"
PROJECTS = True  # turns name their project: --project selects, and it is their app
DEFAULT_PATH = "~/.claude/projects"
NOISE = ("<command-name>", "<command-message>", "<local-command-", "<command-args>")


def read(path: Path, notes: list[str]) -> Iterator[Turn]:
    seen: set[str] = set()  # a resumed session's file starts with copies of the earlier lines
    for file in find(path, "*.jsonl", FMT):
        yield from _file_turns(file, notes, seen)


def _file_turns(file: Path, notes: list[str], seen: set[str]) -> Iterator[Turn]:
    lines = [entry for _, entry in json_lines(file, FMT, notes)]
    title = next((e["summary"] for e in lines if e.get("type") == "summary"
                  and isinstance(e.get("summary"), str)), None)
    tools: dict[str, str] = {}  # tool_use id -> tool name, for the results
    for entry in lines:
        if entry.get("type") not in ("user", "assistant") or entry.get("isMeta") \
                or entry.get("isSidechain") or not isinstance(entry.get("message"), dict):
            continue
        uuid = entry.get("uuid")
        if not isinstance(uuid, str) or not uuid or uuid in seen:
            continue
        seen.add(uuid)
        given, where = entry.get("sessionId"), entry.get("cwd")
        session = given if isinstance(given, str) and given else file.stem
        cwd = where if isinstance(where, str) else ""
        base: dict[str, Any] = {"conversation_id": session, "ts": loose_ts(entry.get("timestamp")),
                "title": title, "session_id": session,
                "project": tuple(p for p in (Path(cwd).name, cwd, file.parent.name) if p)}
        message = entry["message"]
        role = message.get("role") or entry["type"]
        text = text_of(message.get("content")).strip()
        if role in ("user", "assistant") and text and not text.startswith(NOISE):
            yield Turn(message_id=uuid, role=role, text=text,
                       event_id=agent_event_id(session, uuid), **base)
        blocks = message.get("content") if isinstance(message.get("content"), list) else []
        for block in blocks:
            if isinstance(block, dict):
                turn = _tool_turn(block, uuid, tools, base)
                if turn is not None:
                    yield turn


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
