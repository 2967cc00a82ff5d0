"""Explicit memory curation: `remember` (facts and procedures), `confirm`, `pin` / `unpin`.

- `remember TEXT` stores a fact through the derived-memory writer, unless it is a near-duplicate
  of an active fact of the same user (then the existing one is reinforced and cited instead).
  The same statement with a negation, number, date, name or tense changed is never merged;
  negated or moved in time ("Sam will not attend" after "Sam will attend") it is a sure
  contradiction: the new fact supersedes the old one (both stay in the history), or, when the
  old one holds a sensitive profile field, a consent proposal is queued
  (`lifecycle/dedup.compare`). A changed number, date or name may be another event ("ran 5 km
  on Monday" / "ran 10 km on Tuesday"): both stay, and `memcli correct` replaces one.
- `remember --procedural` stores numbered how-to steps (kind and category `procedural`, never
  decaying); only agents whose allowlist names `procedural` get them back.
- `remember --field city ...` on a sensitive profile field queues a consent proposal.
- `confirm` protects a memory (decay_rate 0, confidence 1); `pin` keeps it out of decay, TTL
  and app compaction; both leave a history row.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memcli.core.records import utcnow
from memcli.derived.applimit import enforce_app_limit
from memcli.derived.textrules import tokens
from memcli.derived.writer import DEFAULT_DECAY, encode_ahead, supersede, write_memory
from memcli.errors import UsageError
from memcli.ledger import commands
from memcli.lifecycle import dedup
from memcli.lifecycle.profile_fields import field_value
from memcli.lifecycle.proposals import SENSITIVE_FIELDS, held_fields, propose
from memcli.policy.redaction import kinds, redact_record
from memcli.store import lifecycle_sql, memories
from memcli.store import owner as own

if TYPE_CHECKING:
    from memcli.config import LifecycleSettings
    from memcli.store.handle import MemoryHandle
    from memcli.store.owner import Owner

MAX_FACT = 280
MAX_STEPS = 30
MAX_STEP_CHARS = 300
_NUMBERED = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s*")


def procedure_steps(text: str | None, steps: list[str] | None) -> list[str]:
    """Steps from repeated --steps options, or from the lines of TEXT (numbers/bullets dropped)."""
    if steps:
        raw = list(steps)
    else:
        lines = [ln for ln in (text or "").splitlines() if ln.strip()]
        raw = lines if len(lines) > 1 else re.split(r"\s*;\s*", (text or "").strip())
    out = [" ".join(_NUMBERED.sub("", s).split()) for s in raw]
    out = [s for s in out if s]
    if not out:
        raise UsageError(
            "a procedure needs at least one step",
            "give numbered lines, `;`-separated steps, or --steps ... --steps ...",
        )
    if len(out) > MAX_STEPS:
        raise UsageError(f"{len(out)} steps, at most {MAX_STEPS}")
    long = [i for i, s in enumerate(out, start=1) if len(s) > MAX_STEP_CHARS]
    if long:
        raise UsageError(f"step {long[0]} is longer than {MAX_STEP_CHARS} characters")
    return out


def remember(
    memory: MemoryHandle,
    cfg: LifecycleSettings,
    *,
    text: str | None,
    steps: list[str] | None = None,
    title: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Store a fact (or merge it into a near-duplicate), a procedure, or a consent proposal
    (options: those of `_remember`). The text, steps and title are redacted first
    (memcli.policy.redaction); the result lists the kinds removed as `redacted`."""
    (text, steps, title), found = redact_record((text, steps, title))
    out = _remember(memory, cfg, text=text, steps=steps, title=title, **options)
    return {**out, "redacted": kinds(found)}


