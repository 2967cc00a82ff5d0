"""SQL for derived memories: rows, their FTS/trigram/vector index entries, entities, history."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.core.records import utcnow
from memcli.store.batching import chunks, marks
from memcli.store.sealing import high_memory_ids, seal_if

if TYPE_CHECKING:
    from memcli.store.connection import Database

MEMORY_COLUMNS = (
    "kind", "category", "content", "tenant_id", "user_id", "agent_id", "session_id", "app_id",
    "run_id", "channel", "sensitivity", "actor_type", "actor_id", "event_id", "event_seq",
    "chunk_index", "token_count", "importance", "pinned", "confidence", "decay_rate",
    "event_time", "created_at", "updated_at", "valid_from", "source_ids", "attributes",
)


def _insert_sql(columns: tuple[str, ...], rows: int) -> str:
    row_marks = "(" + ", ".join("?" * len(columns)) + ")"
    return (f"INSERT INTO memories ({', '.join(columns)}) VALUES "
            f"{', '.join([row_marks] * rows)} RETURNING id")


# Memories per INSERT (28 parameters each: ~2,800, far below either engine's limit). One
# statement per batch, not per memory: on a server each is a round trip made while the writer
# lock is held, and PostgreSQL's BM25 statistics trigger (FOR EACH STATEMENT) runs once.
INSERT_ROWS = 100
# An engine keeping the context in the row writes it with the INSERT: a later UPDATE would be
# a second statement and a second row version, and on PostgreSQL it moved the new row's BM25
# statistics again (the lexical triggers).
_CONTEXT_COLUMNS = (*MEMORY_COLUMNS, "context")


def _row_values(db: Database, row: dict[str, Any], context: str,
                with_context: bool) -> tuple[list[Any], str, str]:
    """A memory's column values in MEMORY_COLUMNS order (+ context), its indexed text and
    context (both empty for a `high` memory)."""
    high = row.get("sensitivity") == "high"
    text = "" if high else row["content"]
    context = "" if high else context
    values = {c: row.get(c) for c in MEMORY_COLUMNS}
    values["content"] = seal_if(db, high, row["content"])
    values["source_ids"] = json.dumps(row.get("source_ids", []), ensure_ascii=False)
    # Attributes carry text too (tags, a summary's entities, notes): sealed as a whole.
    values["attributes"] = seal_if(db, high, json.dumps(row.get("attributes", {}),
                                                        ensure_ascii=False))
    for key, default in (("importance", 0.5), ("pinned", 0), ("confidence", 1.0),
                         ("decay_rate", 0.01), ("chunk_index", 0), ("token_count", 0)):
        if values[key] is None:
            values[key] = default
    out = [values[c] for c in MEMORY_COLUMNS]
    if with_context:
        out.append(context)
    return out, text, context


def insert_memories(db: Database, items: list[tuple[dict[str, Any], str]]) -> list[int]:
    """Insert memories, each (row, context key), with their lexical index entries; returns
    their new ids in the items' order (the ids each one INSERT in turn would have given).

    A `high` memory's content and attributes are stored encrypted and its full-text rows are
    empty (a full-text index keeps the terms of what it indexes in plain text): it is found by
    its vector and sparse terms only. Its own context column is empty too: that would index the
    previous turn."""
    in_row = db.backend.context_in_row
    columns = _CONTEXT_COLUMNS if in_row else MEMORY_COLUMNS
    ids: list[int] = []
    entries: list[tuple[int, str, str, tuple[str | None, str | None, str | None]]] = []
    for part in chunks(items, INSERT_ROWS):
        values = [_row_values(db, row, context, in_row) for row, context in part]
        # Neither engine promises RETURNING's order for a multi-row INSERT; both give the
        # rows of one VALUES list ascending ids in list order (SQLite's rowid is max + 1,
        # PostgreSQL's identity a sequence drawn row by row), so sorting maps them back.
        new = sorted(int(r[0]) for r in db.execute(
            _insert_sql(columns, len(part)), [v for vals, _, _ in values for v in vals]))
        for (row, _), memory_id, (_, text, context) in zip(part, new, values, strict=True):
            entries.append((memory_id, text, context,
                            (row.get("tenant_id"), row.get("user_id"), row.get("session_id"))))
        ids.extend(new)
    db.backend.index_new_memories(db, entries)
    return ids


def insert_memory(db: Database, row: dict[str, Any], context: str = "") -> int:
    """Insert one memory and its lexical index entries (`insert_memories`); returns its id."""
    return insert_memories(db, [(row, context)])[0]


_LATEST_TURN = (
    "(SELECT CASE WHEN sensitivity = 'high' THEN '' ELSE content END FROM memories"
    " WHERE tenant_id = ? AND session_id = ? AND kind = 'episode'"
    " AND user_id IS NOT DISTINCT FROM ? ORDER BY event_seq DESC, chunk_index DESC LIMIT 1)")


def previous_turns(db: Database, keys: list[tuple[str, str, str | None]]
                   ) -> dict[tuple[str, str], str]:
    """The latest memory text of each user's session, keyed by (tenant, session): the context
    key of the session's next turn (never another user's turn, even in a file written before
    sessions were kept to one user). One statement per 50 sessions, each session's own indexed
    LIMIT 1 as one column of its row."""
    found: dict[tuple[str, str], str] = {}
    unique = list(dict.fromkeys(keys))
    for part in chunks(unique, 50):
        row = db.execute("SELECT " + ", ".join([_LATEST_TURN] * len(part)),
                         [v for key in part for v in key]).fetchone()
        # A `high` turn is never the (plain-text, indexed) context of the next one.
        for (tenant_id, session_id, _), text in zip(part, row, strict=True):
            found[(tenant_id, session_id)] = text or ""
    return found


def lookup_entities(db: Database, keys: list[tuple[str, str, str]]
                    ) -> dict[tuple[str, str, str], int]:
    """The ids of the stored entities among these (tenant, kind, norm) keys, one statement
    per tenant and 200 keys (ingest looks up a whole batch's before writing it)."""
    found: dict[tuple[str, str, str], int] = {}
    by_tenant: dict[str, list[tuple[str, str]]] = {}
    for tenant_id, kind, norm in dict.fromkeys(keys):
        by_tenant.setdefault(tenant_id, []).append((kind, norm))
    for tenant_id, pairs in by_tenant.items():
        for part in chunks(pairs, 200):
            where = " OR ".join(["(kind = ? AND norm = ?)"] * len(part))
            for entity_id, kind, norm in db.execute(
                    f"SELECT id, kind, norm FROM entities WHERE tenant_id = ? AND ({where})",
                    [tenant_id, *(v for pair in part for v in pair)]):
                found[(tenant_id, kind, norm)] = entity_id
    return found


def link_entities(db: Database, memory_id: int, entities: list, now: str, *,
                  ids: dict[tuple[str, str, str], int] | None = None,
                  aliases: set[tuple[str, int]] | None = None,
                  tenant_id: str | None = None) -> None:
    """Link a memory to its entities, creating entities and aliases as needed. Entities are
    the memory's tenant's own (`tenant_id`, read from the memory row when not given).

    `ids` and `aliases` are optional caches a caller writing many memories in one transaction
    passes in (and drops if that transaction's savepoint is rolled back).
    """
    if not entities:
        return
    if tenant_id is None:
        tenant_id = db.scalar("SELECT tenant_id FROM memories WHERE id = ?", (memory_id,))
    link_entities_many(db, [(memory_id, tenant_id, entities)], now, ids=ids, aliases=aliases)


# Rows per multi-row INSERT of entities, aliases and links (5 parameters at most each).
_LINK_ROWS = 200


def link_entities_many(db: Database, links: list[tuple[int, str, list]], now: str, *,
                       ids: dict[tuple[str, str, str], int] | None = None,
                       aliases: set[tuple[str, int]] | None = None) -> None:
    """`link_entities` for many (memory id, tenant, entities) at once: one lookup, and one
    multi-row INSERT each of new entities, aliases and links (per 200 rows), whatever the
    number of memories (ingest links a whole batch's). New entities get their ids in the
    order they first appear, as linking the memories one by one would give them."""
    ids = {} if ids is None else ids
    aliases = set() if aliases is None else aliases
    # Look up first, the unknown entities of all the memories at once: most exist already,
    # and an upsert that touches the row measured ~0.3 ms against ~0.01 ms for the lookup;
    # on a server each statement is also a round trip.
    ids.update(lookup_entities(db, [(tenant_id, ent.kind, ent.norm)
                                    for _, tenant_id, found in links for ent in found
                                    if (tenant_id, ent.kind, ent.norm) not in ids]))
    new: dict[tuple[str, str, str], str] = {}  # key -> display, in first-seen order
    for _, tenant_id, found in links:
        for ent in found:
            key = (tenant_id, ent.kind, ent.norm)
            if key not in ids and key not in new:
                new[key] = ent.value
    keys = list(new)
    for part in chunks(keys, _LINK_ROWS):
        # Mapped back by key (unique per tenant): RETURNING's order is not promised.
        for entity_id, tenant_id, kind, norm in db.execute(
                "INSERT INTO entities (tenant_id, kind, norm, display, created_at) VALUES "
                + ", ".join(["(?, ?, ?, ?, ?)"] * len(part))
                + " RETURNING id, tenant_id, kind, norm",
                [v for key in part for v in (*key, new[key], now)]):
            ids[(tenant_id, kind, norm)] = int(entity_id)
    new_aliases: list[tuple[str, int]] = []
    pairs: list[tuple[int, int]] = []
    for memory_id, tenant_id, found in links:
        linked: set[int] = set()
        for ent in found:
            entity_id = ids[(tenant_id, ent.kind, ent.norm)]
            alias = (ent.value.lower(), entity_id)
            if alias not in aliases:
                new_aliases.append(alias)
                aliases.add(alias)
            if entity_id not in linked:
                linked.add(entity_id)
                pairs.append((memory_id, entity_id))
    for named in chunks(new_aliases, _LINK_ROWS):
        db.execute("INSERT INTO entity_aliases (alias, entity_id) VALUES "
                   + ", ".join(["(?, ?)"] * len(named)) + " ON CONFLICT DO NOTHING",
                   [v for alias in named for v in alias])
    for linked_part in chunks(pairs, _LINK_ROWS):
        db.execute("INSERT INTO memory_entities (memory_id, entity_id) VALUES "
                   + ", ".join(["(?, ?)"] * len(linked_part)) + " ON CONFLICT DO NOTHING",
                   [v for pair in linked_part for v in pair])


def add_history(db: Database, memory_id: int | None, op: str, *, event_id: str | None = None,
                old_ref: str | None = None, new_ref: str | None = None, actor: str = "memcli",
                scope: dict[str, Any] | None = None, meta: dict | None = None,
                seal: bool = False) -> None:
    """One audit row; its meta is encrypted when the memory is `high` or `seal` says so."""
    scope = scope or {}
    text = json.dumps(meta or {})
    if meta and (seal or high_memory_ids(db, [memory_id] if memory_id is not None else [])):
        text = seal_if(db, True, text)  # e.g. a merged text of a `high` memory
    db.execute(
        "INSERT INTO history (memory_id, event_id, op, old_ref, new_ref, actor, tenant_id,"
        " user_id, session_id, meta, ts) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (memory_id, event_id, op, old_ref, new_ref, actor, scope.get("tenant_id"),
         scope.get("user_id"), scope.get("session_id"), text, utcnow()),
    )


