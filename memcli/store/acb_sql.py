"""SQL for context bundles: session turns, app blocks, relations, revisions, request metrics.

Every function that returns memory text takes the bundle's `Filters`, so the privacy rules
(channel sensitivities, agent category allowlist, app scope) run inside SQL, as in `query`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.core.records import utcnow
from memcli.store.batching import marks

if TYPE_CHECKING:
    from memcli.store.connection import Database
    from memcli.store.filters import Filters


def data_now(db: Database) -> str | None:
    """The newest `updated_at` of any memory: the bundle's clock (never the wall clock), so the
    same database always ranks the same way. Served by the memories_updated index."""
    return db.scalar("SELECT max(updated_at) FROM memories")


def recent_turns(
    db: Database, filters: Filters, owner: str | None, limit: int
) -> list[dict[str, Any]]:
    """The session's newest episodes (filters carry tenant, session and privacy), newest first,
    only `owner`'s (None: the turns without a user). Ingest never lets a session mix users; this
    keeps a file written before that rule from showing one user another's turns."""
    where, params = filters.sql()
    return db.query(
        f"SELECT m.id, m.content, m.event_id, m.actor_type, m.actor_id, m.event_time,"
        f" m.attributes, m.sensitivity FROM memories m WHERE m.kind = 'episode' AND {where}"
        " AND m.user_id IS NOT DISTINCT FROM ? ORDER BY m.event_seq DESC, m.chunk_index DESC,"
        " m.id DESC LIMIT ?",
        (*params, owner, limit),
    )


def app_memories(
    db: Database, filters: Filters, user_id: str | None, limit: int
) -> list[dict[str, Any]]:
    """An app's remembered notes (derived memories, not raw turns), newest first: the app-wide
    ones (no user) and, with `user_id`, that user's own (README "App memory")."""
    where, params = filters.sql()
    return db.query(
        f"SELECT m.id, m.content, m.category, m.created_at, m.source_ids FROM memories m"
        f" WHERE m.kind != 'episode' AND {where} AND (m.user_id IS NULL OR m.user_id IS NOT"
        " DISTINCT FROM ?)"
        f" ORDER BY m.updated_at DESC, m.id DESC LIMIT ?",
        (*params, user_id, limit),
    )


def profile_memories(
    db: Database, filters: Filters, user_id: str, bounds: dict[str, int | None], limit: int
) -> list[dict[str, Any]]:
    """The user's memories of the `context: all` categories (`bounds`: category -> rag_length,
    None for `limit`), pinned first, then by importance, newest first; at most that many per
    category. The user's own only: a profile is about one person. Whatever made the memory:
    a turn ingested with such a category is in the profile as much as a fact derived from one."""
    if not bounds:
        return []
    where, params = filters.sql()
    cases = " ".join("WHEN ? THEN ?" for _ in bounds)
    case_params = [v for c, n in sorted(bounds.items()) for v in (c, limit if n is None else n)]
    return db.query(
        f"""WITH p AS (
                SELECT m.id, m.content, m.category, m.kind, m.event_id, m.event_time,
                       m.attributes, row_number() OVER (
                           PARTITION BY m.category
                           ORDER BY m.pinned DESC, m.importance DESC, m.updated_at DESC, m.id DESC
                       ) AS n
                FROM memories m
                WHERE m.user_id = ? AND m.category IN ({marks(bounds)})
                  AND {where})
            SELECT id, content, category, kind, event_id, event_time, attributes FROM p
            WHERE n <= CASE category {cases} END
            ORDER BY {db.dialect.binary("category")}, n""",
        (user_id, *sorted(bounds), *params, *case_params),
    )


def latest_reflection(db: Database, filters: Filters, user_id: str) -> dict[str, Any] | None:
    """The user's newest active reflection (the SQLite memory extension design injects it before
    every call)."""
    where, params = filters.sql()
    rows = db.query(
        f"SELECT m.id, m.content, m.category, m.kind, m.event_id, m.event_time, m.attributes"
        f" FROM memories m WHERE m.user_id = ? AND m.kind = 'reflection' AND {where}"
        f" ORDER BY m.created_at DESC, m.id DESC LIMIT 1",
        (user_id, *params),
    )
    return rows[0] if rows else None


