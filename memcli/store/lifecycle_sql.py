"""SQL for the lifecycle steps: pending sessions, dedup candidates, pair checks, app limits, runs,
locks and the small per-memory changes (pin, confirm, merge)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.store import memories
from memcli.store.batching import chunks, marks
from memcli.store.sealing import high_memory_ids, seal_json_if, session_has_high

if TYPE_CHECKING:
    from memcli.store.connection import Database

SEMANTIC_FACT_KINDS = ("fact", "decision", "task")



# -- sessions


def pending_sessions(
    db: Database,
    *,
    tenant_id: str | None = None,
    user_id: str | None = None,
    session_id: str | None = None,
    idle_before: str | None = None,
    upgrade_extractive: bool = False,
) -> list[dict[str, Any]]:
    """Sessions with active episodes past their consolidation mark, oldest first.

    A session is ready once a later session of the same user (same tenant) has started, when it
    is named (`session_id`), or when its last event is older than `idle_before`. "Later": a
    later start time, or the same start time and a later first event in the log; sessions of
    one ingest call without `ts` all start at the call's time, and the log's order still says
    which came first. With `upgrade_extractive`, sessions summarised without a model come back
    for the model pass.
    """
    b = db.dialect.binary
    clauses, params = ["1 = 1"], []
    for column, value in (
        ("tenant_id", tenant_id),
        ("user_id", user_id),
        ("session_id", session_id),
    ):
        if value is not None:
            clauses.append(f"s.{column} = ?")
            params.append(value)
    # Ready = not the user's latest session (`l`: one per user): one pass over the sessions
    # for the latest start per user, the log read only for the sessions sharing that start.
    latest = (
        " LEFT JOIN (SELECT t.tenant_id, t.session_id, row_number() OVER"
        f" (PARTITION BY t.tenant_id, t.user_id ORDER BY {_first_seq('t')} DESC) AS r"
        " FROM sessions t JOIN (SELECT tenant_id, user_id, max(started_at) AS started_at"
        " FROM sessions GROUP BY tenant_id, user_id) u ON u.tenant_id = t.tenant_id"
        " AND u.user_id IS NOT DISTINCT FROM t.user_id AND u.started_at = t.started_at) l"
        " ON l.r = 1 AND l.tenant_id = s.tenant_id AND l.session_id = s.session_id"
    )
    ready = "(l.session_id IS NULL OR s.last_event_at < ?)"
    if session_id is not None:
        latest, ready = "", "1 = 1"
    else:
        params.append(idle_before or "")  # "" sorts before every timestamp: never idle
    sql = (
        "SELECT s.tenant_id, s.session_id, s.user_id, s.started_at, s.last_event_at,"
        " coalesce(c.last_seq, 0) AS last_seq, c.method, coalesce(c.failures, 0) AS failures"
        " FROM sessions s LEFT JOIN session_consolidation c"
        f" ON c.tenant_id = s.tenant_id AND c.session_id = s.session_id{latest}"
        f" WHERE {' AND '.join(clauses)} AND {ready} AND ("
        " EXISTS (SELECT 1 FROM memories m WHERE m.session_id = s.session_id"
        " AND m.tenant_id = s.tenant_id AND m.kind = 'episode' AND m.state = 'active'"
        " AND m.event_seq > coalesce(c.last_seq, 0))"
        + (" OR c.method = 'extractive'" if upgrade_extractive else "")
        # unique: no engine's tie order; names in byte order on both
        + f") ORDER BY s.started_at, {_first_seq('s')}, {b('s.session_id')}, {b('s.tenant_id')}"
    )
    return db.query(sql, params)


def _first_seq(alias: str) -> str:
    """The log position of a session's first event (index events_session)."""
    return (f"(SELECT min(e.seq) FROM events e WHERE e.session_id = {alias}.session_id"
            f" AND e.tenant_id = {alias}.tenant_id)")