def history_row(memory_id: int, op: str, *, event_id: str | None, new_ref: str | None,
                scope: dict[str, Any]) -> tuple:
    """A plain audit row (no meta) for `add_history_rows`, stamped now, as add_history would."""
    return (memory_id, event_id, op, None, new_ref, "memcli", scope.get("tenant_id"),
            scope.get("user_id"), scope.get("session_id"), "{}", utcnow())


def add_history_rows(db: Database, rows: list[tuple]) -> None:
    """`history_row`s in one multi-row INSERT per 100 (ingest's ADD rows: one statement per
    batch, not per memory; the ids follow the rows' order, as one INSERT each would)."""
    for part in chunks(rows, 100):
        db.execute("INSERT INTO history (memory_id, event_id, op, old_ref, new_ref, actor,"
                   " tenant_id, user_id, session_id, meta, ts) VALUES "
                   + ", ".join(["(?,?,?,?,?,?,?,?,?,?,?)"] * len(part)),
                   [v for row in part for v in row])


def thread_key(tenant_id: str | None, user_id: str | None, session_id: str | None) -> str:
    return f"{tenant_id or 'default'}/{user_id or '-'}/{session_id or '-'}"


def bump_revision(db: Database, key: str, changes: list[tuple[str, int | None, str]]) -> int:
    """Increment a thread's revision once and log what changed at it (same transaction)."""
    return bump_revisions(db, {key: changes})[key]


