"""SQL for the ledger: decisions, tasks and checkpoints.

Decisions and tasks are rows over a derived memory (written by memcli.derived.writer), so the
privacy
and scope filters of a context bundle run on that memory: `Filters.sql()` over `memories m`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.core.records import utcnow
from memcli.store.batching import marks
from memcli.store.sealing import seal_if

if TYPE_CHECKING:
    from memcli.store.connection import Database
    from memcli.store.filters import Filters

_LIST_FIELDS = ("rationale", "constraints", "alternatives", "consequences", "refs")


def _decode(row: dict[str, Any]) -> dict[str, Any]:
    for key in _LIST_FIELDS:
        if key in row and isinstance(row[key], str):
            row[key] = json.loads(row[key])
    return row


# -- decisions -------------------------------------------------------------------------------
def insert_decision(db: Database, row: dict[str, Any]) -> int:
    now = utcnow()
    values = decision_values(db, row, ("tenant_id", "user_id", "session_id", "agent_id",
                                       "app_id", "scope", "decision", "supersedes"))
    return db.insert(
        "INSERT INTO decisions (tenant_id, user_id, session_id, agent_id, app_id, status, scope,"
        " decision, rationale, constraints, alternatives, consequences, refs, supersedes,"
        " created_at, updated_at) VALUES (:tenant_id, :user_id, :session_id, :agent_id, :app_id,"
        " 'active', :scope, :decision, :rationale, :constraints, :alternatives, :consequences,"
        " :refs, :supersedes, :now, :now) RETURNING id",
        {**values, "now": now},
    )


def decision_values(db: Database, row: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The `keys` of a decision and its lists as stored: lists as JSON, the text and the
    lists sealed when the decision is `high` (recording it, and rebuild bringing it back)."""
    values = {k: row.get(k) for k in keys}
    values.update({k: json.dumps(list(row.get(k) or []), ensure_ascii=False) for k in _LIST_FIELDS})
    if row.get("sensitivity") == "high":
        for key in ("decision", *_LIST_FIELDS):
            values[key] = seal_if(db, True, values[key])
    return values


def set_decision_memory(db: Database, decision_id: int, memory_id: int) -> None:
    db.execute("UPDATE decisions SET memory_id = ? WHERE id = ?", (memory_id, decision_id))


def mark_decision_superseded(db: Database, decision_id: int, by: int) -> None:
    db.execute(
        "UPDATE decisions SET status = 'superseded', superseded_by = ?, updated_at = ?"
        " WHERE id = ?",
        (by, utcnow(), decision_id),
    )


def get_decision(db: Database, decision_id: int) -> dict[str, Any] | None:
    return _get(db, "decisions", decision_id)


def list_decisions(
    db: Database,
    *,
    status: str | None,
    tenant_id: str | None,
    user_id: str | None,
    app_id: str | None,
    limit: int,
) -> list[dict[str, Any]]:
    return _listed(db, "decisions", (status,) if status else (), tenant_id, user_id, app_id,
                   limit)


def _bundle_clauses(alias: str, filters: Filters, user_id: str | None) -> tuple[str, list[Any]]:
    """The ledger table's own scope (so its index drives the query: CROSS JOIN keeps it the
    outer loop instead of a scan of the tenant's memories), then the memory's filters."""
    where, params = filters.sql()
    clauses, head = [], []
    if filters.tenant_id is not None:
        clauses.append(f"{alias}.tenant_id = ?")
        head.append(filters.tenant_id)
    clauses.append(where)
    if user_id is not None:
        clauses.append("(m.user_id = ? OR m.user_id IS NULL)")
        params = [*params, user_id]
    return " AND ".join(clauses), [*head, *params]


def bundle_decisions(
    db: Database, filters: Filters, user_id: str | None, limit: int
) -> list[dict[str, Any]]:
    """Active decisions a bundle may show: the memory passes the filters; the user's own and
    tenant-wide ones (user_id NULL). Newest first."""
    return _bundled(db, "decisions", "m.category AS category", "d.status = 'active'",
                    "d.updated_at DESC, d.id DESC", filters, user_id, limit)


