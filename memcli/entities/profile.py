"""`memcli entity NAME` (the SQLite memory extension design's `get_entity_info`): "tell me
everything about X".

An entity's profile in one tenant: its type (person, place, organisation, project, or none:
`memcli.entities.types`), the spellings it was written as (aliases), first and last seen, how many
memories mention it, and those memories, newest first. Entity rows are shared keys across
tenants, so the type, the aliases and the counts are computed from the tenant's own memories at
read time: nothing of another tenant's text shapes the answer, and no schema change was needed
(the entities table has no type column).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from memcli.entities.extraction import extract_entities
from memcli.entities.types import entity_type, mention_types
from memcli.errors import NotFoundError, UsageError
from memcli.store import entities

if TYPE_CHECKING:
    from memcli.store.handle import MemoryHandle

CONTEXTS = 200  # memories read to find spellings and types (the newest)


def _norm(name: str) -> str:
    return " ".join(name.strip().lstrip("@#").replace("’", "'").lower().split()).rstrip("/")


def get_entity_info(memory: MemoryHandle, name: str, *, tenant_id: str | None = None,
                    user_id: str | None = None, limit: int = 20) -> dict[str, Any]:
    """The profile of the entity called `name` and its `limit` newest linked memories."""
    norm = _norm(name)
    if not norm:
        raise UsageError("empty entity name", "give a name, @handle, #tag, email or URL")
    tenant = tenant_id or memory.tenant
    rows = entities.entities_named(memory.db, norm, name.strip().lower(), tenant)
    ids = [r["id"] for r in rows]
    summary = entities.mention_summary(memory.db, ids, tenant, user_id) if ids else {}
    if not summary.get("mentions"):
        raise NotFoundError(f"no entity {name!r} in tenant {tenant!r}"
                            + (f" for user {user_id!r}" if user_id else ""),
                            "entities come from ingested text; try another spelling")
    norms = {r["norm"] for r in rows}
    recent = entities.linked_memories(memory.db, ids, tenant, user_id, max(limit, CONTEXTS))
    spellings: Counter[str] = Counter()
    for row in recent:
        if row["sensitivity"] == "high":
            continue  # never linked, but a file written before that rule may hold some
        for ent in extract_entities(row["content"]):
            if ent.norm in norms:
                spellings[ent.value] += 1
    types: list[str] = []
    for row in recent:
        types.extend(mention_types(row["content"], spellings))
    kinds = sorted({r["kind"] for r in rows})
    aliases = sorted(spellings, key=lambda s: (-spellings[s], s))
    return {
        "name": aliases[0] if aliases else name.strip(),
        "norm": norm,
        "type": entity_type(kinds, norm, types),
        "kinds": kinds,
        "aliases": aliases,
        "tenant_id": tenant,
        "mentions": int(summary["mentions"]),
        "first_seen": summary["first_seen"],
        "last_seen": summary["last_seen"],
        "memories": [
            {"id": r["id"], "kind": r["kind"], "category": r["category"], "text": r["content"],
             "event_time": r["event_time"], "user_id": r["user_id"],
             "session_id": r["session_id"], "app_id": r["app_id"]}
            for r in recent[:limit]
        ],
    }
