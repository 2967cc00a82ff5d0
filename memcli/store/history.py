"""SQL for the audit trail, newest first."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memcli.store.connection import Database


def list_history(db: Database, *, memory_id: int | None = None, tenant_id: str | None = None,
                 user_id: str | None = None, session_id: str | None = None,
                 limit: int = 100) -> list[dict[str, Any]]:
    """History rows, newest first; `tenant_id` None: every tenant. A row written without its
    scope (a link or a merge written before links carried their memory's scope) belongs to the
    tenant, user and session of its memory."""
    clauses: list[str] = []
    params: list[Any] = []
    if memory_id is not None:
        clauses.append("h.memory_id = ?")
        params.append(memory_id)
    for column, value in (("user_id", user_id), ("session_id", session_id)):
        if value is not None:
            clauses.append(f"(h.{column} = ? OR (h.tenant_id IS NULL AND h.{column} IS NULL"
                           f" AND EXISTS (SELECT 1 FROM memories m WHERE m.id = h.memory_id"
                           f" AND m.{column} = ?)))")
            params.extend((value, value))
    if tenant_id is not None:
        clauses.append("(h.tenant_id = ? OR (h.tenant_id IS NULL AND EXISTS (SELECT 1 FROM"
                       " memories m WHERE m.id = h.memory_id AND m.tenant_id = ?)))")
        params.extend((tenant_id, tenant_id))
    where = " AND ".join(clauses) or "1 = 1"
    rows = db.query(
        f"SELECT id, memory_id, event_id, op, old_ref, new_ref, actor, tenant_id, user_id,"
        f" session_id, meta, ts FROM history h WHERE {where} ORDER BY id DESC LIMIT ?",
        [*params, limit],
    )
    for row in rows:
        row["meta"] = json.loads(row["meta"])
    return rows
