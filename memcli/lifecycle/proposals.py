"""Consent for sensitive profile fields: changes are proposed, never applied silently.

A change to a person's preferred name, pronouns, city or language (from consolidation, or from
`memcli remember --field`) becomes a pending proposal of the field's value ("Madrid", read
from "Priya lives in Madrid" by `profile_fields`); its text keeps the field's name ("City:
Madrid" when only "Madrid" was given), and so does the fact an acceptance writes.
`memcli proposals accept ID` writes the profile fact and supersedes every fact that held the
field before (the fact an earlier acceptance wrote, and `profile` facts stating the field,
such as one a model filed there), so one answer stays active and the old ones stay in
history; `reject` records the refusal; a proposal nobody answers expires after 7 days. The
audit trail holds every decision.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from memcli.core.records import format_ts, utcnow
from memcli.derived.textrules import normalise
from memcli.derived.writer import supersede, write_memory
from memcli.errors import UsageError
from memcli.ledger import commands
from memcli.lifecycle.profile_fields import field_text, field_value
from memcli.policy.redaction import redact_record, redact_text
from memcli.store import lifecycle_sql, memories, proposals_sql
from memcli.store import owner as own

if TYPE_CHECKING:
    from memcli.store.connection import Database
    from memcli.store.handle import MemoryHandle
    from memcli.store.owner import Owner

SENSITIVE_FIELDS = ("preferred_name", "pronouns", "city", "language")
STATUSES = ("pending", "accepted", "rejected", "expired")


def propose(
    db: Database,
    *,
    tenant_id: str,
    user_id: str | None,
    field: str,
    value: str,
    text: str,
    source_ids: list[Any] | None = None,
    session_id: str | None = None,
    origin: str = "consolidate",
    days: int = 7,
    now: str | None = None,
) -> dict[str, Any]:
    """Queue a change (call inside the caller's transaction). Returns what happened to it.

    No proposal when the field already holds this value, or an identical one is pending.
    """
    if field not in SENSITIVE_FIELDS:
        raise UsageError(
            f"{field!r} is not a sensitive profile field",
            f"use one of {', '.join(SENSITIVE_FIELDS)}",
        )
    # Consolidation proposes what a model read: redact it like any other write
    # (memcli.policy.redaction).
    (value, text), _ = redact_record((value, text))
    value = " ".join(value.split())
    if not value:
        raise UsageError("a proposal needs a value")
    text = field_text(field, value, text)  # "City: Madrid", never a bare "Madrid"
    now = now or utcnow()
    holders = field_holders(db, tenant_id, user_id, field)
    current = holders[0] if holders else None
    if current is not None and normalise(_held_value(current, field)) == normalise(value):
        return {"status": "unchanged", "memory_id": current["id"], "field": field}
    same = next((i for i, v in proposals_sql.pending_values(db, tenant_id, user_id, field)
                 if v.casefold() == value.casefold()), None)  # case-insensitive, any letter
    if same is not None:
        return {"status": "already_pending", "proposal_id": same, "field": field}
    expires = format_ts(datetime.fromisoformat(now.replace("Z", "+00:00")) + timedelta(days=days))
    proposal_id = proposals_sql.insert_proposal(
        db,
        {
            "tenant_id": tenant_id,
            "user_id": user_id,
            "field": field,
            "value": value,
            "text": text,
            "old_memory_id": current["id"] if current else None,
            "old_text": current["content"] if current else None,
            "session_id": session_id,
            "source_ids": source_ids or [],
            "origin": origin,
            "created_at": now,
            "expires_at": expires,
        },
    )
    return {
        "status": "pending",
        "proposal_id": proposal_id,
        "field": field,
        "value": value,
        "expires_at": expires,
    }


def field_holders(
    db: Database, tenant_id: str, user_id: str | None, field: str
) -> list[dict[str, Any]]:
    """The user's active facts holding `field`: the one an accepted proposal wrote first,
    then the other `profile` facts whose text states the field (newest first)."""
    main = lifecycle_sql.profile_fact(db, tenant_id, user_id, field)
    stated = [
        r for r in proposals_sql.profile_facts(db, tenant_id, user_id)
        if (main is None or r["id"] != main["id"])
        and r["attributes"].get("profile_field") in (None, field)
        and field_value(field, r["content"]) is not None
    ]
    return ([main] if main is not None else []) + stated


def held_fields(kind: str, category: str | None, attributes: dict[str, Any],
                content: str) -> list[str]:
    """The sensitive fields an active memory holds: the one an accepted proposal wrote it
    for, or those a `profile` fact's text states (however it was written: a model's fact filed
    under `profile`, an import). Replacing such a memory needs consent."""
    named = attributes.get("profile_field")
    if named in SENSITIVE_FIELDS:
        return [named]
    if kind != "fact" or category != "profile" or named is not None:
        return []
    return [f for f in SENSITIVE_FIELDS if field_value(f, content) is not None]


def _held_value(fact: dict[str, Any], field: str) -> str:
    value = fact["attributes"].get("value")
    return str(value) if value is not None else field_value(field, fact["content"]) or ""


def list_proposals(
    db: Database,
    *,
    status: str | None = "pending",
    tenant_id: str | None = None,
    user_id: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    if status is not None and status not in STATUSES:
        raise UsageError(f"unknown status {status!r}", f"use {', '.join(STATUSES)} or all")
    with db.transaction():
        proposals_sql.expire(db, utcnow())
    return proposals_sql.list_proposals(
        db, status=status, tenant_id=tenant_id, user_id=user_id, limit=limit
    )


def _pending(db: Database, proposal_id: int, owner: Owner) -> dict[str, Any]:
    proposals_sql.expire(db, utcnow())
    row = own.proposal(db, proposal_id, owner)
    if row["status"] != "pending":
        raise UsageError(
            f"proposal {proposal_id} is {row['status']}, not pending",
            "only pending proposals can be accepted or rejected",
        )
    return row


def accept(memory: MemoryHandle, proposal_id: int, *, owner: Owner | None = None, by: str = "cli"
           ) -> dict[str, Any]:
    """Apply a proposal: write the profile fact and supersede the field's old value."""
    db = memory.db
    with db.transaction():
        row = _pending(db, proposal_id, owner or memory.owner())
        holders = field_holders(db, row["tenant_id"], row["user_id"], row["field"])
        fact = {
            # "City: Madrid", never a bare "Madrid"
            "content": field_text(row["field"], row["value"], row["text"]),
            "kind": "fact", "category": "profile", "importance": 0.8,
            "pinned": False, "decay_rate": 0.0,
            "attributes": {"profile_field": row["field"], "value": row["value"],
                           "proposal_id": proposal_id, "consent": by}}
        # True since the person said it: the old value ends there (writer.supersede).
        said_at = _said_at(memory, row["source_ids"])
        fields = {"proposal_id": proposal_id, **commands.memory_fields(fact),
                  "source_ids": row["source_ids"], "event_time": said_at}
        with commands.recording(db, "proposal.accept", fields, actor=by,
                                **{k: row[k] for k in ("tenant_id", "user_id", "session_id")}
                                ) as event_id:
            new_id = _accepted(memory, row, fact, said_at, by, holders, event_id)
    return {
        "id": proposal_id,
        "status": "accepted",
        "memory_id": new_id,
        "superseded": holders[0]["id"] if holders else None,
        "superseded_ids": [h["id"] for h in holders],
    }