def _remember(
    memory: MemoryHandle,
    cfg: LifecycleSettings,
    *,
    text: str | None,
    procedural: bool = False,
    steps: list[str] | None = None,
    field: str | None = None,
    tenant_id: str | None = None,  # None: the memory's tenant
    user_id: str | None = None,
    agent_id: str | None = None,
    session_id: str | None = None,
    app_id: str | None = None,
    category: str | None = None,
    importance: float | None = None,
    pinned: bool = False,
    title: str | None = None,
) -> dict[str, Any]:
    memory.categories.check_write(category)  # a typo is refused, not filed as a new category
    tenant_id = tenant_id or memory.tenant
    scope = {
        "tenant_id": tenant_id,
        "user_id": user_id,
        "agent_id": agent_id,
        "session_id": session_id,
        "app_id": app_id,
    }
    if procedural:
        numbered = procedure_steps(text if steps is None else None, steps)
        body = "\n".join(f"{i}. {s}" for i, s in enumerate(numbered, start=1))
        content = f"{title.strip()}\n{body}" if title and title.strip() else body
        vector, terms = encode_ahead(memory, [content])[content]  # before the write lock
        with memory.db.transaction():
            new_id = _write_recorded(
                memory, scope, content=content, kind="procedural", category="procedural",
                importance=0.6 if importance is None else importance, pinned=pinned,
                decay_rate=0.0,
                attributes={"steps": numbered, "title": title, "method": "explicit"},
                vector=vector, sparse_terms=terms)
        return {"id": new_id, "kind": "procedural", "steps": len(numbered), "status": "created"}
    clean = " ".join((text or "").split())
    if not clean:
        raise UsageError("nothing to remember", "give the text, or `-` to read it from stdin")
    if len(clean) > MAX_FACT:
        raise UsageError(
            f"a fact is at most {MAX_FACT} characters ({len(clean)} given)",
            "split it, or use --procedural for steps",
        )
    if field is not None:
        if field not in SENSITIVE_FIELDS:
            raise UsageError(f"--field must be one of {', '.join(SENSITIVE_FIELDS)}")
        # The event records what was said; the proposal (consent state, kept by a rebuild)
        # is what it asks for.
        with memory.db.transaction(), commands.recording(
                memory.db, "remember", {"text": clean, "field": field},
                **_event_scope(scope), actor="remember"):
            return propose(
                memory.db,
                tenant_id=tenant_id,
                user_id=user_id,
                field=field,
                value=field_value(field, clean) or _field_value(clean),
                text=clean,
                session_id=session_id,
                origin="remember",
                days=cfg.proposal_days,
            )
    toks = tokens(clean)
    contradicted: list[tuple[dedup.Stored, str]] = []
    for stored in dedup.load_store(memory.db, tenant_id, user_id, with_vectors=False):
        verdict = dedup.compare(clean, toks, stored.text, stored.tokens, cfg.jaccard_merge)
        if verdict is not None and verdict[0] == "contradicts":
            # A changed number, date or name may be another event: both stay (never merged).
            if verdict[1] in dedup.SURE_CUES:
                contradicted.append((stored, verdict[1]))
        elif verdict is not None:
            with memory.db.transaction(), commands.recording(
                    memory.db, "remember", {"text": clean, "merged_into": stored.id},
                    **_event_scope(scope), actor="remember"):
                lifecycle_sql.merge_into(
                    memory.db, stored.id, clean, [], utcnow(), "remember", {"reason": verdict[1]}
                )
            return {"id": stored.id, "kind": stored.kind, "status": "merged"}
    # A contradiction supersedes; one of a sensitive profile field asks for consent instead.
    held = [(f, cue) for s, cue in contradicted
            for f in held_fields(s.kind, s.category, s.attributes, s.text)]
    if held:
        field, cue = held[0]
        # "Priya no longer lives in Madrid" names the old value: the sentence is the change.
        value = (None if cue in dedup.SURE_CUES else field_value(field, clean)) or clean
        # The event records what was said; the proposal is what it asks for (as --field).
        with memory.db.transaction(), commands.recording(
                memory.db, "remember", {"text": clean, "field": field},
                **_event_scope(scope), actor="remember"):
            return propose(memory.db, tenant_id=tenant_id, user_id=user_id, field=field,
                           value=value, text=clean, session_id=session_id, origin="remember",
                           days=cfg.proposal_days)
    old_ids = [s.id for s, _ in contradicted]
    vector, terms = encode_ahead(memory, [clean])[clean]  # before the write lock
    with memory.db.transaction():
        new_id = _write_recorded(
            memory, scope, content=clean, kind="fact", category=category or "knowledge",
            importance=0.7 if importance is None else importance, pinned=pinned,
            decay_rate=DEFAULT_DECAY,
            attributes={"method": "explicit", **({"supersedes": old_ids} if old_ids else {})},
            vector=vector, sparse_terms=terms, superseding=contradicted)
        # The app-memory design's app limit holds after every app write, not only after
        # consolidation.
        compaction = enforce_app_limit(memory, tenant_id, user_id, app_id, cfg) if app_id else []
    out: dict[str, Any] = {"id": new_id, "kind": "fact", "status": "created"}
    if old_ids:
        out["supersedes"] = old_ids
    return {**out, "compaction": compaction} if compaction else out


