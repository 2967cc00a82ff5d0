"""A mem0 export: what `get_all` returns (a list of memories, or `{"results": [...]}` as its
v1.1 and platform APIs answer) or the platform's export (`{"memories": [...]}`). A memory is
`{id, memory, hash, user_id, agent_id, run_id, app_id, metadata, categories, created_at,
updated_at}`; its text may be `memory`, `text` or `data`.

Each memory becomes one event, said at its `updated_at` (else `created_at`), from which memcli
derives its own memory: the log stays the ground truth and the memory cites it. The event is
keyed by the memory's id and its `hash` (else its text): a memory mem0 rewrote since the
last import is a new event, as it was a new statement; the same export twice adds nothing.
Its user, agent and app (mem0's `run_id` is the session) are kept unless given on the command
line; its categories and metadata go to the event's tags and source."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from memcli.importers.turns import HUMAN, Notes, Turn, as_dict, bad, ident, iso_ts

FMT = "mem0"
ITEM = "memory"
KEYS = ("results", "memories")  # an object's list of memories: v1.1 and platform APIs, export
TEXT_KEYS = ("memory", "text", "data")


def item_turns(item: Any, n: int, notes: Notes) -> Iterator[Turn]:
    where = f"memory {n}"
    item = as_dict(item, FMT, where)
    if not any(k in item for k in TEXT_KEYS):
        raise bad(FMT, f"{where} has none of memory, text or data")
    text = next((item[k] for k in TEXT_KEYS if isinstance(item.get(k), str)), "")
    if not text.strip():
        notes.append(f"{where} has no text: left out")
        notes.skip("empty")
        return
    memory_id = ident(item.get("id"), FMT, where)
    version = item.get("hash") if isinstance(item.get("hash"), str) and item["hash"] \
        else hashlib.sha256(text.encode()).hexdigest()[:32]
    scope = {k: str(item[k]) for k in ("user_id", "agent_id", "app_id")
             if isinstance(item.get(k), str | int) and item[k] != ""}
    run = item.get("run_id") or item.get("user_id") or item.get("agent_id") or "memories"
    given, meta = item.get("categories"), item.get("metadata")
    categories = given if isinstance(given, list) else []
    metadata = meta if isinstance(meta, dict) else {}
    extra: dict[str, Any] = {"mem0_id": memory_id, "created_at": item.get("created_at")}
    if metadata:
        extra["metadata"] = metadata
    yield Turn(conversation_id=str(run), message_id=f"{memory_id}:{version}", role=HUMAN,
               text=text, ts=iso_ts(item.get("updated_at") or item.get("created_at"),
                                    FMT, where),
               extra=extra, scope=scope,
               tags=tuple(f"category:{c}" for c in categories if isinstance(c, str)))