def bundle_superseded_decisions(
    db: Database, filters: Filters, user_id: str | None, limit: int
) -> list[dict[str, Any]]:
    """Superseded decisions a bundle may know of (their refs mark their evidence as replaced);
    the filters' states do not apply (the memory of a superseded decision is superseded)."""
    return _bundled(db, "decisions", None, "d.status = 'superseded'",
                    "d.updated_at DESC, d.id DESC", filters, user_id, limit)


# -- tasks -----------------------------------------------------------------------------------
def insert_task(db: Database, row: dict[str, Any]) -> int:
    now = utcnow()
    if row.get("sensitivity") == "high":
        row = {**row, **{k: seal_if(db, True, row.get(k) or "") for k in ("title", "details")},
               "refs": seal_if(db, True, json.dumps(list(row.get("refs") or []),
                                                    ensure_ascii=False))}
    return db.insert(
        "INSERT INTO tasks (tenant_id, user_id, session_id, agent_id, app_id, status, title,"
        " details, refs, created_at, updated_at) VALUES (:tenant_id, :user_id, :session_id,"
        " :agent_id, :app_id, :status, :title, :details, :refs, :now, :now) RETURNING id",
        {
            **{
                k: row.get(k)
                for k in (
                    "tenant_id",
                    "user_id",
                    "session_id",
                    "agent_id",
                    "app_id",
                    "status",
                    "title",
                    "details",
                )
            },
            "refs": row["refs"] if isinstance(row.get("refs"), str)
            else json.dumps(list(row.get("refs") or []), ensure_ascii=False),
            "now": now,
        },
    )


def update_task(db: Database, task_id: int, changes: dict[str, Any]) -> None:
    allowed = {"status", "title", "details", "refs", "memory_id"}
    sets = {
        k: (json.dumps(v, ensure_ascii=False) if k == "refs" else v)
        for k, v in changes.items()
        if k in allowed
    }
    if db.scalar("SELECT m.sensitivity FROM tasks t JOIN memories m ON m.id = t.memory_id"
                 " WHERE t.id = ?", (task_id,)) == "high":
        sets = {k: (seal_if(db, True, v) if k in {"title", "details", "refs"} else v)
                for k, v in sets.items()}
    sets["updated_at"] = utcnow()
    assignments = ", ".join(f"{k} = :{k}" for k in sets)
    db.execute(f"UPDATE tasks SET {assignments} WHERE id = :id", {**sets, "id": task_id})


def get_task(db: Database, task_id: int) -> dict[str, Any] | None:
    return _get(db, "tasks", task_id)


def list_tasks(
    db: Database,
    *,
    statuses: tuple[str, ...],
    tenant_id: str | None,
    user_id: str | None,
    app_id: str | None,
    limit: int,
) -> list[dict[str, Any]]:
    return _listed(db, "tasks", statuses, tenant_id, user_id, app_id, limit)


def bundle_tasks(
    db: Database, filters: Filters, user_id: str | None, limit: int
) -> list[dict[str, Any]]:
    """Open and in-progress tasks a bundle may show: doing first, then newest."""
    return _bundled(db, "tasks", None, "t.status IN ('open', 'doing')",
                    "t.status = 'open', t.updated_at DESC, t.id DESC", filters, user_id, limit)


# -- what decisions and tasks share: a table aliased by its initial (d, t) -------------------
def _get(db: Database, table: str, row_id: int) -> dict[str, Any] | None:
    rows = db.query(f"SELECT * FROM {table} WHERE id = ?", (row_id,))
    return _decode(rows[0]) if rows else None


