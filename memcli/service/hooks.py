"""Agent hooks: what `memcli hook session-start` and `memcli hook record` do with the JSON a
coding agent (Claude Code, Codex) passes to its hook commands on stdin.

- session-start: a context bundle (`acb build`) for the session, rendered as Markdown, in the
  shape the agent reads: `{"hookSpecificOutput": {"hookEventName": "SessionStart",
  "additionalContext": ...}}` (Claude Code's documented SessionStart output; Codex reads the
  same).
- record (UserPromptSubmit, Stop, SessionEnd, PreCompact): the conversation's text turns as
  events. From the transcript file the payload names (`transcript_path`: Claude Code's JSONL
  with one `{"type": "user"|"assistant", "uuid", "message": {...}}` per line, or a Codex
  rollout with `{"type": "response_item", "payload": {"type": "message", ...}}`), else from
  the payload's own `prompt` / `last_assistant_message`. Every turn gets a stable event id
  (the transcript's uuid, else a hash of session, position and text), so running the hook
  again records nothing twice: ingest skips known event ids.

Tool calls and tool results are not recorded (they are large and mostly noise for memory);
only what the user and the assistant said.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memcli.acb.render import render_markdown
from memcli.importers.turns import agent_event_id

# A transcript line longer than this is a tool dump, not a turn (and would blow up a record).
MAX_TURN_CHARS = 20_000


def parse_payload(raw: str) -> dict[str, Any]:
    """The hook's JSON object (an empty or non-object input is an empty payload)."""
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return {}
    return payload if isinstance(payload, dict) else {}


def _text_of(content: Any) -> str:
    """The text blocks of a message's content (a string, or a list of typed blocks)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [block.get("text", "") for block in content
             if isinstance(block, dict)
             and block.get("type") in ("text", "input_text", "output_text")
             and isinstance(block.get("text"), str)]
    return "\n".join(p for p in parts if p)


def _event_id(session: str, key: str) -> str:
    return agent_event_id(session, key)


def transcript_turns(path: Path, session: str) -> list[dict[str, Any]]:
    """The text turns of a Claude Code or Codex transcript, oldest first, as event records."""
    turns = []
    with path.open(encoding="utf-8", errors="replace") as lines:
        for position, line in enumerate(lines):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict):
                continue
            role, text, key, ts = None, "", None, entry.get("timestamp")
            if entry.get("type") in ("user", "assistant") and isinstance(
                    entry.get("message"), dict):  # Claude Code
                if entry.get("isMeta") or entry.get("isSidechain"):
                    continue
                role = entry["message"].get("role") or entry["type"]
                text = _text_of(entry["message"].get("content"))
                key = entry.get("uuid")
            elif entry.get("type") == "response_item" and isinstance(entry.get("payload"), dict):
                item = entry["payload"]  # Codex rollout
                if item.get("type") != "message" or item.get("role") not in ("user", "assistant"):
                    continue
                role, text = item["role"], _text_of(item.get("content"))
            text = text.strip()
            if role not in ("user", "assistant") or not text or len(text) > MAX_TURN_CHARS:
                continue
            turns.append(_record(session, role, text, str(key or f"{position}:{text}"), ts))
    return turns


def _record(session: str, role: str, text: str, key: str, ts: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"event_id": _event_id(session, key), "kind": "message",
                              "role": role, "text": text, "tags": ["hook"]}
    if session:
        record["session_id"] = session
    if isinstance(ts, str) and ts:
        record["ts"] = ts
    return record


def turns_from(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The turns a hook payload gives: its transcript's, else its prompt / last message."""
    session = str(payload.get("session_id") or "")
    path = payload.get("transcript_path")
    if isinstance(path, str) and path and Path(path).is_file():
        return transcript_turns(Path(path), session)
    turns = []
    turn = str(payload.get("turn_id") or "")
    for field, role in (("prompt", "user"), ("last_assistant_message", "assistant")):
        text = payload.get(field)
        if isinstance(text, str) and text.strip():
            turns.append(_record(session, role, text.strip()[:MAX_TURN_CHARS],
                                 f"{field}:{turn}:{text}", None))
    return turns


def session_topic(payload: dict[str, Any]) -> str | None:
    """What a new session is probably about: its project folder's name (from the hook's
    `cwd`), with separators as spaces so the lexical leg matches its words."""
    cwd = payload.get("cwd")
    if not isinstance(cwd, str) or not cwd.strip():
        return None
    name = Path(cwd).name
    for sep in "-_.":
        name = name.replace(sep, " ")
    return name.strip() or None


def session_context(bundle: dict[str, Any]) -> dict[str, Any]:
    """The SessionStart hook output for a bundle."""

    return {"hookSpecificOutput": {"hookEventName": "SessionStart",
                                   "additionalContext": render_markdown(bundle)}}