def source_events(db: Database, ids: list[int]) -> dict[int, str | None]:
    """memory id -> the event it was made from (None for a derived one), for stored ids."""
    if not ids:
        return {}
    rows = db.execute(f"SELECT id, event_id FROM memories WHERE id IN ({marks(ids)})", ids)
    return {int(mid): event for mid, event in rows}


def memories_of_events(db: Database, tenant_id: str | None, events: list[str]
                       ) -> dict[str, list[int]]:
    """event id -> the memories made from it that someone said: a tool's output (one memory,
    or several chunks) is the data a decision rests on, never a saying of the decision."""
    if not events:
        return {}
    tenant = "" if tenant_id is None else " AND tenant_id = ?"
    rows = db.execute(
        f"SELECT event_id, id FROM memories WHERE event_id IN ({marks(events)}){tenant}"
        " AND actor_type <> 'tool' ORDER BY id",
        [*events, *([] if tenant_id is None else [tenant_id])],
    )
    out: dict[str, list[int]] = {}
    for event, mid in rows:
        out.setdefault(event, []).append(int(mid))
    return out


def max_related_strength(db: Database, ids: list[int]) -> dict[int, float]:
    """Strength of each memory's strongest `related` edge to an active memory."""
    if not ids:
        return {}
    in_list = marks(ids)
    rows = db.execute(
        f"""SELECT e.mid, max(e.strength) FROM (
                SELECT src_id AS mid, dst_id AS other, strength FROM relations
                WHERE kind = 'related' AND src_id IN ({in_list})
                UNION ALL
                SELECT dst_id, src_id, strength FROM relations
                WHERE kind = 'related' AND dst_id IN ({in_list})) e
            {db.dialect.ORDERED_JOIN} memories o ON o.id = e.other AND o.state = 'active'
            GROUP BY e.mid""",
        (*ids, *ids),
    )
    return {int(mid): float(s) for mid, s in rows}


def related_bullets(
    db: Database, ids: list[int], filters: Filters, per_item: int
) -> dict[int, list[dict[str, Any]]]:
    """Up to `per_item` related memories per id, strongest first, each passing the filters.

    The edges drive the query (materialized, then memories by primary key): the planner would
    otherwise scan the user's memories and probe relations for each."""
    if not ids or per_item <= 0:
        return {}
    where, params = filters.sql()
    in_list = marks(ids)
    rows = db.query(
        f"""WITH e AS MATERIALIZED (
                SELECT src_id AS mid, dst_id AS other, strength FROM relations
                WHERE kind = 'related' AND src_id IN ({in_list})
                UNION ALL
                SELECT dst_id, src_id, strength FROM relations
                WHERE kind = 'related' AND dst_id IN ({in_list})),
            ranked AS (
                SELECT e.mid, m.id, m.content, m.category, e.strength,
                       row_number() OVER (PARTITION BY e.mid
                                          ORDER BY e.strength DESC, m.id) AS n
                FROM e {db.dialect.ORDERED_JOIN} memories m ON m.id = e.other WHERE {where})
            SELECT mid, id, content, category, strength FROM ranked WHERE n <= ?
            ORDER BY mid, n""",
        (*ids, *ids, *params, per_item),
    )
    out: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(int(row.pop("mid")), []).append(row)
    return out


def edges_with_memories(db: Database, memory_id: int, tenant_id: str) -> list[dict[str, Any]]:
    """Every edge of a memory with the other end's kind, state and text (for `memcli related`),
    both ends in `tenant_id` (an edge never leads a reader into another tenant)."""
    return db.query(
        """SELECT r.kind, r.strength, r.src_id, r.dst_id, r.created_at,
                  CASE WHEN r.src_id = :id THEN r.dst_id ELSE r.src_id END AS other_id,
                  CASE WHEN r.src_id = :id THEN 'out' ELSE 'in' END AS direction,
                  o.kind AS other_kind, o.category AS other_category, o.state AS other_state,
                  o.content AS other_text
           FROM relations r
           JOIN memories o ON o.id = CASE WHEN r.src_id = :id THEN r.dst_id ELSE r.src_id END
           WHERE (r.src_id = :id OR r.dst_id = :id) AND o.tenant_id = :tenant
             AND EXISTS (SELECT 1 FROM memories s WHERE s.id = :id AND s.tenant_id = :tenant)
           ORDER BY r.strength DESC, other_id, """ + db.dialect.binary("r.kind"),
        {"id": memory_id, "tenant": tenant_id},
    )


