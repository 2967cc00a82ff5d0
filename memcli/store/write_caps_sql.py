"""SQL for consolidation's daily caps: what it wrote and asked for one user since a time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memcli.store.connection import Database

# What extraction writes (a summary is the session's record, not a write of the caps).
WRITE_KINDS = ("fact", "decision", "task")


def writes_since(db: Database, tenant_id: str, user_id: str | None, since: str) -> int:
    """Memories consolidation wrote for one user since `since`, whatever became of them."""
    return int(db.scalar(
        "SELECT count(*) FROM memories WHERE tenant_id = ? AND user_id IS NOT DISTINCT FROM ?"
        " AND actor_id = 'consolidate' AND kind IN (?, ?, ?) AND created_at >= ?",
        (tenant_id, user_id, *WRITE_KINDS, since),
    ) or 0)


def pair_checks_since(db: Database, tenant_id: str, user_id: str | None, since: str) -> int:
    """Same-fact pairs the model answered for one user since `since` (a pair's stored side
    is one of the user's memories)."""
    return int(db.scalar(
        "SELECT count(*) FROM pair_checks p JOIN memories m ON m.id = p.memory_id"
        " WHERE m.tenant_id = ? AND m.user_id IS NOT DISTINCT FROM ? AND p.checked_at >= ?",
        (tenant_id, user_id, since),
    ) or 0)
