"""The ledger stage of `memcli rebuild`: decisions and tasks recorded as events come back.

A `decision` or `task_update` event (memcli.ledger.from_events) wrote a ledger row and its memory;
the memory's ADD history row names the event and the row (`decision:ID` / `task:ID`). The
events are replayed in log order: a decision with its fields, refs and the decision it
supersedes; a task created, then each update's status, title, details and refs applied to it
(`entries.task_changes`, as ingest does). A row that is missing comes back with its id, its
memory (and each task version's memory) with the id history recorded and the state history
replays (forget, restore, pin, confirm, supersede), and supersession links between decisions
are set again. A row that exists is kept as it is; a memory a purge removed is never brought
back, nor the row over it.

`decision add` / `supersede` and `task add` / `update` record a `command` event first
(memcli.ledger.commands); its op says which of the two it reads as (`from_events.from_row`),
and its refs are the row's own (no event id first). What this stage cannot bring back (the
report says so): rows consolidation wrote (no event holds them: they stay, see KEPT in
rebuild_derived.py, or are reported lost), rows such commands wrote before they recorded
events, and rows of events written before their ADD history row named the row (no id to give
back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.errors import UsageError, ValidationError
from memcli.ledger import entries
from memcli.ledger.from_events import LedgerEvent, from_row
from memcli.store import rebuild_ledger_sql, rebuild_sql

if TYPE_CHECKING:
    from memcli.store.connection import Database


def replay_state(row: dict[str, Any], history: list[dict[str, Any]]) -> None:
    """A lost row's state from its history: forget, restore, pin, confirm, supersede, merge."""
    for h in history:
        meta = h["meta"] if isinstance(h["meta"], dict) else {}
        if h["op"] in ("DELETE", "TTL") and h["new_ref"] == "soft_deleted":
            row["state"], row["purge_at"] = "soft_deleted", meta.get("purge_at")
        elif h["op"] == "RESTORE":
            row["state"], row["purge_at"] = "active", None
        elif h["op"] == "UPDATE":
            if "superseded_by" in meta:
                row["state"], row["valid_to"] = "superseded", meta.get("valid_to", h["ts"])
            if "pinned" in meta:
                row["pinned"] = int(bool(meta["pinned"]))
            if meta.get("confirmed"):
                row["decay_rate"], row["confidence"] = 0.0, 1.0
        elif h["op"] == "MERGE":  # a near-duplicate joined it: its confidence renewed
            row["confidence"] = 1.0
        # An edge to a neighbour, and a consent decision's audit row, leave the row as it was.
        if h["op"] != "LINK" and not (h["op"] == "UPDATE" and "decision" in meta
                                      and "proposal_id" in meta):
            row["updated_at"] = h["ts"]


def plan_ledger(db: Database) -> dict[str, Any]:
    """Replay the decision and task events: every row they describe, with its memories."""
    # A row written before its memory's ADD history row named it: its memory still says.
    written = {
        **rebuild_ledger_sql.written_by_memories(db),
        **rebuild_ledger_sql.written_by_events(db),
    }
    plan: dict[str, Any] = {"decisions": {}, "tasks": {}, "links": [], "unrecorded": [],
                            "not_created_by_events": [], "unreadable": []}
    for event in rebuild_ledger_sql.ledger_events(db):
        try:
            parsed = from_row(event)
        except ValidationError:
            plan["unreadable"].append(event["event_id"])
            continue
        if parsed is None:
            continue
        recorded = written.get(event["event_id"])
        creates = parsed.kind == "decision" or parsed.fields["task_id"] is None
        if recorded is None and creates:
            plan["unrecorded"].append(event["event_id"])
            continue
        _replay_event(plan, parsed, recorded, event["ts"])
    plan["present"] = {
        "decisions": rebuild_ledger_sql.ids_of(db, "decisions"),
        "tasks": rebuild_ledger_sql.ids_of(db, "tasks"),
    }
    plan["not_created_by_events"] = [e for e, task_id in plan["not_created_by_events"]
                                     if task_id not in plan["present"]["tasks"]]
    versions = [v for d in plan["decisions"].values() for v in d["versions"]]
    versions += [v for t in plan["tasks"].values() for v in t["versions"]]
    present = rebuild_sql.existing_ids(db, [v["id"] for v in versions])
    plan["memories"] = [v for v in versions if v["id"] not in present and not v["purged"]]
    alive = present | {v["id"] for v in plan["memories"]}
    for table in ("decisions", "tasks"):
        plan[f"restore_{table}"] = [
            row for row_id, row in sorted(plan[table].items())
            if row_id not in plan["present"][table] and row["versions"][-1]["id"] in alive]
    return plan


