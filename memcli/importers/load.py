"""Read a chat export and write its turns as events through ingest (redaction included)."""

from __future__ import annotations

import hashlib
import importlib
import json
from typing import Any

from memcli.errors import UsageError
from memcli.importers import FORMATS
from memcli.importers.turns import Turn


def read_turns(fmt: str, raw: bytes) -> list[Turn]:
    """The kept turns of an export file's bytes, or a one-line UsageError (exit 2)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown import format {fmt!r}",
                         f"give one of: {', '.join(sorted(FORMATS))}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"not a {fmt} export: not UTF-8 (byte {exc.start})",
                         "give the export's conversations.json") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"not a {fmt} export: not JSON ({exc.msg} at line {exc.lineno})",
                         "give the export's conversations.json") from None
    except RecursionError:
        raise UsageError(f"not a {fmt} export: nested too deeply",
                         "give the export's conversations.json") from None
    return list(importlib.import_module(FORMATS[fmt]).turns(data))


def event_id(fmt: str, turn: Turn) -> str:
    """Stable across imports: the same message of the same conversation is the same event."""
    key = "\0".join((fmt, turn.conversation_id, turn.message_id)).encode()
    return f"imp_{fmt}_{hashlib.sha256(key).hexdigest()[:32]}"


def records(fmt: str, turns: list[Turn]) -> list[dict[str, Any]]:
    """One ingest record per turn: its id, time, role, conversation as the session."""
    out = []
    for turn in turns:
        record: dict[str, Any] = {
            "event_id": event_id(fmt, turn), "kind": "message", "role": turn.role,
            "session_id": f"{fmt}:{turn.conversation_id}", "tags": [f"import:{fmt}"],
            "content": {"text": turn.text, "source": {
                "format": fmt, "conversation_id": turn.conversation_id,
                "message_id": turn.message_id, "title": turn.title}},
        }
        if turn.ts is not None:
            record["ts"] = turn.ts
        out.append(record)
    return out


def load(memory: Any, fmt: str, turns: list[Turn], scope: dict[str, Any], *,
         defer_embed: bool = False, progress: Any = None) -> dict[str, Any]:
    """Write the turns (all or nothing) in `scope` (tenant, user, app: None is the default)
    and report as `memcli import` does."""
    batch = list(enumerate(records(fmt, turns), 1))
    report = memory.ingest(batch, defaults=scope, strict=True, defer_embed=defer_embed,
                           progress=progress)
    if report.rejected:
        first = report.rejected[0]
        raise UsageError(f"{fmt} export: turn {first.line}: {first.reason}",
                         "nothing was imported")
    added, skipped = len(report.created), len(report.skipped)
    return {"format": fmt, "conversations": len({t.conversation_id for t in turns}),
            "added": added, "skipped": skipped,
            "counts": {"events": {"added": added, "skipped": skipped}},
            "redacted": report.redacted, "notes": []}