def _listed(db: Database, table: str, statuses: tuple[str, ...], tenant_id: str | None,
            user_id: str | None, app_id: str | None, limit: int) -> list[dict[str, Any]]:
    """Rows of the scope (each given column must match) in the statuses (any when empty),
    newest id first."""
    alias = table[0]
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("tenant_id", tenant_id), ("user_id", user_id), ("app_id", app_id)):
        if value is not None:
            clauses.append(f"{alias}.{column} = ?")
            params.append(value)
    if statuses:
        clauses.append(f"{alias}.status IN ({marks(statuses)})")
        params.extend(statuses)
    where = " AND ".join(clauses) or "1 = 1"
    rows = db.query(
        f"SELECT {alias}.* FROM {table} {alias} WHERE {where} ORDER BY {alias}.id DESC LIMIT ?",
        (*params, limit),
    )
    return [_decode(r) for r in rows]


def _bundled(db: Database, table: str, extra: str | None, status: str, order: str,
             filters: Filters, user_id: str | None, limit: int) -> list[dict[str, Any]]:
    """Rows in `status` whose memory passes the bundle's filters, with the memory's
    sensitivity (and the `extra` columns), in `order`."""
    alias = table[0]
    where, params = _bundle_clauses(alias, filters, user_id)
    columns = ", ".join(c for c in (f"{alias}.*", "m.sensitivity AS sensitivity", extra) if c)
    rows = db.query(
        f"SELECT {columns} FROM {table} {alias} {db.dialect.ORDERED_JOIN} memories m"
        f" ON m.id = {alias}.memory_id WHERE {status} AND {where} ORDER BY {order} LIMIT ?",
        (*params, limit),
    )
    return [_decode(r) for r in rows]


# -- checkpoints -----------------------------------------------------------------------------
def save_checkpoint(
    db: Database, tenant_id: str, user_id: str, thread_id: str, data: str, sensitivity: str
) -> dict[str, Any]:
    now = utcnow()
    db.execute(
        "INSERT INTO checkpoints (tenant_id, user_id, thread_id, data, sensitivity, version,"
        " created_at, updated_at) VALUES (?, ?, ?, ?, ?, 1, ?, ?)"
        " ON CONFLICT (tenant_id, user_id, thread_id) DO UPDATE SET data = excluded.data,"
        " sensitivity = excluded.sensitivity, version = checkpoints.version + 1,"
        " updated_at = excluded.updated_at",
        (tenant_id, user_id, thread_id, seal_if(db, sensitivity == "high", data), sensitivity,
         now, now),
    )
    return get_checkpoint(db, tenant_id, user_id, thread_id) or {}


def get_checkpoint(
    db: Database, tenant_id: str, user_id: str, thread_id: str
) -> dict[str, Any] | None:
    rows = db.query(
        "SELECT tenant_id, user_id, thread_id, data, sensitivity, version, created_at,"
        " updated_at FROM checkpoints WHERE tenant_id = ? AND user_id = ? AND thread_id = ?",
        (tenant_id, user_id, thread_id),
    )
    return rows[0] if rows else None


def checkpoint_version(
    db: Database, tenant_id: str, user_id: str, thread_id: str, ref: str
) -> dict[str, Any] | None:
    """The newest history row of a checkpoint save named `ref` ("checkpoint vN"), meta
    decoded (a purge may have emptied it)."""
    rows = db.query(
        "SELECT meta, ts FROM history WHERE tenant_id = ? AND user_id = ? AND session_id = ?"
        " AND memory_id IS NULL AND actor = 'checkpoint' AND new_ref = ?"
        " ORDER BY id DESC LIMIT 1",
        (tenant_id, user_id, thread_id, ref),
    )
    if not rows:
        return None
    return {"meta": json.loads(rows[0]["meta"]), "ts": rows[0]["ts"]}


def active_decision_of_memory(db: Database, memory_id: int) -> dict[str, Any] | None:
    """The active decision whose memory this is, if any (consolidation supersedes it)."""
    rows = db.query("SELECT * FROM decisions WHERE memory_id = ? AND status = 'active'",
                    (memory_id,))
    return _decode(rows[0]) if rows else None
