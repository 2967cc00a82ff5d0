"""Applying a consolidation plan: one transaction per session, and model-free store dedup.

`apply_plan` writes what `consolidate.plan_llm` / `plan_extractive` decided: the summary (with
its structured JSON), new facts (superseding what they contradict), merges into existing facts,
consent proposals, and the session's consolidation mark, all or nothing. Facts and merges
re-check that their targets are still active, since a person may have changed them meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.core.records import utcnow
from memcli.derived.writer import encode_ahead, supersede, write_memory
from memcli.lifecycle import consolidate_ledger, dedup
from memcli.lifecycle.proposals import propose
from memcli.policy.redaction import redact_record
from memcli.store import lifecycle_sql

if TYPE_CHECKING:
    from memcli.config import LifecycleSettings
    from memcli.lifecycle.dedup import NewFact
    from memcli.lifecycle.session_plan import SessionPlan
    from memcli.store.handle import MemoryHandle

ACTOR = "consolidate"


def apply_plan(memory: MemoryHandle, plan: SessionPlan) -> dict[str, Any]:
    """Write one session's plan in one transaction; returns what was written."""
    db = memory.db
    now = utcnow()
    _redact_plan(plan)
    out: dict[str, Any] = {
        "tenant_id": plan.tenant_id,
        "session_id": plan.session_id,
        "user_id": plan.user_id,
        "method": plan.method,
        "episodes": len(plan.episodes),
        "added": [],
        "merged": [],
        "superseded": [],
        "proposals": [],
        "duplicates_in_batch": plan.duplicates_in_batch,
        "pairs": vars(plan.pairs),
        "capped": plan.capped,
        "dropped": plan.dropped,
    }
    if plan.note:
        out["note"] = plan.note
    model_name = plan.structured.get("model")
    # Models run now, before the session's transaction takes the write lock.
    ahead = encode_ahead(memory, [plan.summary_text, *(f.text for f in plan.facts)],
                         known={f.text: f.vector for f in plan.facts if f.vector is not None})
    # Decisions and todos go into the ledger; prepared (redacted, encoded) before the lock too.
    ledger_writes = consolidate_ledger.prepare(memory, plan)
    with db.transaction():
        summary_id = write_memory(
            memory,
            content=plan.summary_text,
            kind="summary",
            category="event",
            source_ids=plan.summary_sources,
            importance=0.5,
            actor=ACTOR,
            event_time=plan.episodes[-1]["event_time"],
            attributes={
                "method": plan.method,
                "model": model_name,
                "structured": plan.structured,
                "seq_range": [int(plan.episodes[0]["event_seq"]), plan.last_seq],
            },
            vector=ahead[plan.summary_text][0],
            sparse_terms=ahead[plan.summary_text][1],
            **plan.scope(plan.summary_sources),
        )
        out["summary_id"] = summary_id
        for old in plan.replaces_summaries:
            if lifecycle_sql.is_active(db, old):
                supersede(
                    memory,
                    old,
                    summary_id,
                    actor=ACTOR,
                    reason="model summary replaces the extractive one",
                )
        for fact in plan.facts:
            if id(fact) in ledger_writes:
                consolidate_ledger.store(memory, fact, ledger_writes[id(fact)], out)
            else:
                _apply_fact(memory, plan, fact, model_name, now, out, ahead[fact.text])
        for item in plan.proposals:
            res = propose(
                db,
                tenant_id=plan.tenant_id,
                user_id=plan.user_id,
                field=item["field"],
                value=item["value"],
                text=item["text"],
                source_ids=item["source_ids"],
                session_id=plan.session_id,
                now=now,
            )
            out["proposals"].append(res)
        summary = {"summary_id": summary_id, **plan.structured}
        lifecycle_sql.mark_consolidated(
            db, plan.tenant_id, plan.session_id, plan.last_seq, plan.method, now, summary
        )
    return out


