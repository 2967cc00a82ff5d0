"""Codex CLI sessions: `~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`, one JSON
object a line, `{"timestamp", "type", "payload"}`. `session_meta` opens the file (its `id`
and `cwd`, the project); a `response_item`'s payload is a `message` (role user or assistant,
`input_text`/`output_text` blocks), a `function_call` (`name`, `arguments` as a JSON string,
`call_id`), a `custom_tool_call` or `local_shell_call`, or their `*_output`. Older rollouts
put those items on their lines without the envelope, after a first line `{"id",
"timestamp"}`. Left out: `reasoning`, `event_msg` (the same turns again, for the screen),
`turn_context`, developer and system messages, and the environment and instructions Codex
sends as user messages.

Items have no ids: a turn is its line (rollouts are only appended to). A text turn's event id
is the one `memcli hook record` gives it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memcli.importers.files import each_file, find, json_lines, text_of
from memcli.importers.turns import Notes, Turn, agent_event_id, bad, loose_ts

FMT = "codex"
PROJECTS = True  # turns name their project: --project selects, and it is their app
DEFAULT_PATH = "~/.codex/sessions"
CONTEXT = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions",
           "<permissions instructions>")
CALLS = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
OUTPUTS = {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
FILE_ID = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$")


def read(path: Path, notes: Notes) -> Iterator[Turn]:
    files = find(path, "rollout-*.jsonl", FMT, notes)
    if not files:
        raise bad(FMT, f"no rollout-*.jsonl sessions under {path}")
    known = yield from each_file(
        files, lambda file, counts: _file_turns(file, notes, counts), notes, "Codex rollout")
    if not known:
        raise bad(FMT, f"{path} holds no line of a Codex rollout "
                       "(session_meta, response_item, or an older rollout's items)")


def _file_turns(file: Path, notes: Notes, counts: dict[str, int]) -> Iterator[Turn]:
    found = FILE_ID.search(file.name)
    session, cwd, started = (found.group(1) if found else file.stem), "", None
    tools: dict[str, str] = {}  # call_id -> tool name, for the outputs
    for number, entry in json_lines(file, FMT, notes):
        kind, item = entry.get("type"), entry.get("payload")
        if kind == "session_meta" and isinstance(item, dict) or (number == 1 and "id" in entry
                                                                 and "payload" not in entry):
            counts["lines"] += 1
            meta = item if isinstance(item, dict) else entry
            session = str(meta.get("id") or session)
            where = meta.get("cwd")
            cwd = where if isinstance(where, str) else cwd
            started = loose_ts(meta.get("timestamp")) or started
            continue
        if "record_type" in entry and "type" not in entry:
            counts["lines"] += 1  # an older rollout's state marker
            continue
        if kind in ("event_msg", "turn_context", "compacted"):
            counts["lines"] += 1
            notes.skip(f"{kind} line")  # the turns again for the screen, or settings
            continue
        if kind != "response_item":
            item = entry if "payload" not in entry else None  # an older rollout's bare item
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            continue
        counts["lines"] += 1
        base: dict[str, Any] = {"conversation_id": session, "message_id": str(number - 1),
                "ts": loose_ts(entry.get("timestamp")) or started, "session_id": session,
                "project": tuple(p for p in (Path(cwd).name, cwd) if p)}
        turn = _turn(item, tools, base, notes)
        if turn is not None:
            yield turn


def _turn(item: dict[str, Any], tools: dict[str, str], base: dict[str, Any],
          notes: Notes) -> Turn | None:
    kind = item.get("type")
    if kind == "message":
        role, text = item.get("role"), text_of(item.get("content")).strip()
        if role not in ("user", "assistant"):
            notes.skip(f"{role} message")
            return None
        if not text or text.startswith(CONTEXT):
            notes.skip("empty" if not text else "context Codex sends")
            return None
        # as the hooks key a Codex turn: its line's position (from 0) and its text
        key = f"{base['message_id']}:{text_of(item.get('content'), images=False).strip()}"
        return Turn(role=role, text=text, event_id=agent_event_id(base["session_id"], key),
                    **base)
    call_id = item.get("call_id") or item.get("id")
    call_id = call_id if isinstance(call_id, str) else ""
    if kind in CALLS:
        name = item.get("name") or kind.removesuffix("_call")
        args = _args(item)
        if call_id:
            tools[call_id] = str(name)
        return Turn(role="assistant", kind="tool_call",
                    text=f"{name}({json.dumps(args, ensure_ascii=False)})",
                    extra={"name": str(name), "args": args, "call_id": call_id}, **base)
    if kind in OUTPUTS:
        output = _output(item.get("output"))
        extra: dict[str, Any] = {"output": output, "call_id": call_id}
        if call_id in tools:
            extra["tool"] = tools[call_id]
        return Turn(role="tool", kind="tool_result", text=output or "(no output)",
                    extra=extra, **base)
    notes.skip(str(kind))  # reasoning, ghost_snapshot, ...
    return None


def _args(item: dict[str, Any]) -> Any:
    """A call's arguments: `arguments` is a JSON string (kept as given when it is not JSON);
    a custom tool's `input` is text; a shell call's `action` holds its command."""
    if isinstance(item.get("arguments"), str):
        try:
            return json.loads(item["arguments"])
        except ValueError:
            return item["arguments"]
    for key in ("input", "action", "arguments"):
        if item.get(key) is not None:
            return item[key]
    return {}


def _output(value: Any) -> str:
    """An output: a string, often itself JSON `{"output": ..., "metadata": ...}`; or an
    object with `content` (a string or text blocks)."""
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except ValueError:
            return value
        value = inner if isinstance(inner, dict) else value
        if isinstance(value, str):
            return value
    if isinstance(value, dict):
        for key in ("output", "content"):
            if value.get(key) is not None:
                return text_of(value[key]) or ""
        return json.dumps(value, ensure_ascii=False)
    return text_of(value)
