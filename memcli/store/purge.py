"""SQL for purge: find a scope's events and memories, then delete every row derived from them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.store.sparse import delete_postings
from memcli.store.vectors import delete_vectors

if TYPE_CHECKING:
    from memcli.store.connection import Database


def _marks(values: list) -> str:
    return ",".join("?" * len(values))


def select_scope(db: Database, scope: dict[str, Any]) -> tuple[list[str], list[int]]:
    """Event ids and memory ids inside a purge scope (a memory id takes its whole event)."""
    if "memory_id" in scope:
        event_ids = [r[0] for r in db.execute(
            "SELECT event_id FROM memories WHERE id = ? AND event_id IS NOT NULL",
            (int(scope["memory_id"]),))]
        memory_ids = {int(scope["memory_id"])} if db.scalar(
            "SELECT 1 FROM memories WHERE id = ?", (int(scope["memory_id"]),)) else set()
    else:
        clauses = " AND ".join(f"{k} = ?" for k in scope)
        params = list(scope.values())
        event_ids = [r[0] for r in db.execute(f"SELECT event_id FROM events WHERE {clauses}",
                                              params)]
        memory_ids = {r[0] for r in db.execute(f"SELECT id FROM memories WHERE {clauses}",
                                               params)}
    if event_ids:
        # Every memory cut from these events goes too, or a rebuild would bring it back.
        memory_ids |= {r[0] for r in db.execute(
            f"SELECT id FROM memories WHERE event_id IN ({_marks(event_ids)})", event_ids)}
    return event_ids, sorted(memory_ids)


def count_artifacts(db: Database, event_ids: list[str]) -> int:
    if not event_ids:
        return 0
    return int(db.scalar(
        f"SELECT count(*) FROM artifacts WHERE event_id IN ({_marks(event_ids)})", event_ids))


def delete_everything(db: Database, event_ids: list[str], memory_ids: list[int],
                      scope: dict[str, Any]) -> None:
    """Delete memories with their index rows, links and change-log text, then the events."""
    for start in range(0, len(memory_ids), 500):
        ids = memory_ids[start:start + 500]
        m = _marks(ids)
        db.execute(f"DELETE FROM memories_fts WHERE rowid IN ({m})", ids)
        db.execute(f"DELETE FROM memories_trigram WHERE rowid IN ({m})", ids)
        delete_vectors(db, ids)
        delete_postings(db, ids)
        db.execute(f"DELETE FROM relations WHERE src_id IN ({m}) OR dst_id IN ({m})", ids + ids)
        db.execute(f"DELETE FROM memory_entities WHERE memory_id IN ({m})", ids)
        db.execute(f"DELETE FROM change_log WHERE memory_id IN ({m})", ids)
        db.execute(f"DELETE FROM memories WHERE id IN ({m})", ids)
    # Entities no memory mentions any more are derived text too.
    db.execute("DELETE FROM entities WHERE id NOT IN (SELECT entity_id FROM memory_entities)")
    if event_ids:
        db.set_meta("purge_guard", "1")  # the append-only trigger lets purge through
        for start in range(0, len(event_ids), 500):
            ids = event_ids[start:start + 500]
            db.execute(f"DELETE FROM artifacts WHERE event_id IN ({_marks(ids)})", ids)
            db.execute(f"DELETE FROM events WHERE event_id IN ({_marks(ids)})", ids)
        db.execute("DELETE FROM meta WHERE key = 'purge_guard'")
    if "session_id" in scope or "user_id" in scope or "tenant_id" in scope:
        clauses = " AND ".join(f"{k} = ?" for k in scope if k != "app_id")
        db.execute(f"DELETE FROM sessions WHERE {clauses}",
                   [v for k, v in scope.items() if k != "app_id"])
