"""`memcli correct ID TEXT` (the SQLite memory extension design's `correct_fact`): replace a
wrong memory with a linked fix.

The correction is a new memory of the same kind, category and scope (tenant, user, session,
app, channel, sensitivity, importance, pin) that supersedes the old one exactly as
consolidation's supersession does (`writer.supersede`): the old memory gets `valid_to` and state
`superseded`, a `supersedes` relation links new -> old, and history records both (ADD for the
new one, UPDATE on the old one naming its replacement). Nothing is deleted, so the wrong value
stays auditable. The SQLite memory extension design soft-deletes the old fact; superseding
keeps the link between them.

Conversation turns (episodes) are ground truth and never rewritten, and ledger rows have their
own way (`decision supersede`, `task update`): both are refused with the command to use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.derived.writer import encode_ahead, supersede, write_memory
from memcli.errors import UsageError
from memcli.ledger import commands
from memcli.policy.redaction import kinds, redact_record
from memcli.store import lifecycle_sql
from memcli.store import owner as own

if TYPE_CHECKING:
    from memcli.store.handle import MemoryHandle
    from memcli.store.owner import Owner

SCOPE = ("tenant_id", "user_id", "agent_id", "session_id", "app_id", "run_id")
CORRECTABLE = ("fact", "summary", "insight", "reflection", "procedural")
MAX_FACT = 280
ACTOR = "correct"  # who the history rows name, unless the caller says (the web pages: `ui`)


def correct_fact(memory: MemoryHandle, memory_id: int, text: str, *, reason: str = "",
                 owner: Owner | None = None, actor: str = ACTOR) -> dict[str, Any]:
    """Supersede memory `memory_id` (`owner`'s, default: the memory's tenant's) with `text`;
    the new memory's summary. `actor`: who its history rows name."""
    (text, reason), found = redact_record((text, reason))
    clean = text.strip() if "\n" in text.strip() else " ".join(text.split())
    if not clean:
        raise UsageError("empty correction", "give the corrected text, or `-` for stdin")
    old = _get(memory, memory_id, owner or memory.owner())
    if old["kind"] == "fact" and len(clean) > MAX_FACT:
        raise UsageError(f"a fact is at most {MAX_FACT} characters ({len(clean)} given)")
    vector, terms = encode_ahead(memory, [clean])[clean]  # before the write lock
    attributes = {"method": "explicit", "corrects": memory_id,
                  **({"reason": reason} if reason else {})}
    row = {"content": clean, "kind": old["kind"], "category": old["category"],
           "importance": old["importance"], "pinned": bool(old["pinned"]),
           "decay_rate": old["decay_rate"], "attributes": attributes}
    scope = {k: old[k] for k in SCOPE}
    with memory.db.transaction():
        if not lifecycle_sql.is_active(memory.db, memory_id):  # changed since it was read
            raise UsageError(f"memory {memory_id} is no longer active", "read it again")
        # The event first, holding every field of the new memory; the rows derive from it.
        fields = {"memory_id": memory_id, **commands.memory_fields(row), "reason": reason}
        with commands.recording(memory.db, "correct", fields, channel=old["channel"],
                                sensitivity=old["sensitivity"], actor=actor,
                                **scope) as event_id:
            new_id = write_memory(
                memory, content=clean, kind=old["kind"], category=old["category"],
                source_ids=[], channel=old["channel"], sensitivity=old["sensitivity"],
                importance=old["importance"], pinned=bool(old["pinned"]),
                decay_rate=old["decay_rate"], attributes=attributes, actor=actor,
                vector=vector, sparse_terms=terms, origin_event=event_id, **scope)
            supersede(memory, memory_id, new_id, actor=actor, reason=reason or "corrected")
    return {"id": new_id, "supersedes": memory_id, "kind": old["kind"], "text": clean,
            "redacted": kinds(found)}


def _get(memory: MemoryHandle, memory_id: int, owner: Owner) -> dict[str, Any]:
    row = own.memory(memory.db, memory_id, owner)  # another tenant's id: as if absent
    if row["kind"] == "episode":
        raise UsageError(f"memory {memory_id} is a conversation turn, and turns are never "
                         "rewritten", "correct the fact derived from it, or `memcli remember`")
    if row["kind"] == "decision":
        raise UsageError(f"memory {memory_id} is a decision",
                         "use `memcli decision supersede`")
    if row["kind"] == "task":
        raise UsageError(f"memory {memory_id} is a task", "use `memcli task update`")
    if row["kind"] not in CORRECTABLE:
        raise UsageError(f"memory {memory_id} is a {row['kind']}, which cannot be corrected")
    if row["state"] != "active":
        raise UsageError(f"memory {memory_id} is {row['state']}",
                         "correct the memory that replaced it (see `memcli history`)")
    return row
