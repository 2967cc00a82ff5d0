"""SQL for the ledger stage of `memcli rebuild`: the decision and task events, what history
says each wrote, and the rows brought back with their ids (memcli/lifecycle/rebuild_ledger.py).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.store.ledger_sql import decision_values
from memcli.store.sealing import seal_if

if TYPE_CHECKING:
    from memcli.store.connection import Database


def ledger_events(db: Database) -> list[dict[str, Any]]:
    """The decision and task events, and memcli's own `command` events (their op says
    whether they wrote a decision or a task: memcli.ledger.from_events.from_row), oldest first
    (a secret one wrote no row: left out)."""
    return db.query(
        "SELECT seq, event_id, ts, tenant_id, user_id, agent_id, session_id, app_id, channel,"
        " kind, sensitivity, content, refs FROM events WHERE kind IN ('decision', 'task_update',"
        " 'command') AND sensitivity != 'secret' ORDER BY seq")


def written_by_events(db: Database) -> dict[str, tuple[str, int, int, str, bool]]:
    """event id -> (kind, ledger id, memory id, time, purged) of the ledger memory the event
    wrote, as its ADD history row recorded them (`decision:ID` / `task:ID` in old_ref). A
    purge empties the meta of its memories' rows (ADD rows always have one): purged."""
    out: dict[str, tuple[str, int, int, str, bool]] = {}
    for event_id, ref, mid, ts, meta in db.execute(
            "SELECT event_id, old_ref, memory_id, ts, meta FROM history WHERE op = 'ADD'"
            " AND event_id IS NOT NULL AND memory_id IS NOT NULL AND old_ref IS NOT NULL"
            " ORDER BY id"):
        kind, _, row_id = str(ref).partition(":")
        if kind in ("decision", "task") and row_id.isdigit():
            out.setdefault(event_id, (kind, int(row_id), int(mid), ts, meta == "{}"))
    return out


def written_by_memories(db: Database) -> dict[str, tuple[str, int, int, str, bool]]:
    """`written_by_events` as the decision and task memories that exist say it (their
    attributes name the event and the row)."""
    out: dict[str, tuple[str, int, int, str, bool]] = {}
    for mid, kind, attributes, created in db.execute(
            "SELECT id, kind, attributes, created_at FROM memories WHERE kind IN"
            " ('decision', 'task') AND event_id IS NULL ORDER BY id"):
        try:
            found = json.loads(attributes or "{}")
        except ValueError:
            continue
        event_id, row_id = found.get("event_id"), found.get(f"{kind}_id")
        if isinstance(event_id, str) and isinstance(row_id, int):
            out.setdefault(event_id, (kind, row_id, int(mid), created, False))
    return out


def ids_of(db: Database, table: str) -> set[int]:
    assert table in ("decisions", "tasks", "memories")
    return {int(r[0]) for r in db.execute(f"SELECT id FROM {table}")}


def restore_decision(db: Database, row: dict[str, Any]) -> None:
    """A decision with the id, memory and times it had (`supersedes` / `superseded_by` are
    set after every row is back: `link_decisions`)."""
    values = decision_values(db, {**row, "decision": str(row.get("decision"))},
                             ("id", "memory_id", "tenant_id", "user_id", "session_id",
                              "agent_id", "app_id", "scope", "decision", "created_at",
                              "updated_at"))
    db.execute(
        "INSERT INTO decisions (id, memory_id, tenant_id, user_id, session_id, agent_id, app_id,"
        " status, scope, decision, rationale, constraints, alternatives, consequences, refs,"
        " created_at, updated_at) VALUES (:id, :memory_id, :tenant_id, :user_id, :session_id,"
        " :agent_id, :app_id, 'active', :scope, :decision, :rationale, :constraints,"
        " :alternatives, :consequences, :refs, :created_at, :updated_at)", values)


def link_decisions(db: Database, old_id: int, new_id: int, ts: str) -> None:
    """`new_id` supersedes `old_id` (both rows exist)."""
    db.execute("UPDATE decisions SET status = 'superseded', superseded_by = ?, updated_at = ?"
               " WHERE id = ? AND superseded_by IS NULL", (new_id, ts, old_id))
    db.execute("UPDATE decisions SET supersedes = ? WHERE id = ? AND supersedes IS NULL",
               (old_id, new_id))


def restore_task(db: Database, row: dict[str, Any]) -> None:
    """A task with the id, current memory and times it had."""
    high = row.get("sensitivity") == "high"
    values = {k: row.get(k) for k in ("id", "memory_id", "tenant_id", "user_id", "session_id",
                                      "agent_id", "app_id", "status", "created_at",
                                      "updated_at")}
    values["title"] = seal_if(db, high, row["title"])
    values["details"] = seal_if(db, high, row.get("details") or "")
    values["refs"] = seal_if(db, high, json.dumps(list(row.get("refs") or []),
                                                  ensure_ascii=False))
    db.execute(
        "INSERT INTO tasks (id, memory_id, tenant_id, user_id, session_id, agent_id, app_id,"
        " status, title, details, refs, created_at, updated_at) VALUES (:id, :memory_id,"
        " :tenant_id, :user_id, :session_id, :agent_id, :app_id, :status, :title, :details,"
        " :refs, :created_at, :updated_at)", values)