def session_exists(db: Database, session_id: str, tenant_id: str | None) -> bool:
    if tenant_id is None:
        return bool(db.scalar("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)))
    return bool(
        db.scalar(
            "SELECT 1 FROM sessions WHERE session_id = ? AND tenant_id = ?", (session_id, tenant_id)
        )
    )


def session_episodes(
    db: Database, tenant_id: str, session_id: str, after_seq: int
) -> list[dict[str, Any]]:
    skipped = db.crypto.skipped
    rows = db.query(
        "SELECT id, event_id, event_seq, chunk_index, content, actor_type, actor_id, event_time,"
        " user_id, agent_id, app_id, run_id, channel, sensitivity FROM memories"
        " WHERE session_id = ? AND tenant_id = ? AND kind = 'episode' AND state = 'active'"
        " AND event_seq > ? ORDER BY event_seq, chunk_index",
        (session_id, tenant_id, after_seq),
    )
    # `high` turns unreadable without the key: leave the whole session for a run that has it
    # (consolidating the rest would mark those turns as done).
    return [] if db.crypto.skipped > skipped else rows


def session_summaries(db: Database, tenant_id: str, session_id: str) -> list[int]:
    return [
        r[0]
        for r in db.execute(
            "SELECT id FROM memories WHERE session_id = ? AND tenant_id = ? AND kind = 'summary'"
            " AND state = 'active'",
            (session_id, tenant_id),
        )
    ]


def mark_consolidated(
    db: Database,
    tenant_id: str,
    session_id: str,
    last_seq: int,
    method: str,
    now: str,
    summary: dict[str, Any],
) -> None:
    db.execute(
        "INSERT INTO session_consolidation (tenant_id, session_id, last_seq, method,"
        " consolidated_at, failures, last_error) VALUES (?, ?, ?, ?, ?, 0, NULL)"
        " ON CONFLICT (tenant_id, session_id) DO UPDATE SET"
        f" last_seq = {db.dialect.greatest('session_consolidation.last_seq', 'excluded.last_seq')},"
        " method = excluded.method, consolidated_at = excluded.consolidated_at,"
        " failures = 0, last_error = NULL",
        (tenant_id, session_id, last_seq, method, now),
    )
    db.execute(
        "UPDATE sessions SET consolidated_at = ?, summary = ?"
        " WHERE tenant_id = ? AND session_id = ?",
        # The summary quotes the session's turns: encrypted when any of them is `high`.
        (now, seal_json_if(db, session_has_high(db, tenant_id, session_id), summary),
         tenant_id, session_id),
    )


def record_failure(db: Database, tenant_id: str, session_id: str, error: str) -> int:
    """Count one more model failure for a session; returns the new count."""
    db.execute(
        "INSERT INTO session_consolidation (tenant_id, session_id, failures, last_error)"
        " VALUES (?, ?, 1, ?) ON CONFLICT (tenant_id, session_id) DO UPDATE SET"
        " failures = session_consolidation.failures + 1, last_error = excluded.last_error",
        (tenant_id, session_id, error[:500]),
    )
    return int(
        db.scalar(
            "SELECT failures FROM session_consolidation WHERE tenant_id = ? AND session_id = ?",
            (tenant_id, session_id),
        )
    )


# -- dedup candidates


def active_semantic(
    db: Database, tenant_id: str, user_id: str | None, kinds: tuple[str, ...] = SEMANTIC_FACT_KINDS
) -> list[dict[str, Any]]:
    """A user's active facts, decisions and tasks (the store side of deduplication)."""
    rows = db.query(
        f"SELECT id, kind, category, content, pinned, attributes, created_at, source_ids"
        " FROM memories WHERE tenant_id = ? AND user_id IS NOT DISTINCT FROM ? AND state ="
        " 'active'"
        f" AND kind IN ({marks(kinds)}) ORDER BY id",
        (tenant_id, user_id, *kinds),
    )
    for row in rows:
        row["attributes"] = json.loads(row["attributes"] or "{}")
    return rows


def vectors_for(db: Database, ids: list[int]) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for part in chunks(ids, 500):
        out.update(
            db.execute(
                f"SELECT memory_id, embedding FROM memory_vectors"
                f" WHERE memory_id IN ({marks(part)})",
                part,
            )
        )
    return out


def pair_verdicts(db: Database, fingerprints: list[str], since: str) -> dict[str, str]:
    if not fingerprints:
        return {}
    return dict(
        db.execute(
            f"SELECT fingerprint, verdict FROM pair_checks WHERE checked_at >= ?"
            f" AND fingerprint IN ({marks(fingerprints)})",
            [since, *fingerprints],
        )
    )


def save_pair_verdicts(db: Database, rows: list[tuple[str, str, int, float]], now: str) -> None:
    db.executemany(
        "INSERT INTO pair_checks (fingerprint, verdict, memory_id, score, checked_at)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (fingerprint) DO UPDATE SET"
        " verdict = excluded.verdict, checked_at = excluded.checked_at",
        [(fp, verdict, mid, score, now) for fp, verdict, mid, score in rows],
    )


def merge_into(
    db: Database,
    target_id: int,
    text: str,
    sources: list[Any],
    now: str,
    actor: str,
    meta: dict[str, Any],
) -> None:
    """A near-duplicate joins an existing memory: its sources are cited, confidence renewed."""
    row = memories.get_memories(db, [target_id])[target_id]
    cited = json.loads(row["source_ids"] or "[]")
    cited += [s for s in sources if s not in cited]
    db.execute(
        "UPDATE memories SET source_ids = ?, confidence = 1.0, updated_at = ? WHERE id = ?",
        (json.dumps(cited, ensure_ascii=False), now, target_id),
    )
    memories.add_history(
        db,
        target_id,
        "MERGE",
        old_ref=str(target_id),
        new_ref=str(target_id),
        actor=actor,
        scope=row,
        meta={"merged_text": text, **meta},
        # the merged text may come from a `high` source even when the target is not
        seal=bool(high_memory_ids(db, [s for s in sources if isinstance(s, int)])),
    )


def is_active(db: Database, memory_id: int) -> bool:
    return db.scalar("SELECT state FROM memories WHERE id = ?", (memory_id,)) == "active"


def profile_fact(
    db: Database, tenant_id: str, user_id: str | None, field: str
) -> dict[str, Any] | None:
    """The active profile fact holding a sensitive field (preferred_name, city ...), if any."""
    rows = db.query(
        "SELECT id, content, attributes FROM memories WHERE tenant_id = ? AND user_id IS NOT"
        " DISTINCT FROM ?"
        " AND kind = 'fact' AND state = 'active'"
        # json_valid: a `high` memory's attributes are encrypted (not JSON) in the file
        f" AND {db.dialect.is_json('attributes')}"
        f" AND {db.dialect.json_text('attributes', 'profile_field')} = ?"
        " ORDER BY id DESC LIMIT 1",
        (tenant_id, user_id, field),
    )
    if not rows:
        return None
    rows[0]["attributes"] = json.loads(rows[0]["attributes"] or "{}")
    return rows[0]


# -- app memory limit


AppKey = tuple[str, str | None, str]  # (tenant, user or None for app-wide, app)


def app_count(db: Database, key: AppKey, kinds: tuple[str, ...]) -> int:
    """Active derived memories of one app scope: a tenant's app, for one user (or app-wide)."""
    tenant_id, user_id, app_id = key
    return int(db.scalar(
        "SELECT count(*) FROM memories WHERE tenant_id = ? AND user_id IS NOT DISTINCT FROM ? AND"
        " app_id = ?"
        f" AND state = 'active' AND kind IN ({marks(kinds)})",
        (tenant_id, user_id, app_id, *kinds),
    ))


def app_memories(db: Database, key: AppKey, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    """One app scope's active derived memories, oldest first (the FIFO order)."""
    tenant_id, user_id, app_id = key
    return db.query(
        f"SELECT id, kind, category, content, pinned, created_at, tenant_id, user_id, session_id,"
        " source_ids FROM memories WHERE tenant_id = ? AND user_id IS NOT DISTINCT FROM ? AND"
        " app_id = ?"
        f" AND state = 'active' AND kind IN ({marks(kinds)}) ORDER BY created_at, id",
        (tenant_id, user_id, app_id, *kinds),
    )


# -- single-memory changes


def set_pinned(db: Database, memory_id: int, pinned: bool, now: str) -> None:
    db.execute(
        "UPDATE memories SET pinned = ?, updated_at = ? WHERE id = ?", (int(pinned), now, memory_id)
    )


def protect(db: Database, memory_id: int, now: str) -> None:
    """`confirm`: a person vouched for it, so it stops decaying and is fully trusted."""
    db.execute(
        "UPDATE memories SET decay_rate = 0, confidence = 1.0, updated_at = ? WHERE id = ?",
        (now, memory_id),
    )


# -- runs and locks


def start_run(
    db: Database, command: str, tenant_id: str | None, user_id: str | None, now: str
) -> int:
    return db.insert(
        "INSERT INTO lifecycle_runs (command, tenant_id, user_id, started_at)"
        " VALUES (?, ?, ?, ?) RETURNING id",
        (command, tenant_id, user_id, now),
    )


def finish_run(db: Database, run_id: int, status: str, report: dict[str, Any], now: str) -> None:
    db.execute(
        "UPDATE lifecycle_runs SET status = ?, report = ?, finished_at = ? WHERE id = ?",
        (status, json.dumps(report), now, run_id),
    )


def last_run(
    db: Database,
    command: str,
    tenant_id: str | None,
    user_id: str | None,
    statuses: tuple[str, ...] = ("ok",),
) -> str | None:
    return db.scalar(
        "SELECT max(started_at) FROM lifecycle_runs WHERE command = ? AND tenant_id IS NOT"
        " DISTINCT FROM ?"
        f" AND user_id IS NOT DISTINCT FROM ? AND status IN ({marks(statuses)})",
        (command, tenant_id, user_id, *statuses),
    )


def get_lock(db: Database, name: str) -> dict[str, Any] | None:
    rows = db.query("SELECT * FROM run_locks WHERE name = ?", (name,))
    return rows[0] if rows else None


def put_lock(
    db: Database, name: str, holder: str, host: str, pid: int, now: str, expires_at: str
) -> None:
    db.execute(
        "INSERT INTO run_locks (name, holder, host, pid, acquired_at, expires_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,"
        " host = excluded.host, pid = excluded.pid, acquired_at = excluded.acquired_at,"
        " expires_at = excluded.expires_at",
        (name, holder, host, pid, now, expires_at),
    )


def refresh_lock(db: Database, name: str, holder: str, expires_at: str) -> None:
    db.execute(
        "UPDATE run_locks SET expires_at = ? WHERE name = ? AND holder = ?",
        (expires_at, name, holder),
    )


def release_lock(db: Database, name: str, holder: str) -> None:
    db.execute("DELETE FROM run_locks WHERE name = ? AND holder = ?", (name, holder))


# -- reflection and insights


def semantic_counts_since(
    db: Database, since: str, tenant_id: str | None, user_id: str | None
) -> list[dict[str, Any]]:
    """(tenant, user, new facts) for every user with facts created since `since`."""
    b = db.dialect.binary
    clauses, params = _active_since(since, tenant_id, user_id)
    return db.query(
        f"SELECT tenant_id, user_id, count(*) AS facts FROM memories"
        f" WHERE kind IN ({marks(SEMANTIC_FACT_KINDS)}) AND {' AND '.join(clauses)}"
        # NULLS FIRST: SQLite's order for the memories without a user; PostgreSQL's default
        # puts them last
        f" GROUP BY tenant_id, user_id"
        f" ORDER BY {b('tenant_id')}, {b('user_id')} NULLS FIRST",
        [*SEMANTIC_FACT_KINDS, *params],
    )


def _active_since(since: str, tenant_id: str | None,
                  user_id: str | None) -> tuple[list[str], list[Any]]:
    """Active memories created since `since`, of the tenant and user when given."""
    clauses, params = ["created_at >= ?", "state = 'active'"], [since]
    if tenant_id is not None:
        clauses.append("tenant_id = ?")
        params.append(tenant_id)
    if user_id is not None:
        clauses.append("user_id = ?")
        params.append(user_id)
    return clauses, params


def latest_of_kind(db: Database, tenant_id: str, user_id: str | None, kind: str) -> str | None:
    return db.scalar(
        "SELECT max(created_at) FROM memories WHERE tenant_id = ? AND user_id IS NOT DISTINCT FROM"
        " ? AND kind = ?"
        " AND state != 'soft_deleted'",
        (tenant_id, user_id, kind),
    )


def recent_memories(
    db: Database,
    tenant_id: str,
    user_id: str | None,
    kinds: tuple[str, ...],
    since: str | None,
    limit: int,
) -> list[dict[str, Any]]:
    """A user's newest active memories of some kinds (newest first)."""
    return db.query(
        f"SELECT id, kind, category, content, created_at, event_time, actor_id, actor_type"
        " FROM memories WHERE tenant_id = ? AND user_id IS NOT DISTINCT FROM ? AND state ="
        " 'active'"
        f" AND kind IN ({marks(kinds)}) AND created_at >= ? ORDER BY created_at DESC, id DESC"
        f" LIMIT ?",
        (tenant_id, user_id, *kinds, since or "", limit),
    )


def active_users(
    db: Database, since: str, tenant_id: str | None, user_id: str | None
) -> list[tuple[str, str | None]]:
    """(tenant, user) pairs with any memory created since `since`."""
    b = db.dialect.binary
    clauses, params = _active_since(since, tenant_id, user_id)
    return [
        (t, u)
        for t, u in db.execute(
            # GROUP BY, not DISTINCT: PostgreSQL orders a DISTINCT only by its select list
            f"SELECT tenant_id, user_id FROM memories WHERE {' AND '.join(clauses)}"
            f" GROUP BY tenant_id, user_id"  # as above: one order on both engines
            f" ORDER BY {b('tenant_id')}, {b('user_id')} NULLS FIRST",
            params,
        )
    ]
