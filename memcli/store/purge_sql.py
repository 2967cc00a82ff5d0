"""SQL for purge: find a scope's events and memories, then delete every row derived from them.

What a purge does with each table of schema.sql (content = text a person wrote or a model wrote
about them; a scope is a memory, session, user, tenant or app):

table                               on purge
events, artifacts                   deleted (the scope's ground truth)
memories (any state, any kind)      deleted, with every memory cut from the events
memories_fts, memories_trigram      rows deleted, then both 'optimize'd (old segments go)
memory_vectors, vec_memories,       deleted; sparse_df counts go down (a term at 0 is deleted)
  memory_sparse, sparse_postings      (sparse_postings: SQLite only)
entities, entity_aliases            deleted when no remaining memory mentions them
memory_entities, relations          deleted
sessions, session_consolidation     empty sessions deleted (their consolidation row cascades);
                                    kept ones lose summary and last_error
history                             rows of the purged memories, events and scope stay as audit
                                    (op, ids, actor, ts) with meta emptied to '{}'; one PURGE
                                    row with the scope and counts is added
threads, change_log, acb_seen       deleted for the scope's thread keys (change_log also by
                                    memory id)
decisions, tasks                    deleted (cascade from their memory; scope rows without one)
checkpoints, proposals              deleted for the scope (proposals also by memory id)
pair_checks                         deleted for the purged memories (a hash of their text)
request_metrics                     kept for `stats --requests`; user and session ids set to
                                    NULL (tenant too on a tenant purge); holds no query text
llm_usage                           kept: tokens and cost per tenant, no content
lifecycle_runs                      kept (counts only); user id (tenant too) set to NULL
meta, run_locks                     no content

Then the file: `secure_delete = ON` for the whole purge, VACUUM (rewrites every page, so no
copy stays in free pages or in cells that page splits moved), and a TRUNCATE checkpoint that
waits for readers (busy_timeout): see memcli/lifecycle/purge.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.store.batching import chunks, marks
from memcli.store.orphans import UNUSED_ENTITIES, delete_lacking
from memcli.store.sparse import delete_postings
from memcli.store.vectors import delete_vectors

if TYPE_CHECKING:
    from memcli.store.connection import Database



def select_scope(db: Database, scope: dict[str, Any]) -> tuple[list[str], list[int]]:
    """Event ids and memory ids inside a purge scope (a memory id takes its whole event)."""
    if "memory_id" in scope:
        # Other scope keys given with a memory id narrow it: they never widen the purge.
        others = {k: v for k, v in scope.items() if k != "memory_id"}
        where = " AND ".join(["id = ?", *(f"{k} = ?" for k in others)])
        params = [int(scope["memory_id"]), *others.values()]
        rows = list(db.execute(f"SELECT id, event_id FROM memories WHERE {where}", params))
        event_ids = [e for _, e in rows if e is not None]
        memory_ids = {i for i, _ in rows}
        # The command event a memory was derived from (remember, correct, decision add ...)
        # holds its text: it goes with it (a decision's or task's: with its current version).
        event_ids += [e for (e,) in db.execute(
            "SELECT h.event_id FROM history h JOIN events e ON e.event_id = h.event_id"
            " WHERE h.memory_id = ? AND h.op = 'ADD' AND e.kind = 'command'",
            (int(scope["memory_id"]),))] if memory_ids else []
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
            f"SELECT id FROM memories WHERE event_id IN ({marks(event_ids)})", event_ids)}
    return event_ids, sorted(memory_ids)


def count_artifacts(db: Database, event_ids: list[str]) -> int:
    if not event_ids:
        return 0
    return int(db.scalar(
        f"SELECT count(*) FROM artifacts WHERE event_id IN ({marks(event_ids)})", event_ids))


def delete_everything(db: Database, event_ids: list[str], memory_ids: list[int],
                      scope: dict[str, Any]) -> None:
    """Delete memories with their index rows, links and change-log text, then the events."""
    touched: list[tuple[str, str]] = []
    for names in chunks(event_ids, 500):
        touched.extend(db.execute(
            f"SELECT DISTINCT tenant_id, session_id FROM events"
            f" WHERE event_id IN ({marks(names)}) AND session_id IS NOT NULL", names))
    for ids in chunks(memory_ids, 500):
        m = marks(ids)
        db.backend.unindex_memories(db, ids)
        delete_vectors(db, ids)
        delete_postings(db, ids)
        db.execute(f"DELETE FROM relations WHERE src_id IN ({m}) OR dst_id IN ({m})", ids + ids)
        db.execute(f"DELETE FROM memory_entities WHERE memory_id IN ({m})", ids)
        db.execute(f"DELETE FROM change_log WHERE memory_id IN ({m})", ids)
        db.execute(f"DELETE FROM memories WHERE id IN ({m})", ids)
    # Entities no memory mentions any more are derived text too.
    delete_lacking(db, *UNUSED_ENTITIES)
    if event_ids:
        db.set_meta("purge_guard", "1")  # the append-only trigger lets purge through
        for names in chunks(event_ids, 500):
            db.execute(f"DELETE FROM artifacts WHERE event_id IN ({marks(names)})", names)
            db.execute(f"DELETE FROM events WHERE event_id IN ({marks(names)})", names)
        db.execute("DELETE FROM meta WHERE key = 'purge_guard'")
    # Sessions follow their events (a scope-wide DELETE would also hit sessions that keep
    # events outside an --app scope, or fail on a memory_id scope).
    _fix_sessions(db, touched)
    _scrub_history(db, event_ids, memory_ids, scope)
    _delete_ledger_rows(db, memory_ids, scope)
    _delete_scoped_state(db, scope)
    # Deleted text can linger inside an index's structures (FTS5 segments keep it until they
    # are merged): rewrite the lexical indexes so it really goes.
    db.backend.optimize_lexical(db)


def _delete_scoped_state(db: Database, scope: dict[str, Any]) -> None:
    """Per-user state that is not a memory: checkpoints, consent proposals, what each caller
    has seen. It holds the user's words too, so a user, tenant or session purge takes it."""
    keys = {k: v for k, v in scope.items() if k in ("tenant_id", "user_id", "session_id")}
    if not keys or "memory_id" in scope or "app_id" in scope:
        return
    where = " AND ".join(f"{k} = ?" for k in keys)
    params = list(keys.values())
    db.execute(f"DELETE FROM proposals WHERE {where}", params)
    # Metrics keep their counts for `stats --requests` but no longer say whose they were.
    tenant_sql = ", tenant_id = NULL" if "tenant_id" in keys else ""
    db.execute(f"UPDATE request_metrics SET user_id = NULL, session_id = NULL{tenant_sql}"
               f" WHERE {where}", params)
    if "session_id" not in keys:
        db.execute(f"DELETE FROM checkpoints WHERE {where}", params)
        # Lifecycle runs keep their counts (the audit of what ran), not whom they ran for.
        db.execute(f"UPDATE lifecycle_runs SET user_id = NULL{tenant_sql} WHERE {where}",
                   params)
    # Thread keys are "tenant/user/session"; match their parts exactly (ids may hold % or _).
    want = (keys.get("tenant_id"), keys.get("user_id"), keys.get("session_id"))
    for table in ("acb_seen", "threads", "change_log"):
        doomed = [(k,) for (k,) in db.execute(f"SELECT DISTINCT thread_key FROM {table}")
                  if all(w is None or w == part for w, part in zip(want, k.split("/", 2),
                                                                    strict=False))]
        db.executemany(f"DELETE FROM {table} WHERE thread_key = ?", doomed)


