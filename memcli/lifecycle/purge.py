"""Purge (hard delete of a scope, events included), forget (soft delete) and restore."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memcli.core.records import format_ts, utcnow
from memcli.errors import UsageError
from memcli.ledger import commands
from memcli.policy.redaction import redact_text
from memcli.store import memories, purge_sql
from memcli.store import owner as own

if TYPE_CHECKING:
    from memcli.store.connection import Database
    from memcli.store.owner import Owner

SCOPES = ("memory_id", "session_id", "user_id", "tenant_id", "app_id")
SOFT_DELETE_GRACE_DAYS = 30


def plan_purge(db: Database, **scope: Any) -> dict[str, Any]:
    given = {k: v for k, v in scope.items() if k in SCOPES and v is not None}
    if not given:
        raise UsageError(
            "purge needs a scope",
            "give --memory-id, --session-id, --user-id, --tenant-id or --app-id",
        )
    event_ids, memory_ids = purge_sql.select_scope(db, given)
    return {
        "scope": given,
        "events": len(event_ids),
        "memories": len(memory_ids),
        "artifacts": purge_sql.count_artifacts(db, event_ids),
        "event_ids": event_ids,
        "memory_ids": memory_ids,
    }


def apply_purge(db: Database, plan: dict[str, Any], actor: str = "cli") -> dict[str, Any]:
    """Delete the scope, then make sure no copy of its text stays in the file before reporting.

    `secure_delete = ON` for the whole operation zeroes deleted cells and freed pages; VACUUM
    rewrites every page (page splits leave stale bytes in live pages that secure_delete never
    sees, and rows deleted earlier in FAST mode may sit in free pages); a TRUNCATE checkpoint,
    waiting up to busy_timeout for readers, empties the WAL. A reader that holds an old snapshot
    past that wait keeps its pages: `complete` is then False (the CLI exits 75); running the
    same purge again once it finishes completes it.
    """
    previous = purge_sql.secure_delete(db, 1)
    try:
        with db.transaction():
            purge_sql.delete_everything(db, plan["event_ids"], plan["memory_ids"], plan["scope"])
            # The audit row has no tenant (a purge may span several), except a tenant
            # role's: row-level security lets it write only rows of its tenant.
            bound = {"tenant_id": db.bound_tenant} if db.bound_tenant is not None else None
            memories.add_history(db, None, "PURGE", actor=actor, scope=bound, meta={
                "scope": plan["scope"], "events": plan["events"], "memories": plan["memories"],
            })
        # Every purge vacuums, even one that found nothing: it is also how a purge that
        # stopped before its VACUUM (crash, reader, a tenant role) is finished. Inside a
        # caller's own transaction neither can run: the deletion stands, `complete` says the
        # file does not.
        owner_needed = not db.in_transaction and not purge_sql.may_erase(db)
        if owner_needed:  # a tenant role: deleted for every reader, still on disk
            purge_sql.mark_vacuum_pending(db, utcnow())
        complete = not db.in_transaction and not owner_needed and purge_sql.erase_physically(db)
        if complete:
            purge_sql.clear_vacuum_pending(db)
    finally:
        purge_sql.secure_delete(db, previous)
    return {k: v for k, v in plan.items() if k not in ("event_ids", "memory_ids")} | {
        "complete": complete} | ({"vacuum": "owner"} if owner_needed else {})


def forget(db: Database, memory_id: int, *, owner: Owner, actor: str = "cli",
           reason: str = "") -> dict[str, Any]:
    """Soft-delete a memory of `owner`'s; `reason` goes into its history row (e.g. the view
    line)."""
    row = own.memory(db, memory_id, owner)
    reason, _ = redact_text(reason)  # kept in history and in the forget event
    purge_at = format_ts(datetime.now(UTC) + timedelta(days=SOFT_DELETE_GRACE_DAYS))
    with db.transaction(), commands.changed(db, "forget", row, actor, purge_at=purge_at,
                                           **({"reason": reason} if reason else {})):
        memories.set_state(db, memory_id, "soft_deleted", purge_at)
        memories.add_history(db, memory_id, "DELETE", old_ref=row["state"], new_ref="soft_deleted",
                        actor=actor, scope=row,
                        meta={"purge_at": purge_at, **({"reason": reason} if reason else {})})
        memories.bump_revision(db, memories.thread_key(row["tenant_id"], row["user_id"],
                                             row["session_id"]),
                          [("deleted", memory_id, row["content"])])
    return {"id": memory_id, "state": "soft_deleted", "purge_at": purge_at}


def restore(db: Database, memory_id: int, *, owner: Owner, actor: str = "cli"
            ) -> dict[str, Any]:
    row = own.memory(db, memory_id, owner)
    if row["state"] != "soft_deleted":
        raise UsageError(f"memory {memory_id} is {row['state']}, not soft-deleted")
    with db.transaction(), commands.changed(db, "restore", row, actor):
        memories.set_state(db, memory_id, "active", None)
        memories.add_history(db, memory_id, "RESTORE", old_ref="soft_deleted", new_ref="active",
                        actor=actor, scope=row)
        memories.bump_revision(db, memories.thread_key(row["tenant_id"], row["user_id"],
                                             row["session_id"]),
                          [("restored", memory_id, row["content"])])
    return {"id": memory_id, "state": "active", "restored_at": utcnow()}
