"""SQL for an entity's profile (`memcli entity NAME`): the tenant's entity rows of a name, and
the tenant's memories linked to them. Each tenant has its own entity rows (schema 3)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.store.batching import marks

if TYPE_CHECKING:
    from memcli.store.connection import Database


def entities_named(db: Database, norm: str, alias: str, tenant_id: str) -> list[dict[str, Any]]:
    """The tenant's entity rows whose key is `norm`, or that were written as `alias` (any
    kind)."""
    return db.query(
        "SELECT id, kind, norm, display, created_at FROM entities"
        " WHERE norm = ? AND tenant_id = ?"
        " UNION SELECT e.id, e.kind, e.norm, e.display, e.created_at FROM entity_aliases a"
        " JOIN entities e ON e.id = a.entity_id WHERE a.alias = ? AND e.tenant_id = ?"
        " ORDER BY id",
        (norm, tenant_id, alias, tenant_id),
    )


def _scope(entity_ids: list[int], tenant_id: str, user_id: str | None) -> tuple[str, list[Any]]:
    where = (f"me.entity_id IN ({marks(entity_ids)}) AND m.tenant_id = ? AND m.state = 'active'")
    params: list[Any] = [*entity_ids, tenant_id]
    if user_id is not None:
        where += " AND m.user_id = ?"
        params.append(user_id)
    return where, params


def mention_summary(db: Database, entity_ids: list[int], tenant_id: str,
                    user_id: str | None) -> dict[str, Any]:
    """How many of the tenant's active memories mention the entities, first and last seen."""
    where, params = _scope(entity_ids, tenant_id, user_id)
    row = db.query(
        f"SELECT count(DISTINCT m.id) AS mentions, min(m.event_time) AS first_seen,"
        f" max(m.event_time) AS last_seen FROM memory_entities me"
        f" JOIN memories m ON m.id = me.memory_id WHERE {where}", tuple(params))
    return row[0] if row else {"mentions": 0, "first_seen": None, "last_seen": None}


def linked_memories(db: Database, entity_ids: list[int], tenant_id: str, user_id: str | None,
                    limit: int) -> list[dict[str, Any]]:
    """The tenant's active memories mentioning the entities, newest first."""
    where, params = _scope(entity_ids, tenant_id, user_id)
    return db.query(
        f"SELECT DISTINCT m.id, m.kind, m.category, m.content, m.event_time, m.user_id,"
        f" m.session_id, m.app_id, m.channel, m.sensitivity FROM memory_entities me"
        f" JOIN memories m ON m.id = me.memory_id WHERE {where}"
        f" ORDER BY m.event_time DESC, m.id DESC LIMIT ?", (*params, limit))
