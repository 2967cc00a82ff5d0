"""SQL for decay: Ebbinghaus confidence, the TTL rule and purging expired soft-deletes, set-wise.

One pass over `memories` computes, per active unpinned unprotected row, its new confidence and
what happens to it (`decay`: fell below the floor; `ttl`: unused too long and unimportant).
It runs in SQL (SQLite has exp() and julianday()), never in a Python loop: 100k rows take well
under two seconds this way (bench/results/lifecycle-decay.md).

Confidence decays over the days since the later of its last access and the previous decay run,
so running nightly, weekly or twice in a row gives the same curve (the literal "days since last
access" applied every night would compound).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.store import memories
from memcli.store.batching import chunks, marks
from memcli.store.purge_sql import delete_everything

if TYPE_CHECKING:
    from memcli.store.connection import Database

LAST_RUN_KEY = "decay_last_run"



def _kinds_sql(kinds: tuple[str, ...]) -> str:
    # Inlined as quoted literals: the statement mixes them with named parameters, and the kinds
    # come from the config file (validated names), never from a user's text.
    return ",".join("'" + kind.replace("'", "''") + "'" for kind in kinds) or "NULL"


def _plan_select(db: Database, kinds: tuple[str, ...]) -> str:
    """SELECT id, newconf, action over the rows decay touches (named parameters: now,
    last_run, threshold, ttl_before, ttl_importance; see memcli.lifecycle.decay)."""
    k = _kinds_sql(kinds)
    dialect = db.dialect
    last_use = "coalesce(last_accessed, created_at)"
    ttl = f"({last_use} < :ttl_before AND importance < :ttl_importance)"
    # Days since the memory was last used or decay last ran, whichever is later (never < 0).
    idle = dialect.greatest(
        "0.0", dialect.days_between(":now", dialect.greatest(last_use, ":last_run")))
    return (
        f"SELECT id, newconf, CASE WHEN decays AND newconf < :threshold THEN 'decay'"
        f" WHEN ttl THEN 'ttl' END AS action FROM ("
        f" SELECT id, kind IN ({k}) AS decays, {ttl} AS ttl,"
        f" CASE WHEN kind IN ({k}) THEN confidence * exp(-decay_rate * {idle})"
        f" ELSE confidence END"
        f" AS newconf FROM memories"
        f" WHERE state = 'active' AND pinned = 0 AND decay_rate > 0"
        f" AND (kind IN ({k}) OR {ttl}))"
    )


def restored_to_reset(
    db: Database, kinds: tuple[str, ...], params: dict[str, Any]
) -> list[tuple[int, str]]:
    """Rows decay would remove whose last history entry is a person's RESTORE.

    Restoring is a person saying "keep this": without a fresh start, the next run would remove
    the row again straight away (its confidence and last access are unchanged by restore).
    """
    sql = _plan_select(db, kinds)
    return [
        (r[0], r[1])
        for r in db.execute(
            f"SELECT p.id, p.action FROM ({sql}) p WHERE p.action IS NOT NULL AND (SELECT h.op"
            f" FROM history h WHERE h.memory_id = p.id ORDER BY h.id DESC LIMIT 1) = 'RESTORE'",
            params,
        )
    ]


def reset_restored(db: Database, ids: list[int], now: str) -> None:
    for part in chunks(ids, 500):
        db.execute(
            f"UPDATE memories SET confidence = 1.0, last_accessed = ? WHERE id IN ({marks(part)})",
            [now, *part],
        )
    db.executemany(
        "INSERT INTO history (memory_id, op, old_ref, new_ref, actor, meta, ts)"
        " VALUES (?, 'UPDATE', 'restored', 'active', 'memcli', ?, ?)",
        [(i, '{"reason": "restored by a person: decay and TTL clocks restart"}', now) for i in ids],
    )


def summarise_plan(
    db: Database, kinds: tuple[str, ...], params: dict[str, Any], sample: int
) -> dict[str, Any]:
    """Counts (and the first ids) of what a decay run would do, without writing."""
    sql = _plan_select(db, kinds)
    counts = dict(
        db.execute(
            f"SELECT coalesce(action, 'decayed'), count(*) FROM ({sql}) GROUP BY action", params
        )
    )
    ids: dict[str, list[int]] = {"decay": [], "ttl": []}
    for action in ids:
        ids[action] = [
            r[0]
            for r in db.execute(
                f"SELECT id FROM ({sql}) WHERE action = :action ORDER BY id LIMIT :n",
                {**params, "action": action, "n": sample},
            )
        ]
    return {"counts": counts, "ids": ids}


def apply_plan(
    db: Database, kinds: tuple[str, ...], params: dict[str, Any], purge_at: str
) -> dict[str, Any]:
    """Write new confidences and soft-deletes with their history rows; call in a transaction."""
    sql = _plan_select(db, kinds)
    # Unqualified names (SQLite looks in `temp` first; PostgreSQL has no `temp.` schema name);
    # DOUBLE PRECISION is SQLite's REAL and PostgreSQL's 8-byte float (its REAL is 4 bytes).
    db.execute("DROP TABLE IF EXISTS decay_plan")
    db.execute("CREATE TEMP TABLE decay_plan (id INTEGER PRIMARY KEY, newconf DOUBLE PRECISION,"
               " action TEXT)")
    dialect = db.dialect
    meta = dialect.json_object("'reason'", "p.action", "'confidence'",
                               dialect.round_to("p.newconf", 4), "'purge_at'",
                               # typed: PostgreSQL cannot infer a parameter's type in a JSON
                               # builder's arguments (a no-op on SQLite)
                               "CAST(:purge_at AS TEXT)")
    try:
        db.execute(f"INSERT INTO decay_plan (id, newconf, action) {sql}", params)
        changed = db.query(
            "SELECT m.id, m.tenant_id, m.user_id, m.session_id, m.content, p.action"
            " FROM decay_plan p JOIN memories m ON m.id = p.id"
            " WHERE p.action IS NOT NULL ORDER BY m.id"
        )
        db.execute(
            "INSERT INTO history (memory_id, op, old_ref, new_ref, actor, tenant_id, user_id,"
            " session_id, meta, ts) SELECT m.id, CASE p.action WHEN 'decay' THEN 'DELETE'"
            " ELSE 'TTL' END, 'active', 'soft_deleted', 'memcli', m.tenant_id, m.user_id,"
            f" m.session_id, {meta}, :now FROM decay_plan p JOIN memories m ON m.id = p.id"
            " WHERE p.action IS NOT NULL ORDER BY m.id",
            {"purge_at": purge_at, "now": params["now"]},
        )
        # Two statements, not one with CASE: rows whose state stays put then only rewrite
        # `confidence`, which no index holds, so their index entries are left alone.
        db.execute(
            "UPDATE memories SET confidence = p.newconf FROM decay_plan p"
            " WHERE p.id = memories.id AND p.action IS NULL"
        )
        db.execute(
            "UPDATE memories SET confidence = p.newconf, state = 'soft_deleted',"
            " purge_at = :purge_at, updated_at = :now FROM decay_plan p"
            " WHERE p.id = memories.id AND p.action IS NOT NULL",
            {"purge_at": purge_at, "now": params["now"]},
        )
        decayed = int(db.scalar("SELECT count(*) FROM decay_plan"))
    finally:
        db.execute("DROP TABLE IF EXISTS decay_plan")
    threads: dict[str, list[tuple[str, int | None, str]]] = {}
    for row in changed:
        key = memories.thread_key(row["tenant_id"], row["user_id"], row["session_id"])
        threads.setdefault(key, []).append(("soft_deleted", row["id"], row["content"]))
    for key, changes in threads.items():
        memories.bump_revision(db, key, changes)
    db.set_meta(LAST_RUN_KEY, params["now"])
    return {"touched": decayed, "changed": [(r["id"], r["action"]) for r in changed]}


def expired_ids(db: Database, now: str) -> list[int]:
    return [
        r[0]
        for r in db.execute(
            "SELECT id FROM memories WHERE state = 'soft_deleted' AND purge_at IS NOT NULL"
            " AND purge_at <= ? ORDER BY id",
            (now,),
        )
    ]


def purge_memories(db: Database, ids: list[int], now: str) -> None:
    """Hard-delete memories (their events stay: they are the ground truth); history keeps ids."""
    scopes: dict[int, dict[str, Any]] = {}
    for part in chunks(ids, 500):
        scopes.update(memories.get_memories(db, part))
    delete_everything(db, [], ids, {})
    db.executemany(
        "INSERT INTO history (memory_id, op, old_ref, actor, tenant_id, user_id, session_id,"
        " meta, ts) VALUES (?, 'PURGE', 'soft_deleted', 'memcli', ?, ?, ?,"
        ' \'{"reason": "purge_at passed"}\', ?)',
        [(i, s["tenant_id"], s["user_id"], s["session_id"], now) for i, s in scopes.items()],
    )