def bump_revisions(db: Database, threads: dict[str, list[tuple[str, int | None, str]]],
                   high: set[int] | None = None) -> dict[str, int]:
    """`bump_revision` for several threads: one upsert per 100 threads returning their new
    revisions, then the change-log rows in one multi-row INSERT per 200, in the threads'
    order (the ids one bump_revision per thread in turn would give). `high`: which of the
    memories are `high` (their summaries are sealed), when the caller knows; else read."""
    now = utcnow()
    keys = list(threads)
    revisions: dict[str, int] = {}
    for part in chunks(keys, 100):
        for thread, revision in db.execute(
                "INSERT INTO threads (thread_key, revision, updated_at) VALUES "
                + ", ".join(["(?, 1, ?)"] * len(part))
                + " ON CONFLICT (thread_key) DO UPDATE SET revision = threads.revision + 1,"
                " updated_at = excluded.updated_at RETURNING thread_key, revision",
                [v for key in part for v in (key, now)]):
            revisions[thread] = int(revision)
    if high is None:
        high = high_memory_ids(db, [mid for changes in threads.values()
                                    for _, mid, _ in changes])
    rows = [(key, revisions[key], op, mid, seal_if(db, mid in high, summary[:200]), now)
            for key, changes in threads.items() for op, mid, summary in changes]
    for logged in chunks(rows, 200):
        db.execute("INSERT INTO change_log (thread_key, revision, op, memory_id, summary, ts)"
                   " VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(logged)),
                   [v for row in logged for v in row])
    return revisions


