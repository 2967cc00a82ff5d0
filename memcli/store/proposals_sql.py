"""SQL for consent proposals: queued changes to sensitive profile fields."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.store.sealing import high_memory_ids, seal_if

if TYPE_CHECKING:
    from memcli.store.connection import Database

_COLUMNS = (
    "tenant_id",
    "user_id",
    "field",
    "value",
    "text",
    "old_memory_id",
    "old_text",
    "session_id",
    "source_ids",
    "origin",
    "created_at",
    "expires_at",
)


def insert_proposal(db: Database, row: dict[str, Any]) -> int:
    values = {c: row.get(c) for c in _COLUMNS}
    values["source_ids"] = json.dumps(row.get("source_ids") or [], ensure_ascii=False)
    sources = [s for s in row.get("source_ids") or [] if isinstance(s, int)]
    if high_memory_ids(db, sources):  # a fact read from a `high` turn: encrypted (no dedup)
        for key in ("value", "text", "old_text"):
            if values[key] is not None:
                values[key] = seal_if(db, True, values[key])
    return db.insert(
        f"INSERT INTO proposals ({', '.join(_COLUMNS)}) VALUES"
        f" ({', '.join(':' + c for c in _COLUMNS)}) RETURNING id",
        values,
    )


def pending_values(
    db: Database, tenant_id: str, user_id: str | None, field: str
) -> list[tuple[int, str]]:
    """(id, value) of the pending proposals for one field of one user, newest first. The
    caller compares values: SQL's lower() folds ASCII only on SQLite, every letter on
    PostgreSQL."""
    return [
        (int(r[0]), r[1])
        for r in db.execute(
            "SELECT id, value FROM proposals WHERE tenant_id = ? AND user_id IS NOT DISTINCT"
            " FROM ? AND field = ? AND status = 'pending' ORDER BY id DESC",
            (tenant_id, user_id, field),
        )
    ]


def expire(db: Database, now: str) -> int:
    return db.change_count(
        "UPDATE proposals SET status = 'expired', decided_at = ?, decided_by = 'memcli',"
        " reason = 'no answer within the consent window'"
        " WHERE status = 'pending' AND expires_at <= ?",
        (now, now),
    )


def get_proposal(db: Database, proposal_id: int) -> dict[str, Any] | None:
    rows = db.query("SELECT * FROM proposals WHERE id = ?", (proposal_id,))
    if not rows:
        return None
    rows[0]["source_ids"] = json.loads(rows[0]["source_ids"])
    return rows[0]


def list_proposals(
    db: Database, *, status: str | None, tenant_id: str | None, user_id: str | None, limit: int
) -> list[dict[str, Any]]:
    clauses, params = ["1 = 1"], []
    for column, value in (("status", status), ("tenant_id", tenant_id), ("user_id", user_id)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    rows = db.query(
        f"SELECT * FROM proposals WHERE {' AND '.join(clauses)} ORDER BY id DESC LIMIT ?",
        [*params, limit],
    )
    for row in rows:
        row["source_ids"] = json.loads(row["source_ids"])
    return rows


def decide(
    db: Database,
    proposal_id: int,
    status: str,
    now: str,
    by: str,
    memory_id: int | None = None,
    reason: str | None = None,
) -> None:
    db.execute(
        "UPDATE proposals SET status = ?, decided_at = ?, decided_by = ?, memory_id = ?,"
        " reason = ? WHERE id = ?",
        (status, now, by, memory_id, reason, proposal_id),
    )


def profile_facts(db: Database, tenant_id: str, user_id: str | None) -> list[dict[str, Any]]:
    """A user's active facts of the `profile` category, newest first, attributes decoded (a
    `high` memory's are decrypted by the connection, or the row is left out without a key)."""
    rows = db.query(
        "SELECT id, content, attributes, valid_from FROM memories WHERE tenant_id = ?"
        " AND user_id IS NOT DISTINCT FROM ? AND kind = 'fact' AND category = 'profile'"
        " AND state = 'active' ORDER BY id DESC",
        (tenant_id, user_id),
    )
    for row in rows:
        try:
            row["attributes"] = json.loads(row["attributes"] or "{}")
        except ValueError:
            row["attributes"] = {}
    return rows
