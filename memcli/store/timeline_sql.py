"""SQL for the timeline page: one page of a scope's memories, newest first, by keyset.

A page is the `limit` rows below a cursor (the last id of the page before), in id order,
which is the order memories were written: the primary key serves it, so the 500th page of
100k memories costs what the first does (no OFFSET scan); a filter no row matches reads them
all once (60 ms at 100k). The owner's scope (tenant, user,
app, categories, hidden ones) applies in SQL, as every read by id does (memcli.store.owner);
`secret` rows are never returned (none is stored; this says so once more).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.store.batching import marks

if TYPE_CHECKING:
    from memcli.store.connection import Database
    from memcli.store.owner import Owner

COLUMNS = ("m.id, m.kind, m.category, m.content, m.tenant_id, m.user_id, m.agent_id,"
           " m.session_id, m.app_id, m.channel, m.sensitivity, m.state, m.pinned,"
           " m.importance, m.event_id, m.event_time, m.created_at, e.kind AS event_kind")


def memories_page(db: Database, owner: Owner, *, before: int | None, limit: int,
                  equal: dict[str, str | None]) -> list[dict[str, Any]]:
    """Up to `limit` memories of `owner`'s below id `before` (None: from the newest), newest
    first; `equal`: column -> value filters (kind, category, channel, sensitivity, state,
    session_id), each applied when not None."""
    return db.query(*page_query(owner, before=before, limit=limit, equal=equal))


def page_query(owner: Owner, *, before: int | None, limit: int,
               equal: dict[str, str | None]) -> tuple[str, list[Any]]:
    """The SQL of `memories_page` and its parameters."""
    # `tenant_id || ''`: not the (tenant, user, session, state) index, which would fetch every
    # memory of the tenant and sort them (360 ms for the first page at 100k memories on
    # SQLite), but the primary key read backwards, stopping at the page's last row (0.1 ms).
    clauses = ["m.tenant_id || '' = ?", "m.sensitivity != 'secret'"]
    params: list[Any] = [owner.tenant_id]
    for found, values in (_equal_clauses(owner, "m", equal), _category_clauses(owner)):
        clauses += found
        params += values
    if before is not None:
        clauses.append("m.id < ?")
        params.append(before)
    return (f"SELECT {COLUMNS} FROM memories m LEFT JOIN events e ON e.event_id = m.event_id"
            f" WHERE {' AND '.join(clauses)} ORDER BY m.id DESC LIMIT ?", [*params, limit])


def _equal_clauses(owner: Owner, alias: str, equal: dict[str, str | None]
                  ) -> tuple[list[str], list[Any]]:
    """The clauses (on table `alias`) and parameters binding rows to the owner's user and app,
    then to each of `equal`'s column -> value filters not None."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("user_id", owner.user_id), ("app_id", owner.app_id), *equal.items()):
        if value is not None:
            clauses.append(f"{alias}.{column} = ?")
            params.append(value)
    return clauses, params


def _category_clauses(owner: Owner) -> tuple[list[str], list[Any]]:
    """The clauses on memories `m` and parameters keeping the owner's categories (when bound
    to some) and leaving out its hidden ones; none for an owner who may read every category."""
    clauses: list[str] = []
    params: list[Any] = []
    if owner.categories is not None:
        clauses.append(f"m.category IN ({marks(owner.categories) or 'NULL'})")
        params.extend(owner.categories)
    if owner.hidden:
        clauses.append(f"(m.category IS NULL OR m.category NOT IN ({marks(owner.hidden)}))")
        params.extend(owner.hidden)
    return clauses, params


def session_events(db: Database, owner: Owner, session_id: str, limit: int
                   ) -> list[dict[str, Any]]:
    """The first `limit` events of one session of `owner`'s, in the order they were recorded.
    A caller bound to categories sees only events with a memory of those categories (an
    event has no category of its own); `secret` content is never returned."""

    clauses = ["e.tenant_id = ?", "e.session_id = ?", "e.kind != 'command'"]  # turns only
    params: list[Any] = [owner.tenant_id, session_id]
    found, values = _equal_clauses(owner, "e", {})
    clauses += found
    params += values
    inner, values = _category_clauses(owner)
    if inner:
        clauses.append("EXISTS (SELECT 1 FROM memories m WHERE m.event_id = e.event_id"
                       f" AND {' AND '.join(inner)})")
        params += values
    rows = db.query(
        "SELECT e.seq, e.event_id, e.ts, e.kind, e.actor_type, e.actor_id, e.channel,"
        " e.sensitivity, CASE WHEN e.sensitivity = 'secret' THEN NULL ELSE e.content END"
        f" AS content FROM events e WHERE {' AND '.join(clauses)} ORDER BY e.seq LIMIT ?",
        [*params, limit])
    for row in rows:
        row["content"] = None if row["content"] is None else json.loads(row["content"])
    return rows