def _scrub_history(db: Database, event_ids: list[str], memory_ids: list[int],
                   scope: dict[str, Any]) -> None:
    """Audit rows stay (what happened, to which id, when, by whom); their meta, which may quote
    the text (a MERGE's merged_text, a compaction's reason), is emptied."""
    columns: tuple[tuple[str, list[Any]], ...] = (("memory_id", memory_ids),
                                                  ("event_id", event_ids))
    for column, values in columns:
        for ids in chunks(values, 500):
            db.execute(f"UPDATE history SET meta = '{{}}' WHERE {column} IN ({marks(ids)})"
                       " AND meta != '{}'", ids)
    keys = {k: v for k, v in scope.items() if k in ("tenant_id", "user_id", "session_id")}
    if keys and "memory_id" not in scope and "app_id" not in scope:
        where = " AND ".join(f"{k} = ?" for k in keys)
        db.execute(f"UPDATE history SET meta = '{{}}' WHERE {where} AND meta != '{{}}'"
                   " AND op != 'PURGE'", list(keys.values()))


def _delete_ledger_rows(db: Database, memory_ids: list[int], scope: dict[str, Any]) -> None:
    """Decisions and tasks go with their memory (foreign key cascade); rows of the scope without
    one go too. Proposals and pair checks that name a purged memory carry its text or a hash."""
    for ids in chunks(memory_ids, 500):
        m = marks(ids)
        db.execute(f"DELETE FROM pair_checks WHERE memory_id IN ({m})", ids)
        db.execute(f"DELETE FROM proposals WHERE memory_id IN ({m}) OR old_memory_id IN ({m})",
                   ids + ids)
    keys = {k: v for k, v in scope.items()
            if k in ("tenant_id", "user_id", "session_id", "app_id")}
    if keys and "memory_id" not in scope:
        where = " AND ".join(f"{k} = ?" for k in keys)
        for table in ("decisions", "tasks"):
            db.execute(f"DELETE FROM {table} WHERE {where}", list(keys.values()))