def get_memories(db: Database, ids: list[int], columns: tuple[str, ...] | None = None
                 ) -> dict[int, dict[str, Any]]:
    """Rows by id: every column, or only `columns` (which must include "id")."""
    if not ids:
        return {}
    wanted = ", ".join(columns) if columns else "*"
    rows = db.query(f"SELECT {wanted} FROM memories WHERE id IN ({marks(ids)})", ids)
    return {row["id"]: row for row in rows}


def record_access(db: Database, ids: list[int]) -> None:
    if ids:
        db.execute(
            f"UPDATE memories SET access_count = access_count + 1, last_accessed = ?"
            f" WHERE id IN ({marks(ids)})",
            [utcnow(), *ids],
        )


def set_state(db: Database, memory_id: int, state: str, purge_at: str | None) -> None:
    db.execute(
        "UPDATE memories SET state = ?, purge_at = ?, updated_at = ? WHERE id = ?",
        (state, purge_at, utcnow(), memory_id),
    )


def memories_without_vectors(db: Database, limit: int) -> list[tuple[int, str]]:
    return list(db.execute(
        "SELECT m.id, m.content FROM memories m LEFT JOIN memory_vectors v ON v.memory_id = m.id"
        " WHERE v.memory_id IS NULL AND m.state != 'soft_deleted' ORDER BY m.id LIMIT ?",
        (limit,),
    ))


def count_without_vectors(db: Database, active_only: bool = False) -> int:
    """Memories without a vector (`active_only`: those `memories_without_vectors` returns)."""
    return int(db.scalar(
        "SELECT count(*) FROM memories m LEFT JOIN memory_vectors v ON v.memory_id = m.id"
        " WHERE v.memory_id IS NULL" + (" AND m.state != 'soft_deleted'" if active_only else "")
    ))


def stats(db: Database) -> dict[str, Any]:
    # ORDER BY: SQLite's GROUP BY happens to sort, PostgreSQL's hash aggregate does not, and
    # the JSON's key order would change from run to run.
    b = db.dialect.binary
    by_kind = dict(db.execute(
        f"SELECT kind, count(*) FROM memories GROUP BY kind ORDER BY {b('kind')}"))
    by_state = dict(db.execute(
        f"SELECT state, count(*) FROM memories GROUP BY state ORDER BY {b('state')}"))
    return {
        "events": int(db.scalar("SELECT count(*) FROM events")),
        "memories": int(db.scalar("SELECT count(*) FROM memories")),
        "by_kind": by_kind,
        "by_state": by_state,
        "entities": int(db.scalar("SELECT count(*) FROM entities")),
        "sessions": int(db.scalar("SELECT count(*) FROM sessions")),
        "artifacts": int(db.scalar("SELECT count(*) FROM artifacts")),
        "vectors": int(db.scalar("SELECT count(*) FROM memory_vectors")),
        # The SQLite memory extension design's memory_stats: when the newest record was written,
        # overall and per kind.
        "latest_record_at": db.scalar("SELECT max(created_at) FROM memories"),
        "latest_by_kind": dict(db.execute(
            f"SELECT kind, max(created_at) FROM memories GROUP BY kind ORDER BY {b('kind')}")),
    }


def mark_superseded(db: Database, memory_id: int, valid_to: str, now: str) -> None:
    db.execute(
        "UPDATE memories SET state = 'superseded', valid_to = ?, updated_at = ? WHERE id = ?",
        (valid_to, now, memory_id),
    )