def _event_scope(scope: dict[str, Any]) -> dict[str, Any]:
    return {k: scope[k] for k in ("tenant_id", "user_id", "agent_id", "session_id", "app_id")}


def _write_recorded(memory: MemoryHandle, scope: dict[str, Any], *, vector: Any,
                    sparse_terms: Any, superseding: Sequence[tuple[dedup.Stored, str]] = (),
                    **row: Any) -> int:
    """The `remember` event first, then the memory derived from it (inside the caller's
    transaction; memcli.ledger.commands): the event holds every field of the row. The facts it
    contradicts (`superseding`) are superseded at the event's time; both stay in the history,
    which a rebuild replays."""
    fields = commands.memory_fields(row)
    with commands.recording(memory.db, "remember", fields, **_event_scope(scope),
                            actor="remember") as event_id:
        new_id = write_memory(memory, content=row["content"], kind=row["kind"],
                              category=row["category"], source_ids=[],
                              importance=row["importance"], pinned=row["pinned"],
                              decay_rate=row["decay_rate"], actor="remember",
                              attributes=row["attributes"], vector=vector,
                              sparse_terms=sparse_terms, origin_event=event_id, **scope)
        for old, cue in superseding:
            supersede(memory, old.id, new_id, actor="remember", reason=f"contradicts ({cue})")
        return new_id


def _field_value(text: str) -> str:
    # No cue of the field (profile_fields): "city=Porto" / "city: Porto" give the value
    # explicitly; otherwise the whole text is it ("Porto").
    m = re.match(r"^\s*\w+\s*[:=]\s*(.+)$", text)
    return m.group(1).strip() if m else text


def confirm(memory: MemoryHandle, memory_id: int, *, owner: Owner | None = None,
            actor: str = "cli") -> dict[str, Any]:
    db = memory.db
    with db.transaction():
        row = own.memory(db, memory_id, owner or memory.owner())
        if row["state"] != "active":
            raise UsageError(
                f"memory {memory_id} is {row['state']}",
                "restore it first" if row["state"] == "soft_deleted" else None,
            )
        with commands.changed(db, "confirm", row, actor):
            lifecycle_sql.protect(db, memory_id, utcnow())
            _changed_in_place(db, row, actor, {
                "confirmed": True,
                "decay_rate": [row["decay_rate"], 0.0],
                "confidence": [row["confidence"], 1.0],
            })
    return {"id": memory_id, "protected": True, "decay_rate": 0.0, "confidence": 1.0}


def set_pin(memory: MemoryHandle, memory_id: int, pinned: bool, *, owner: Owner | None = None,
            actor: str = "cli") -> dict[str, Any]:
    db = memory.db
    with db.transaction():
        row = own.memory(db, memory_id, owner or memory.owner())
        if bool(row["pinned"]) != pinned:
            with commands.changed(db, "pin" if pinned else "unpin", row, actor):
                lifecycle_sql.set_pinned(db, memory_id, pinned, utcnow())
                _changed_in_place(db, row, actor, {"pinned": pinned})
    return {"id": memory_id, "pinned": pinned, "changed": bool(row["pinned"]) != pinned}


def _changed_in_place(db: Any, row: dict[str, Any], actor: str, meta: dict[str, Any]) -> None:
    """The audit row of a change that keeps the memory's id (its old and new ref)."""
    ref = str(row["id"])
    memories.add_history(db, row["id"], "UPDATE", old_ref=ref, new_ref=ref, actor=actor, scope=row,
                    meta=meta)
