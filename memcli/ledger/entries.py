"""Decisions, tasks and checkpoints: the ledger a context bundle reads from.

A decision or a task is a row in its table plus a derived memory (kind `decision` / `task`,
category `decisions` / `tasks`) written through `memcli.derived.writer.write_memory`, so it is
searchable, linked to its neighbours, audited in `history`, and moves the thread revision (delta
header).
Superseding a decision keeps the old one: its status becomes `superseded`, both rows point at each
other, and the old memory is superseded by the new one with a `supersedes` edge. A task update
writes a new version of the task's memory and supersedes the previous version the same way.
Checkpoints are opaque JSON state blobs per (tenant, user, thread), overwritten on save.
Every text a write receives (and every key of a checkpoint) is redacted first
(`memcli.policy.redaction`);
each write returns the kinds it removed as `redacted`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from memcli.derived import writer
from memcli.derived.applimit import enforce_app_limit
from memcli.errors import NotFoundError, UsageError
from memcli.ledger import checkpoints, commands
from memcli.policy.redaction import check_sensitivity, redact_fields, redact_text
from memcli.store import ledger_sql
from memcli.store import owner as own
from memcli.store.filters import one_tenant_or_all

if TYPE_CHECKING:
    from memcli.store.handle import MemoryHandle

DECISION_SCOPES = ("project", "user", "global")
TASK_STATUSES = ("open", "doing", "done")
# The fields a person or agent wrote: redacted on every write (memcli.policy.redaction); ids are
# not.
_DECISION_TEXT = ("decision", "rationale", "constraints", "alternatives", "consequences", "refs")
_TASK_TEXT = ("title", "details", "refs")
DECISION_IMPORTANCE = 0.8  # decisions > tasks > messages (PRD 8.2, gamma term)
TASK_IMPORTANCE = 0.7


def _clean(items: list[str] | tuple[str, ...] | None) -> list[str]:
    return [s.strip() for s in (items or []) if s and s.strip()]


def decision_text(row: dict[str, Any]) -> str:
    """The memory text of a decision: what was decided, then why and with what trade-offs."""
    lines = [f"Decision: {row['decision']}"]
    for key, label in (("rationale", "Rationale"), ("constraints", "Constraints"),
                       ("alternatives", "Alternatives"), ("consequences", "Consequences")):
        if row.get(key):
            lines.append(f"{label}: " + "; ".join(row[key]))
    return "\n".join(lines)


@dataclass
class PendingWrite:
    """A decision or task checked, redacted and encoded, not yet written: `prepare_*` runs the
    models before any write lock; `store_*` writes it inside the caller's transaction."""

    row: dict[str, Any]
    redacted: list[str]
    encoded: tuple[Any, Any]
    channel: str = "private"
    importance: float = DECISION_IMPORTANCE
    actor: str | None = None  # history's actor (default: the agent, else "memcli")
    attributes: dict[str, Any] = field(default_factory=dict)  # extra memory attributes


def add_decision(
    memory: MemoryHandle,
    decision: str,
    *,
    rationale: list[str] | None = None,
    constraints: list[str] | None = None,
    alternatives: list[str] | None = None,
    consequences: list[str] | None = None,
    refs: list[str] | None = None,
    scope: str = "project",
    tenant_id: str | None = None,  # None: the memory's tenant
    user_id: str | None = None,
    session_id: str | None = None,
    agent_id: str | None = None,
    app_id: str | None = None,
    channel: str = "private",
    sensitivity: str = "none",
    importance: float = DECISION_IMPORTANCE,
    supersedes: int | None = None,
) -> dict[str, Any]:
    """Record an active decision; returns its row (with `memory_id`)."""
    pending = prepare_decision(
        memory, decision, rationale=rationale, constraints=constraints,
        alternatives=alternatives, consequences=consequences, refs=refs, scope=scope,
        tenant_id=tenant_id, user_id=user_id, session_id=session_id, agent_id=agent_id,
        app_id=app_id, channel=channel, sensitivity=sensitivity, importance=importance,
        supersedes=supersedes)
    with memory.db.transaction(), commands.for_pending(memory.db, "decision.add", pending):
        decision_id = store_decision(memory, pending)
        compaction = app_limit(memory, pending.row)
    return {**get_decision(memory, decision_id), "redacted": pending.redacted, **compaction}


