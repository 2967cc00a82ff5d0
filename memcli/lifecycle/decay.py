"""`memcli decay`: Ebbinghaus forgetting, the TTL rule, and purging what passed its grace period.

- confidence *= exp(-decay_rate * days since the later of last access and the last decay run),
  for the kinds in `lifecycle.decay_kinds` (derived memories by default; episodes are the
  record of what was said and leave only through the TTL rule or purge);
- below `decay_threshold` (0.05) a memory is soft-deleted with purge_at = now + 30 days;
- TTL: last access (or creation) more than 60 days ago, importance below 0.3, not pinned ->
  soft-deleted the same way;
- pinned memories and protected ones (`confirm`, reflections, procedures: decay_rate 0) are
  never touched;
- a memory a person restored after decay removed it starts again at confidence 1;
- `--purge-expired` hard-deletes soft-deleted memories whose purge_at has passed (`restore`
  works until then).
Every state change gets a history row; confidence updates alone do not (100k rows a night).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memcli.core.records import format_ts
from memcli.store import decay_sql, purge_sql

if TYPE_CHECKING:
    from memcli.config import LifecycleSettings
    from memcli.store.connection import Database

SAMPLE_IDS = 100  # ids listed per action in the report; counts are always complete


def _params(
    db: Database, cfg: LifecycleSettings, now: datetime, threshold: float | None
) -> dict[str, Any]:
    return {
        "now": format_ts(now),
        "last_run": db.get_meta(decay_sql.LAST_RUN_KEY) or "",
        "threshold": cfg.decay_threshold if threshold is None else threshold,
        "ttl_before": format_ts(now - timedelta(days=cfg.ttl_days)),
        "ttl_importance": cfg.ttl_importance,
    }


def _report(params: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    """The head of a run's report, the same for the plan and the run."""
    return {
        "dry_run": dry_run,
        "now": params["now"],
        "threshold": params["threshold"],
        "since_last_run": params["last_run"] or None,
    }


def _purged(expired: list[int]) -> dict[str, Any]:
    return {"purged": len(expired), "purge_ids": expired[:SAMPLE_IDS]}


def run_decay(
    db: Database,
    cfg: LifecycleSettings,
    *,
    now: datetime | None = None,
    threshold: float | None = None,
    purge_expired: bool = False,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Run decay (and purge) in one transaction, or with `dry_run` say what a run would do
    without writing (the `--dry-run` output); counts and the first ids per action."""
    now = now or datetime.now(UTC)
    params, kinds = _params(db, cfg, now, threshold), tuple(cfg.decay_kinds)
    if dry_run:
        return _plan(db, params, kinds, purge_expired)
    return _apply(db, cfg, now, params, kinds, purge_expired)


def _plan(db: Database, params: dict[str, Any], kinds: tuple[str, ...],
          purge_expired: bool) -> dict[str, Any]:
    summary = decay_sql.summarise_plan(db, kinds, params, SAMPLE_IDS)
    counts = summary["counts"]
    restored = decay_sql.restored_to_reset(db, kinds, params)
    for memory_id, action in restored:  # applying resets these before it decays anything
        counts[action] -= 1
        counts["decayed"] = counts.get("decayed", 0) + 1
        if memory_id in summary["ids"][action]:
            summary["ids"][action].remove(memory_id)
    expired = decay_sql.expired_ids(db, params["now"]) if purge_expired else []
    return {
        **_report(params, dry_run=True),
        "decayed": sum(counts.values()),
        "soft_deleted": {"decay": counts.get("decay", 0), "ttl": counts.get("ttl", 0)},
        "restored_reset": [i for i, _ in restored][:SAMPLE_IDS],
        "ids": summary["ids"],
        **_purged(expired),
    }


def _apply(db: Database, cfg: LifecycleSettings, now: datetime, params: dict[str, Any],
           kinds: tuple[str, ...], purge_expired: bool) -> dict[str, Any]:
    purge_at = format_ts(now + timedelta(days=cfg.soft_delete_days))
    # Purged text must not stay readable in the file: zero freed pages, then empty the WAL
    # (the same care as `memcli purge`).
    previous = purge_sql.secure_delete(db, 1) if purge_expired else None
    try:
        with db.transaction():
            restored = [i for i, _ in decay_sql.restored_to_reset(db, kinds, params)]
            if restored:
                decay_sql.reset_restored(db, restored, params["now"])
            done = decay_sql.apply_plan(db, kinds, params, purge_at)
            expired = decay_sql.expired_ids(db, params["now"]) if purge_expired else []
            if expired:
                decay_sql.purge_memories(db, expired, params["now"])
    finally:
        if previous is not None:
            purge_sql.secure_delete(db, previous)
    if purge_expired and expired:
        purge_sql.checkpoint(db)
    by_action: dict[str, list[int]] = {"decay": [], "ttl": []}
    for memory_id, action in done["changed"]:
        by_action[action].append(memory_id)
    return {
        **_report(params, dry_run=False),
        "decayed": done["touched"],
        "soft_deleted": {k: len(v) for k, v in by_action.items()},
        "purge_at": purge_at if done["changed"] else None,
        "restored_reset": restored[:SAMPLE_IDS],
        "ids": {k: v[:SAMPLE_IDS] for k, v in by_action.items()},
        **_purged(expired),
    }