def _replay_event(plan: dict[str, Any], event: LedgerEvent,
                  recorded: tuple[str, int, int, str, bool] | None, event_ts: str) -> None:
    """Apply one event to the plan. `recorded`: what its ADD history row says it wrote (None:
    an update whose version memory no row names; its changes still apply)."""
    fields, scope = event.fields, event.scope
    if recorded is None:
        row_id, memory_id, ts, purged = fields["task_id"], None, event_ts, False
    else:
        _, row_id, memory_id, ts, purged = recorded
    if event.kind == "decision":
        if memory_id is not None:  # always: an unrecorded decision is not replayed
            _replay_decision(plan, event, row_id, memory_id, ts, purged)
        return
    task = plan["tasks"].get(row_id)
    if fields["task_id"] is None:
        task = {"id": row_id, "title": fields["title"], "details": fields["details"] or "",
                "status": fields["status"] or "open", "refs": list(scope["refs"]),
                **{k: scope[k] for k in ("tenant_id", "user_id", "session_id", "agent_id",
                                         "app_id", "sensitivity", "channel")},
                "created_at": ts, "versions": []}
        plan["tasks"][row_id] = task
    elif task is None:  # a task `task add` created: kept if it exists, else lost
        plan["not_created_by_events"].append((event.event_id, row_id))
        return
    else:
        try:
            # (a command's update names only the refs it added, maybe none)
            changes, _ = entries.task_changes(task, status=fields["status"],
                                             title=fields["title"], details=fields["details"],
                                             refs=scope["refs"] or None)
        except UsageError:
            plan["unreadable"].append(event.event_id)
            return
        task.update(changes)
    task["updated_at"] = ts
    if memory_id is not None:
        task["versions"].append(_memory(task, "task", entries.task_text(task), memory_id, ts,
                                        purged, task["channel"], event.event_id))


def _replay_decision(plan: dict[str, Any], event: LedgerEvent, row_id: int, memory_id: int,
                     ts: str, purged: bool) -> None:
    fields, scope = event.fields, event.scope
    row = {"id": row_id, **{k: v for k, v in fields.items() if k != "supersedes"},
           **{k: scope[k] for k in ("tenant_id", "user_id", "session_id", "agent_id",
                                    "app_id", "sensitivity", "refs")},
           "created_at": ts, "updated_at": ts, "versions": []}
    row["versions"].append(_memory(row, "decision", entries.decision_text(row), memory_id,
                                   ts, purged, scope["channel"], event.event_id))
    plan["decisions"][row_id] = row
    if fields["supersedes"] is not None:
        plan["links"].append((fields["supersedes"], row_id, ts))


def _memory(row: dict[str, Any], kind: str, content: str, memory_id: int, ts: str,
            purged: bool, channel: str, event_id: str) -> dict[str, Any]:
    """The memory row `ledger` wrote for this event (as `writer.write_memory` writes it)."""
    if kind == "decision":
        attributes = {"event_id": event_id, "decision_id": row["id"], "scope": row["scope"]}
        importance, category = row.get("importance", entries.DECISION_IMPORTANCE), "decisions"
    else:
        attributes = {"event_id": event_id, "task_id": row["id"], "status": row["status"]}
        importance, category = entries.TASK_IMPORTANCE, "tasks"
    return {
        "id": memory_id, "kind": kind, "category": category, "content": content,
        **{k: row[k] for k in ("tenant_id", "user_id", "agent_id", "session_id", "app_id",
                               "sensitivity")},
        "run_id": None, "channel": channel, "actor_type": "memcli",
        "actor_id": row["agent_id"] or "memcli", "event_id": None, "event_seq": None,
        "chunk_index": 0, "token_count": max(1, (len(content) + 3) // 4),
        "importance": importance, "pinned": 0, "confidence": 1.0, "decay_rate": 0.01,
        "event_time": ts, "created_at": ts, "updated_at": ts, "valid_from": ts,
        "valid_to": None, "state": "active", "purge_at": None,
        "source_ids": list(row["refs"]), "attributes": attributes, "purged": purged,
    }


def apply_ledger(db: Database, plan: dict[str, Any]) -> None:
    """Write what the plan brings back (inside the stage's transaction)."""
    history = rebuild_sql.history_of(db, [m["id"] for m in plan["memories"]])
    for row in plan["memories"]:
        replay_state(row, history.get(row["id"], []))
        rebuild_sql.insert_episode(db, {k: v for k, v in row.items() if k != "purged"})
    for row in plan["restore_decisions"]:
        rebuild_ledger_sql.restore_decision(db, {**row, "memory_id": row["versions"][-1]["id"]})
    for row in plan["restore_tasks"]:
        rebuild_ledger_sql.restore_task(db, {**row, "memory_id": row["versions"][-1]["id"]})
    restored = {r["id"] for r in plan["restore_decisions"]}
    exists = plan["present"]["decisions"] | restored
    for old, new, ts in plan["links"]:
        if (old in restored or new in restored) and old in exists and new in exists:
            rebuild_ledger_sql.link_decisions(db, old, new, ts)


def summary(plan: dict[str, Any]) -> dict[str, Any]:
    """The stage's counts and ids, for the report."""
    return {"decisions": len(plan["decisions"]), "tasks": len(plan["tasks"]),
            "restored_decisions": [r["id"] for r in plan["restore_decisions"]][:100],
            "restored_tasks": [r["id"] for r in plan["restore_tasks"]][:100],
            "restored_memories": [m["id"] for m in plan["memories"]][:100]}


def cannot(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """What the stage could not bring back, for the report's `cannot_rebuild`."""
    out = []
    for key, what, why in (
            ("unrecorded", "decision and task events whose ledger row history does not name",
             "written before a ledger memory's history row named its row: no id to give back"),
            ("not_created_by_events", "task updates of a task no event created",
             "the task was written by `task add` (not an event); if its row is gone, it is "
             "lost with it"),
            ("unreadable", "decision and task events that no longer read as a ledger write",
             "their content does not pass today's checks")):
        if plan[key]:
            out.append({"what": what, "event_ids": plan[key][:100], "count": len(plan[key]),
                        "why": why})
    return out
