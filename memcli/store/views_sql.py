"""SQL for the human-editable views (`memcli view export|apply`): one owner's items, by kind.

A view belongs to exactly one (tenant, user, app): `user_id` / `app_id` None select the items
with no user / no app (`IS ?` matches NULL), never "every user". Only active memories are shown,
and only the sensitivities asked for; a ledger row shows while its memory is active too, so a
soft-deleted decision or task leaves the view as it leaves context bundles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.store.batching import marks
from memcli.store.ledger_sql import _decode

if TYPE_CHECKING:
    from memcli.store.connection import Database

_MEMORY_COLUMNS = ("m.id, m.kind, m.category, m.content, m.attributes, m.sensitivity,"
                   " m.tenant_id, m.user_id, m.app_id")


_CATEGORY = "coalesce(m.category, '')"


def _owner(alias: str, tenant_id: str, user_id: str | None, app_id: str | None,
           sensitivities: tuple[str, ...]) -> tuple[str, list[Any]]:
    where = (f"{alias}.tenant_id = ? AND {alias}.user_id IS NOT DISTINCT FROM ? AND {alias}.app_id"
             " IS NOT DISTINCT FROM ?"
             f" AND m.state = 'active' AND m.sensitivity IN ({marks(sensitivities)})")
    return where, [tenant_id, user_id, app_id, *sensitivities]


def view_memories(db: Database, *, tenant_id: str, user_id: str | None, app_id: str | None,
                  kind: str, sensitivities: tuple[str, ...],
                  category: str | None = None, not_category: str | None = None
                  ) -> list[dict[str, Any]]:
    """Active memories of one kind (and category, or all categories but one), by category
    then id."""
    where, params = _owner("m", tenant_id, user_id, app_id, sensitivities)
    where += " AND m.kind = ?"
    params.append(kind)
    if category is not None:
        where += " AND m.category = ?"
        params.append(category)
    if not_category is not None:
        where += " AND coalesce(m.category, '') != ?"
        params.append(not_category)
    return db.query(f"SELECT {_MEMORY_COLUMNS} FROM memories m WHERE {where}"
                    f" ORDER BY {db.dialect.binary(_CATEGORY)}, m.id",
                    tuple(params))


def view_decisions(db: Database, *, tenant_id: str, user_id: str | None, app_id: str | None,
                   sensitivities: tuple[str, ...]) -> list[dict[str, Any]]:
    """Active decisions whose memory is active, oldest first."""
    where, params = _owner("d", tenant_id, user_id, app_id, sensitivities)
    rows = db.query("SELECT d.* FROM decisions d JOIN memories m ON m.id = d.memory_id"
                    f" WHERE d.status = 'active' AND {where} ORDER BY d.id", tuple(params))
    return [_decode(r) for r in rows]


def view_tasks(db: Database, *, tenant_id: str, user_id: str | None, app_id: str | None,
               sensitivities: tuple[str, ...]) -> list[dict[str, Any]]:
    """Open and in-progress tasks whose memory is active, oldest first."""
    where, params = _owner("t", tenant_id, user_id, app_id, sensitivities)
    rows = db.query("SELECT t.* FROM tasks t JOIN memories m ON m.id = t.memory_id"
                    f" WHERE t.status IN ('open', 'doing') AND {where} ORDER BY t.id",
                    tuple(params))
    return [_decode(r) for r in rows]