def prepare_decision(memory: MemoryHandle, decision: str, *, channel: str = "private",
                     importance: float = DECISION_IMPORTANCE, actor: str | None = None,
                     attributes: dict[str, Any] | None = None,
                     **fields: Any) -> PendingWrite:
    """Check, redact and encode a decision (fields: those of `add_decision`); no write."""
    args: dict[str, Any] = dict.fromkeys((*_ROW_ARGS, "supersedes"))
    args.update(scope="project", sensitivity="none")
    unknown = set(fields) - set(args)
    if unknown:
        raise TypeError(f"prepare_decision() got unexpected fields {sorted(unknown)}")
    args.update(fields)
    row, redacted = _decision_row(memory, decision, **args)
    encoded = _encode(memory, decision_text(row))  # the models run before the write lock
    return PendingWrite(row, redacted, encoded, channel, importance, actor, attributes or {})


def store_decision(memory: MemoryHandle, pending: PendingWrite) -> int:
    """Write a prepared decision (inside the caller's transaction); its id."""
    return _store_decision(memory, pending.row, pending.encoded, pending.channel,
                           pending.importance, actor=pending.actor, extra=pending.attributes)


def app_limit(memory: MemoryHandle, row: dict[str, Any]) -> dict[str, Any]:
    """The app limit after a write to an app scope (`{"compaction": [...]}` when it acted)."""
    if not row.get("app_id"):
        return {}

    done = enforce_app_limit(memory, row["tenant_id"], row.get("user_id"), row["app_id"])
    return {"compaction": done} if done else {}


def _encode(memory: MemoryHandle, text: str) -> tuple[Any, Any]:
    """(vector, sparse terms) of a ledger memory's text, computed before its transaction, so
    no other writer waits for a model (`writer.encode_ahead`)."""
    return writer.encode_ahead(memory, [text])[text]


def _decision_row(memory: MemoryHandle, decision: str, *, rationale: list[str] | None,
                  constraints: list[str] | None, alternatives: list[str] | None,
                  consequences: list[str] | None, refs: list[str] | None, scope: str,
                  tenant_id: str | None, user_id: str | None, session_id: str | None,
                  agent_id: str | None, app_id: str | None, sensitivity: str,
                  supersedes: int | None) -> tuple[dict[str, Any], list[str]]:
    """A checked, redacted decision row and the kinds of secret removed from it."""
    if not decision.strip():
        raise UsageError("empty decision", "say what was decided")
    if scope not in DECISION_SCOPES:
        raise UsageError(f"unknown decision scope {scope!r}", "use project, user or global")
    check_sensitivity(sensitivity)
    evidence = _clean(refs)
    tenant_id = tenant_id or memory.tenant
    row = {
        "decision": decision.strip(),
        "rationale": _clean(rationale),
        "constraints": _clean(constraints),
        "alternatives": _clean(alternatives),
        "consequences": _clean(consequences),
        "refs": evidence,
        "scope": scope,
        "tenant_id": tenant_id,
        "user_id": user_id,
        "session_id": session_id,
        "agent_id": agent_id,
        "app_id": app_id,
        "supersedes": supersedes,
        "sensitivity": sensitivity,  # `high`: the store encrypts the row's texts
    }
    return redact_fields(row, _DECISION_TEXT)


def _scope_of(row: dict[str, Any]) -> dict[str, Any]:
    """The scope of a ledger entry's row, as its memory is written with."""
    return {k: row[k] for k in ("tenant_id", "user_id", "agent_id", "session_id", "app_id")}


def _store_decision(memory: MemoryHandle, row: dict[str, Any], encoded: tuple[Any, Any],
                    channel: str, importance: float, *, actor: str | None = None,
                    extra: dict[str, Any] | None = None) -> int:
    """Insert the decision and its memory (inside the caller's transaction); its id."""
    decision_id = ledger_sql.insert_decision(memory.db, row)
    memory_id = writer.write_memory(
        memory,
        content=decision_text(row),
        kind="decision",
        source_ids=cast("list[str]", row["refs"]),
        **_scope_of(row),
        category="decisions",
        channel=channel,
        sensitivity=row["sensitivity"],
        importance=importance,
        attributes={**(extra or {}), "decision_id": decision_id, "scope": row["scope"]},
        actor=actor or row["agent_id"] or "memcli",
        vector=encoded[0],
        sparse_terms=encoded[1],
    )
    ledger_sql.set_decision_memory(memory.db, decision_id, memory_id)
    return decision_id


