"""Records the tests write (a conversation's turns, NDJSON) and a recorder of calls."""

from __future__ import annotations

import json


def turns(session: str, texts: list[str], user: str = "u1", **extra) -> list[dict]:
    """Records for a conversation, one turn a minute, with stable event ids."""
    return [
        {"event_id": f"{session}-{i}", "session_id": session, "user_id": user,
         "ts": f"2025-01-01T10:{i:02d}:00Z", "content": {"text": text}, **extra}
        for i, text in enumerate(texts)
    ]


def ndjson(records: list[dict]) -> str:
    return "\n".join(json.dumps(r) for r in records) + "\n"


def record_calls(obj, name: str) -> list:
    """Wrap `obj.<name>` so each call's first argument is recorded (the call still goes
    through); returns the list the arguments are appended to."""
    calls: list = []
    inner = getattr(obj, name)

    def recording(first, *args, **kwargs):
        calls.append(first)
        return inner(first, *args, **kwargs)

    setattr(obj, name, recording)
    return calls
