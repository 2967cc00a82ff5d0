"""A Claude.ai export's conversations.json: a list of conversations with their
`chat_messages` in order (sender `human` or `assistant`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from memcli.importers.turns import AGENT, HUMAN, Notes, Turn, as_dict, as_list, ident, iso_ts

FMT = "claude"
ITEM = "conversation"
ROLES = {"human": HUMAN, "assistant": AGENT}


def item_turns(conv: Any, n: int, notes: Notes) -> Iterator[Turn]:
    conv = as_dict(conv, FMT, f"conversation {n}")
    conv_id = ident(conv.get("uuid"), FMT, f"conversation {n}")
    title = conv.get("name") if isinstance(conv.get("name"), str) else None
    messages = as_list(conv.get("chat_messages") or [], FMT, f"conversation {n}'s messages")
    for m, message in enumerate(messages, 1):
        where = f"conversation {n}'s message {m}"
        message = as_dict(message, FMT, where)
        role = ROLES.get(str(message.get("sender")))
        text = _text(message)
        if role is None or not text.strip():
            notes.skip("empty" if role else f"{message.get('sender')} sender")
            continue
        yield Turn(conv_id, ident(message.get("uuid"), FMT, where), role, text,
                   iso_ts(message.get("created_at"), FMT, where), title)


def _text(message: dict[str, Any]) -> str:
    """The text blocks of `content`, else `text`; attachments and files named."""
    blocks = message.get("content")
    pieces: list[str] = []
    if isinstance(blocks, list):
        pieces = [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"
                  and isinstance(b.get("text"), str)]
    if not any(p.strip() for p in pieces) and isinstance(message.get("text"), str):
        pieces = [message["text"]]
    for key in ("attachments", "files"):
        for item in message.get(key) or []:
            name = item.get("file_name") if isinstance(item, dict) else None
            if isinstance(name, str):
                pieces.append(f"[attachment: {name}]")
    return "\n".join(p for p in pieces if p.strip())