def _accepted(memory: MemoryHandle, row: dict[str, Any], fact: dict[str, Any],
              said_at: str | None, by: str, holders: list[dict[str, Any]],
              event_id: str) -> int:
    """The accepted proposal's fact, derived from its event; the field's old holders
    superseded."""
    db, proposal_id = memory.db, row["id"]
    new_id = write_memory(
        memory, content=fact["content"], kind="fact", category="profile",
        source_ids=row["source_ids"], tenant_id=row["tenant_id"], user_id=row["user_id"],
        session_id=row["session_id"], importance=fact["importance"],
        decay_rate=fact["decay_rate"], event_time=said_at,
        attributes=fact["attributes"], actor=by, origin_event=event_id)
    for old in holders:
        supersede(
            memory,
            old["id"],
            new_id,
            actor=by,
            reason=f"consent: proposal {proposal_id} accepted",
        )
    memories.add_history(
        db,
        new_id,
        "UPDATE",
        new_ref=str(new_id),
        actor=by,
        scope=row,
        meta={"proposal_id": proposal_id, "decision": "accepted", "field": row["field"]},
    )
    proposals_sql.decide(db, proposal_id, "accepted", utcnow(), by, memory_id=new_id)
    return new_id


def _said_at(memory: MemoryHandle, source_ids: list[Any]) -> str | None:
    """When the newest turn a proposal cites was said (None: no turn, e.g. `remember`)."""
    ids = [i for i in source_ids if isinstance(i, int)]
    times = [r["event_time"] for r in memories.get_memories(memory.db, ids).values()]
    return max(times) if times else None


def reject(
    db: Database, proposal_id: int, *, owner: Owner, by: str = "cli", reason: str | None = None
) -> dict[str, Any]:
    if reason is not None:
        reason, _ = redact_text(reason)
    with db.transaction():
        row = _pending(db, proposal_id, owner)
        with commands.recording(db, "proposal.reject",
                                {"proposal_id": proposal_id, "reason": reason}, actor=by,
                                **{k: row[k] for k in ("tenant_id", "user_id", "session_id")}):
            _rejected(db, row, by, reason)
    return {"id": proposal_id, "status": "rejected"}


def _rejected(db: Database, row: dict[str, Any], by: str, reason: str | None) -> None:
    proposal_id = row["id"]
    proposals_sql.decide(db, proposal_id, "rejected", utcnow(), by, reason=reason)
    # The refusal goes in the audit trail too (no memory id: nothing was written).
    memories.add_history(
        db,
        row["old_memory_id"],
        "UPDATE",
        actor=by,
        scope=row,
        meta={
            "proposal_id": proposal_id,
            "decision": "rejected",
            "field": row["field"],
            "reason": reason,
        },
    )