def supersede_decision(
    memory: MemoryHandle, old_id: int, decision: str, *, owner: own.Owner | None = None,
    reason: str = "", **fields: Any
) -> dict[str, Any]:
    """A new decision replaces `old_id` (the owner's); the old one stays, superseded and linked."""
    old = own.decision(memory.db, old_id, owner or memory.owner())
    if old["status"] != "active":
        raise UsageError(
            f"decision {old_id} is already superseded by {old['superseded_by']}",
            f"supersede decision {old['superseded_by']} instead",
        )
    old_mem = memory.db.query(
        "SELECT channel, sensitivity FROM memories WHERE id = ?", (old["memory_id"],)
    )
    inherited = {
        k: old[k] for k in ("tenant_id", "user_id", "session_id", "agent_id", "app_id", "scope")
    }
    if old_mem:
        inherited.update(old_mem[0])
    unknown = set(fields) - {*_ROW_ARGS, "scope", "sensitivity", "channel", "importance"}
    if unknown:
        raise TypeError(f"supersede_decision() got unexpected fields {sorted(unknown)}")
    args = {**inherited, **{k: v for k, v in fields.items() if v is not None}}
    reason, reason_kinds = redact_text(reason)
    channel = args.pop("channel", "private")
    importance = args.pop("importance", DECISION_IMPORTANCE)
    args = {k: args.get(k) for k in _ROW_ARGS} | {"scope": args.get("scope") or "project",
                                                  "sensitivity": args.get("sensitivity") or "none"}
    row, row_kinds = _decision_row(memory, decision, supersedes=old_id, **args)
    encoded = _encode(memory, decision_text(row))  # the models run before the write lock
    pending = PendingWrite(row, row_kinds, encoded, channel, importance)
    with memory.db.transaction(), commands.for_pending(
            memory.db, "decision.supersede", pending, supersedes=old_id, reason=reason):
        new_id = store_superseding(memory, pending, old, reason)
    redacted = sorted({*row_kinds, *reason_kinds})
    return {**get_decision(memory, new_id), "redacted": redacted}


def store_superseding(memory: MemoryHandle, pending: PendingWrite, old: dict[str, Any],
                      reason: str = "") -> int:
    """Write a prepared decision that replaces the active decision `old` (inside the caller's
    transaction): the old row is marked superseded, its memory superseded by the new one."""
    new_id = store_decision(memory, pending)
    new = get_decision(memory, new_id)
    ledger_sql.mark_decision_superseded(memory.db, old["id"], new_id)
    if old["memory_id"] is not None:
        writer.supersede(
            memory,
            old["memory_id"],
            new["memory_id"],
            actor=pending.actor or pending.row["agent_id"] or "memcli",
            reason=reason or f"decision {new_id} supersedes {old['id']}",
        )
    return new_id


# The keyword arguments of `_decision_row` besides decision, scope, sensitivity and supersedes.
_ROW_ARGS = ("rationale", "constraints", "alternatives", "consequences", "refs", "tenant_id",
             "user_id", "session_id", "agent_id", "app_id")


def _found(row: dict[str, Any] | None, what: str, entry_id: int) -> dict[str, Any]:
    if row is None:
        raise NotFoundError(f"no {what} with id {entry_id}")
    return row


def _listed_tenant(memory: MemoryHandle, tenant_id: str | None, all_tenants: bool) -> str | None:
    """The tenant a listing reads: the one named, else the memory's; None for every tenant."""
    one_tenant_or_all(tenant_id, all_tenants)
    return None if all_tenants else tenant_id or memory.tenant


def get_decision(memory: MemoryHandle, decision_id: int) -> dict[str, Any]:
    return _found(ledger_sql.get_decision(memory.db, decision_id), "decision", decision_id)


