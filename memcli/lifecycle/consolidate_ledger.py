"""Consolidated decisions and todos go into the ledger, not only into memories.

`decision list`, `task list` and a bundle's decision ledger and task state read the `decisions`
and `tasks` tables. What `consolidate` extracts as a decision or a todo is written through the
ledger's own functions (`memcli.ledger.entries.prepare_*` before the write lock: redaction, the
models;
`store_*` inside the session's transaction), so it is a ledger row with its memory, exactly as
`decision add` / `task add` would write it, citing the turns it came from as `mem:ID` refs.

Dedup: an extracted decision (todo) that repeats an active decision (an open or doing task) of
the same user, exact or near-duplicate text, is merged into that row's memory instead (its
sources cited), the same rule as facts (`dedup.py`). A decision the model found to contradict
an active ledger decision supersedes it the ledger's way (status superseded, linked both ways).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memcli.derived.textrules import jaccard, normalise, safe_merge, tokens
from memcli.derived.writer import supersede
from memcli.ledger import entries
from memcli.store import ledger_sql, lifecycle_sql

if TYPE_CHECKING:
    from memcli.lifecycle.dedup import NewFact
    from memcli.lifecycle.session_plan import SessionPlan
    from memcli.store.handle import MemoryHandle

LEDGER_KINDS = ("decision", "task")
ACTOR = "consolidate"
_LIMIT = 1000  # active decisions / open tasks of one user compared against


@dataclass
class LedgerWrite:
    pending: entries.PendingWrite
    old: dict[str, Any] | None = None  # the active decision this one supersedes


def match_ledger(memory: MemoryHandle, facts: list[NewFact], tenant_id: str, user_id: str | None,
                 jaccard_merge: float) -> None:
    """Decisions and todos that repeat the user's active ledger rows become merges into them."""
    rows = {
        "decision": [(r["decision"], r) for r in entries.list_decisions(
            memory, tenant_id=tenant_id, user_id=user_id, limit=_LIMIT)],
        "task": [(r["title"], r) for r in entries.list_tasks(
            memory, statuses=("open", "doing"), tenant_id=tenant_id, user_id=user_id,
            limit=_LIMIT)],
    }
    for fact in facts:
        if fact.kind not in LEDGER_KINDS or fact.action not in ("add", "supersede"):
            continue
        for text, row in rows[fact.kind]:
            if row["user_id"] != user_id or row["memory_id"] is None:
                continue
            toks = tokens(text)
            if normalise(text) == normalise(fact.text) or (
                jaccard(fact.tokens, toks) >= jaccard_merge
                and safe_merge(fact.text, text, fact.tokens, toks)
            ):
                label = "decision D" if fact.kind == "decision" else "task T"
                fact.action, fact.target = "merge", row["memory_id"]
                fact.supersedes = []
                fact.reason = f"same as {label}{row['id']}"
                break


def prepare(memory: MemoryHandle, plan: SessionPlan) -> dict[int, LedgerWrite]:
    """The ledger writes of a plan (by `id(fact)`), checked and encoded before the lock."""
    out: dict[int, LedgerWrite] = {}
    attributes = {"method": plan.method, "model": plan.structured.get("model"),
                  "consolidated_from": plan.session_id}
    for fact in plan.facts:
        if fact.kind not in LEDGER_KINDS or fact.action not in ("add", "supersede"):
            continue
        scope = plan.scope(fact.sources)
        common = {
            "refs": [f"mem:{s}" for s in fact.sources],
            "tenant_id": scope["tenant_id"], "user_id": scope["user_id"],
            "session_id": scope["session_id"], "app_id": scope["app_id"],
            "channel": scope["channel"], "sensitivity": scope["sensitivity"],
            "actor": ACTOR, "attributes": attributes,
        }
        if fact.kind == "task":
            out[id(fact)] = LedgerWrite(entries.prepare_task(memory, fact.text, **common))
            continue
        found = (ledger_sql.active_decision_of_memory(memory.db, i) for i in fact.supersedes)
        old = next((d for d in found if d is not None), None)
        pending = entries.prepare_decision(
            memory, fact.text, scope="user", supersedes=old["id"] if old else None, **common)
        out[id(fact)] = LedgerWrite(pending, old)
    return out


def store(memory: MemoryHandle, fact: NewFact, write: LedgerWrite, out: dict[str, Any]) -> None:
    """Write one prepared decision or task inside the session's transaction; report it."""
    db = memory.db
    old = write.old
    if old is not None and not lifecycle_sql.is_active(db, old["memory_id"]):
        old = None  # changed meanwhile: add the decision, supersede nothing through it
        write.pending.row["supersedes"] = None
    if fact.kind == "task":
        task_id = entries.store_task(memory, write.pending)
        memory_id = entries.get_task(memory, task_id)["memory_id"]
        added: dict[str, Any] = {"task_id": task_id}
    else:
        if old is not None:
            decision_id = entries.store_superseding(memory, write.pending, old,
                                                   fact.reason or "contradicts")
            out["superseded"].append({"old_id": old["memory_id"],
                                      "new_id": entries.get_decision(memory, decision_id)[
                                          "memory_id"], "decision_id": decision_id})
        else:
            decision_id = entries.store_decision(memory, write.pending)
        memory_id = entries.get_decision(memory, decision_id)["memory_id"]
        added = {"decision_id": decision_id}
    out["added"].append({"id": memory_id, "kind": fact.kind, "text": fact.text, **added})
    done = {old["memory_id"]} if old is not None else set()
    for other in fact.supersedes:
        if other not in done and lifecycle_sql.is_active(db, other):
            supersede(memory, other, memory_id, actor=ACTOR, reason=fact.reason or "contradicts")
            out["superseded"].append({"old_id": other, "new_id": memory_id})