def _redact_plan(plan: SessionPlan) -> None:
    """A plan carries model text to places `write_memory` does not cover (merge history, the
    session summary, the run report, proposals): redact it all once, here
    (memcli.policy.redaction)."""
    (plan.summary_text, plan.structured, plan.proposals, plan.dropped), _ = redact_record(
        (plan.summary_text, plan.structured, plan.proposals, plan.dropped)
    )
    for fact in plan.facts:
        (fact.text, fact.reason), _ = redact_record((fact.text, fact.reason))


def _apply_fact(
    memory: MemoryHandle,
    plan: SessionPlan,
    fact: NewFact,
    model_name: str | None,
    now: str,
    out: dict[str, Any],
    encoded: tuple[Any, Any],
) -> None:
    db = memory.db
    if (
        fact.action == "merge"
        and fact.target is not None
        and lifecycle_sql.is_active(db, fact.target)
    ):
        lifecycle_sql.merge_into(
            db,
            fact.target,
            fact.text,
            fact.sources,
            now,
            ACTOR,
            {"reason": fact.reason, "session_id": plan.session_id},
        )
        out["merged"].append({"into": fact.target, "text": fact.text, "reason": fact.reason})
        return
    if fact.action == "propose" and fact.profile_field:
        res = propose(
            db,
            tenant_id=plan.tenant_id,
            user_id=plan.user_id,
            field=fact.profile_field,
            value=dedup.proposed_value(fact.profile_field, fact),
            text=fact.text,
            source_ids=fact.sources,
            session_id=plan.session_id,
            now=now,
        )
        out["proposals"].append(res)
        return
    old_ids = [i for i in fact.supersedes if lifecycle_sql.is_active(db, i)]
    attributes: dict[str, Any] = {
        "method": "llm",
        "model": model_name,
        "session_id": plan.session_id,
    }
    if old_ids:
        attributes["supersedes"] = old_ids
    if fact.reason and fact.action == "add":
        attributes["note"] = fact.reason
    new_id = write_memory(
        memory,
        content=fact.text,
        kind=fact.kind,
        category=fact.category,
        source_ids=fact.sources,
        importance=fact.importance,
        attributes=attributes,
        actor=ACTOR,
        event_time=_latest_time(plan, fact.sources),
        vector=encoded[0],
        sparse_terms=encoded[1],
        **plan.scope(fact.sources),
    )
    out["added"].append({"id": new_id, "kind": fact.kind, "text": fact.text})
    for old in old_ids:
        supersede(memory, old, new_id, actor=ACTOR, reason=fact.reason or "contradicts")
        out["superseded"].append({"old_id": old, "new_id": new_id})


def _latest_time(plan: SessionPlan, sources: list[int]) -> str:
    times = [e["event_time"] for e in plan.episodes if e["id"] in set(sources)]
    return max(times) if times else plan.episodes[-1]["event_time"]


def dedup_store(
    memory: MemoryHandle, cfg: LifecycleSettings, users: set[tuple[str, str | None]], *,
    dry_run: bool
) -> list[dict[str, Any]]:
    """Model-free merging of near-duplicate facts already in the store (touched users only)."""
    db = memory.db
    out = []
    for tenant, user in sorted(users, key=lambda t: (t[0], t[1] or "")):
        stored = dedup.load_store(db, tenant, user, with_vectors=False)
        pairs = dedup.near_duplicate_groups(stored, cfg.jaccard_merge)
        if not pairs:
            continue
        by_id = {s.id: s for s in stored}
        if not dry_run:
            now = utcnow()
            with db.transaction():
                for keep, dup in pairs:
                    lifecycle_sql.merge_into(
                        db,
                        keep,
                        by_id[dup].text,
                        [dup],
                        now,
                        ACTOR,
                        {"reason": "near-duplicate in store", "duplicate": dup},
                    )
                    supersede(memory, dup, keep, actor=ACTOR, reason="near-duplicate")
        out.extend(
            {"keep": keep, "duplicate": dup, "tenant_id": tenant, "user_id": user}
            for keep, dup in pairs
        )
    return out