def _fix_sessions(db: Database, touched: list[tuple[str, str]]) -> None:
    """Sessions that lost events: drop the empty ones, recount the rest and forget their summary
    (it was written from events that no longer exist)."""
    for tenant_id, session_id in touched:
        row = db.execute(
            "SELECT count(*), min(ts), max(ts) FROM events WHERE tenant_id = ? AND session_id = ?"
            " AND kind != 'command'",  # memcli's own writes are not the session's turns
            (tenant_id, session_id)).fetchone()
        if not row[0]:
            db.execute("DELETE FROM sessions WHERE tenant_id = ? AND session_id = ?",
                       (tenant_id, session_id))
        else:
            db.execute(
                "UPDATE sessions SET event_count = ?, started_at = ?, last_event_at = ?,"
                " summary = NULL, consolidated_at = NULL WHERE tenant_id = ? AND session_id = ?",
                (*row, tenant_id, session_id))
            db.execute("UPDATE session_consolidation SET last_error = NULL"
                       " WHERE tenant_id = ? AND session_id = ?", (tenant_id, session_id))


def secure_delete(db: Database, mode: int) -> int:
    """Overwrite deleted content from now on (1: with zeros; 0 off; 2 fast); the old mode."""
    return db.backend.secure_delete(db, mode)


def erase_physically(db: Database) -> bool:
    """Rewrite storage so the deleted bytes are gone (SQLite: VACUUM, then a TRUNCATE
    checkpoint of the WAL); False when another connection kept them (busy writer, or a
    reader holding an old snapshot)."""
    return db.backend.erase_physically(db)


# meta key: when a purge last deleted without being allowed to erase (a tenant role on
# PostgreSQL); the owner's next purge, which does erase, removes it; doctor shows it.
VACUUM_PENDING = "purge_vacuum_pending"


def may_erase(db: Database) -> bool:
    return db.backend.may_erase(db)


def mark_vacuum_pending(db: Database, since: str) -> None:
    with db.transaction():
        db.set_meta(VACUUM_PENDING, since)


def clear_vacuum_pending(db: Database) -> None:
    if db.get_meta(VACUUM_PENDING) is not None:
        with db.transaction():
            db.execute("DELETE FROM meta WHERE key = ?", (VACUUM_PENDING,))


def checkpoint(db: Database) -> bool:
    """Fold the write-ahead log into the database and truncate it; False when a reader still
    holds an old snapshot."""
    return db.backend.checkpoint(db)