def session_user(db: Database, tenant_id: str, session_id: str) -> str | None:
    """The user a session belongs to (to widen a session search to its user)."""
    return db.scalar(
        "SELECT user_id FROM sessions WHERE tenant_id = ? AND session_id = ?",
        (tenant_id, session_id),
    )


# -- revisions and the delta header ------------------------------------------------------------
def thread_revisions(db: Database, keys: list[str]) -> dict[str, int]:
    if not keys:
        return {}
    rows = db.execute(
        f"SELECT thread_key, revision FROM threads WHERE thread_key IN ({marks(keys)})", tuple(keys)
    )
    found = {k: int(r) for k, r in rows}
    return {k: found.get(k, 0) for k in keys}


def seen_revisions(db: Database, caller: str, keys: list[str]) -> dict[str, int]:
    if not keys:
        return {}
    in_list = marks(keys)
    rows = db.execute(
        f"SELECT thread_key, revision FROM acb_seen WHERE caller = ? AND thread_key IN ({in_list})",
        (caller, *keys),
    )
    return {k: int(r) for k, r in rows}


def mark_seen(db: Database, caller: str, revisions: dict[str, int]) -> None:
    now = utcnow()
    db.executemany(
        "INSERT INTO acb_seen (caller, thread_key, revision, updated_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (caller, thread_key) DO UPDATE SET revision = excluded.revision,"
        " updated_at = excluded.updated_at",
        [(caller, k, r, now) for k, r in sorted(revisions.items())],
    )


# Raw conversation turns are not memory changes (they are in the recent window): an episode
# counts only when it is deleted, restored or otherwise changed. A memory created and already
# superseded (an old task version) is covered by its replacement's `updated` change.
_VISIBLE_CHANGE = "NOT (c.op = 'created' AND (m.kind = 'episode' OR m.state = 'superseded'))"


def _latest_changes(filters: Filters) -> tuple[str, list[Any]]:
    """A CTE of a thread's visible changes after a revision, with each memory's latest marked
    n = 1 (a window, not a correlated subquery: a thread can have thousands of changes)."""
    where, params = filters.sql()
    return (
        f"""WITH c AS (
                SELECT c.revision, c.op, c.memory_id, c.id, m.kind, m.category, m.content,
                       m.state, row_number() OVER (PARTITION BY c.memory_id
                                                   ORDER BY c.id DESC) AS n
                FROM change_log c JOIN memories m ON m.id = c.memory_id
                WHERE c.thread_key = ? AND c.revision > ? AND {_VISIBLE_CHANGE} AND {where})""",
        params,
    )


def changes_since(
    db: Database, key: str, since: int, filters: Filters, limit: int
) -> list[dict[str, Any]]:
    """Visible changes of a thread after revision `since`, newest first, one row per memory
    (its latest change). Filters apply to the memory as it is now (any state)."""
    cte, params = _latest_changes(filters)
    return db.query(
        f"{cte} SELECT id, revision, op, memory_id, kind, category, content, state FROM c"
        f" WHERE n = 1 ORDER BY revision DESC, id DESC LIMIT ?",
        (key, since, *params, limit),
    )


def count_changes_since(db: Database, key: str, since: int, filters: Filters) -> dict[str, int]:
    """How many memories changed, per latest op, for the header's "and N more" bullet."""
    cte, params = _latest_changes(filters)
    rows = db.execute(
        f"{cte} SELECT op, count(*) FROM c WHERE n = 1 GROUP BY op"
        f" ORDER BY {db.dialect.binary('op')}",
        (key, since, *params),
    )
    return {op: int(n) for op, n in rows}


# -- request metrics -------------------------------------------------------------------------
def requests_since(db: Database, since: str | None) -> list[dict[str, Any]]:
    """request_metrics rows at or after `since` (all when None), oldest first."""
    if since is None:
        return db.query("SELECT * FROM request_metrics ORDER BY id")
    return db.query("SELECT * FROM request_metrics WHERE ts >= ? ORDER BY id", (since,))