def list_decisions(
    memory: MemoryHandle,
    *,
    status: str | None = "active",
    tenant_id: str | None = None,  # None: the memory's tenant
    all_tenants: bool = False,
    user_id: str | None = None,
    app_id: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    tenant = _listed_tenant(memory, tenant_id, all_tenants)
    if status not in (None, "active", "superseded"):
        raise UsageError(f"unknown decision status {status!r}", "use active, superseded or all")
    return ledger_sql.list_decisions(memory.db, status=status, tenant_id=tenant, user_id=user_id,
                                     app_id=app_id, limit=limit)


# -- tasks -----------------------------------------------------------------------------------
def task_text(row: dict[str, Any]) -> str:
    text = f"Task [{row['status']}]: {row['title']}"
    return f"{text}\n{row['details']}" if row.get("details") else text


def _check_status(status: str) -> None:
    if status not in TASK_STATUSES:
        raise UsageError(f"unknown task status {status!r}", "use open, doing or done")


def add_task(memory: MemoryHandle, title: str, *, details: str = "", status: str = "open",
             refs: list[str] | None = None, tenant_id: str | None = None,  # None: memory's
             user_id: str | None = None, session_id: str | None = None,
             agent_id: str | None = None, app_id: str | None = None, channel: str = "private",
             sensitivity: str = "none") -> dict[str, Any]:
    pending = prepare_task(memory, title, details=details, status=status, refs=refs,
                           tenant_id=tenant_id, user_id=user_id, session_id=session_id,
                           agent_id=agent_id, app_id=app_id, channel=channel,
                           sensitivity=sensitivity)
    with memory.db.transaction(), commands.for_pending(memory.db, "task.add", pending):
        task_id = store_task(memory, pending)
        compaction = app_limit(memory, pending.row)
    return {**get_task(memory, task_id), "redacted": pending.redacted, **compaction}


def prepare_task(memory: MemoryHandle, title: str, *, details: str = "", status: str = "open",
                 refs: list[str] | None = None, tenant_id: str | None = None,
                 user_id: str | None = None, session_id: str | None = None,
                 agent_id: str | None = None, app_id: str | None = None,
                 channel: str = "private", sensitivity: str = "none",
                 actor: str | None = None,
                 attributes: dict[str, Any] | None = None) -> PendingWrite:
    """Check, redact and encode a task; no write (`store_task` writes it)."""
    if not title.strip():
        raise UsageError("empty task title")
    _check_status(status)
    check_sensitivity(sensitivity)
    tenant_id = tenant_id or memory.tenant
    row = {
        "title": title.strip(),
        "details": details.strip(),
        "status": status,
        "refs": _clean(refs),
        "tenant_id": tenant_id,
        "user_id": user_id,
        "session_id": session_id,
        "agent_id": agent_id,
        "app_id": app_id,
        "sensitivity": sensitivity,  # `high`: the store encrypts the row's texts
    }
    row, redacted = redact_fields(row, _TASK_TEXT)
    encoded = _encode(memory, task_text(row))  # the models run before the write lock
    return PendingWrite(row, redacted, encoded, channel, TASK_IMPORTANCE, actor,
                        attributes or {})


def store_task(memory: MemoryHandle, pending: PendingWrite) -> int:
    """Write a prepared task (inside the caller's transaction); its id."""
    row = pending.row
    task_id = ledger_sql.insert_task(memory.db, row)
    memory_id = _write_task_memory(memory, {**row, "id": task_id}, pending.channel,
                                   row["sensitivity"], pending.encoded, actor=pending.actor,
                                   extra=pending.attributes)
    ledger_sql.update_task(memory.db, task_id, {"memory_id": memory_id})
    return task_id


def _write_task_memory(memory: MemoryHandle, row: dict[str, Any], channel: str, sensitivity: str,
                       encoded: tuple[Any, Any], *, actor: str | None = None,
                       extra: dict[str, Any] | None = None) -> int:
    return writer.write_memory(
        memory,
        content=task_text(row),
        kind="task",
        source_ids=list(row.get("refs") or []),
        **_scope_of(row),
        category="tasks",
        channel=channel,
        sensitivity=sensitivity,
        importance=TASK_IMPORTANCE,
        attributes={**(extra or {}), "task_id": row["id"], "status": row["status"]},
        actor=actor or row["agent_id"] or "memcli",
        vector=encoded[0],
        sparse_terms=encoded[1],
    )


def update_task(memory: MemoryHandle, task_id: int, *, status: str | None = None,
                title: str | None = None, details: str | None = None,
                refs: list[str] | None = None, owner: own.Owner | None = None,
                reason: str = "") -> dict[str, Any]:
    """Change the owner's task; its memory gets a new version that supersedes the previous one
    (`reason`: the supersession's history reason, default `task ID: <fields changed>`)."""
    task = own.task(memory.db, task_id, owner or memory.owner())
    changes, redacted = task_changes(task, status=status, title=title, details=details, refs=refs)
    if not changes:
        raise UsageError(
            f"task {task_id} already looks like that", "give --status, --title, --details or --refs"
        )
    encoded = _encode(memory, task_text({**task, **changes}))  # models run before the lock
    channel, sensitivity = _channel_of(memory, task["memory_id"])
    # The event holds the changes (refs: those added), as `rebuild` applies them again.
    fields = {"task_id": task_id, **{k: changes.get(k) for k in ("status", "title", "details")},
              "reason": reason}
    added = sorted(set(changes.get("refs", [])) - set(task["refs"]))
    with memory.db.transaction(), commands.for_row(
            memory.db, "task.update", fields, {**task, "refs": added}, channel=channel,
            sensitivity=sensitivity) as event_id:
        store_task_update(memory, task, changes, encoded, reason=reason,
                          extra={"event_id": event_id})
    return {**get_task(memory, task_id), "redacted": redacted}


def task_changes(task: dict[str, Any], *, status: str | None = None, title: str | None = None,
                 details: str | None = None, refs: list[str] | None = None
                 ) -> tuple[dict[str, Any], list[str]]:
    """The fields that would change (checked, redacted; refs are added to the task's) and the
    kinds of secret removed; no change: an empty dict."""
    changes: dict[str, Any] = {}
    if status is not None:
        _check_status(status)
        changes["status"] = status
    if title is not None:
        if not title.strip():
            raise UsageError("empty task title")
        changes["title"] = title.strip()
    if details is not None:
        changes["details"] = details.strip()
    if refs is not None:
        changes["refs"] = _clean(refs)
    changes, redacted = redact_fields(changes, _TASK_TEXT)
    if "refs" in changes:
        changes["refs"] = sorted(set(task["refs"]) | set(changes["refs"]))
    return {k: v for k, v in changes.items() if task.get(k) != v}, redacted


def store_task_update(memory: MemoryHandle, task: dict[str, Any], changes: dict[str, Any],
                      encoded: tuple[Any, Any], *, reason: str = "", actor: str | None = None,
                      extra: dict[str, Any] | None = None) -> None:
    """Write `changes` to `task` (inside the caller's transaction): a new memory version that
    supersedes the previous one. `encoded`: the new text's (vector, sparse terms)."""
    channel, sensitivity = _channel_of(memory, task["memory_id"])
    new_memory = _write_task_memory(memory, {**task, **changes}, channel, sensitivity, encoded,
                                    actor=actor, extra=extra)
    ledger_sql.update_task(memory.db, task["id"], {**changes, "memory_id": new_memory})
    if task["memory_id"] is not None:
        writer.supersede(memory, task["memory_id"], new_memory, actor=actor or "memcli",
                         reason=reason or f"task {task['id']}: " + ", ".join(sorted(changes)))


def _channel_of(memory: MemoryHandle, memory_id: int | None) -> tuple[str, str]:
    """(channel, sensitivity) of a task's current memory: its next version keeps them."""
    row = memory.db.query("SELECT channel, sensitivity FROM memories WHERE id = ?", (memory_id,))
    return (row[0]["channel"], row[0]["sensitivity"]) if row else ("private", "none")


def get_task(memory: MemoryHandle, task_id: int) -> dict[str, Any]:
    return _found(ledger_sql.get_task(memory.db, task_id), "task", task_id)


def list_tasks(
    memory: MemoryHandle,
    *,
    statuses: tuple[str, ...] = (),
    tenant_id: str | None = None,  # None: the memory's tenant
    all_tenants: bool = False,
    user_id: str | None = None,
    app_id: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    tenant = _listed_tenant(memory, tenant_id, all_tenants)
    for status in statuses:
        _check_status(status)
    return ledger_sql.list_tasks(memory.db, statuses=tuple(statuses), tenant_id=tenant,
                                 user_id=user_id, app_id=app_id, limit=limit)


# -- checkpoints (memcli.ledger.checkpoints; here too, as part of the ledger's API) -------------
def save_checkpoint(memory: MemoryHandle, data: Any, **options: Any) -> dict[str, Any]:
    """Store an agent's state for (user, thread), replacing the previous one (redacted first);
    see `memcli.ledger.checkpoints.save_checkpoint`."""
    return checkpoints.save_checkpoint(memory, data, **options)


def load_checkpoint(memory: MemoryHandle, **options: Any) -> dict[str, Any]:
    """The saved state of (user, thread); see `memcli.ledger.checkpoints.load_checkpoint`."""
    return checkpoints.load_checkpoint(memory, **options)
