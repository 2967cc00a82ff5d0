"""SQL for derived memories: rows, their FTS/trigram/vector index entries, entities, history."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.models import utcnow
from memcli.store.crypto import high_memory_ids, seal_if

if TYPE_CHECKING:
    from memcli.store.connection import Database

MEMORY_COLUMNS = (
    "kind", "category", "content", "tenant_id", "user_id", "agent_id", "session_id", "app_id",
    "run_id", "channel", "sensitivity", "actor_type", "actor_id", "event_id", "event_seq",
    "chunk_index", "token_count", "importance", "pinned", "confidence", "decay_rate",
    "event_time", "created_at", "updated_at", "valid_from", "source_ids", "attributes",
)


def _insert_sql(columns: tuple[str, ...]) -> str:
    return (f"INSERT INTO memories ({', '.join(columns)}) VALUES "
            f"({', '.join(':' + c for c in columns)}) RETURNING id")


_INSERT_SQL = _insert_sql(MEMORY_COLUMNS)
# An engine keeping the context in the row writes it with the INSERT: a later UPDATE would be
# a second statement and a second row version, and on PostgreSQL it moved the new row's BM25
# statistics again (the lexical triggers).
_INSERT_WITH_CONTEXT_SQL = _insert_sql((*MEMORY_COLUMNS, "context"))


def insert_memory(db: Database, row: dict[str, Any], context: str = "") -> int:
    """Insert a memory and its lexical index entries; returns the new id.

    A `high` memory's content and attributes are stored encrypted and its full-text rows are
    empty (a full-text index keeps the terms of what it indexes in plain text): it is found by
    its vector and sparse terms only. Its own context column is empty too: that would index the
    previous turn."""
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
    if db.backend.context_in_row:
        values["context"] = context
        memory_id = db.insert(_INSERT_WITH_CONTEXT_SQL, values)
    else:
        memory_id = db.insert(_INSERT_SQL, values)
    db.backend.index_memory(db, memory_id, text, context,
                            (row.get("tenant_id"), row.get("user_id"), row.get("session_id")))
    return memory_id


def previous_turn(db: Database, tenant_id: str, session_id: str | None,
                  user_id: str | None = None) -> str:
    """The latest memory text of the user's session: the context key of the next turn (never
    another user's turn, even in a file written before sessions were kept to one user)."""
    if session_id is None:
        return ""
    row = db.execute(
        "SELECT content, sensitivity FROM memories WHERE tenant_id = ? AND session_id = ?"
        " AND kind = 'episode' AND user_id IS NOT DISTINCT FROM ? ORDER BY event_seq DESC,"
        " chunk_index DESC"
        " LIMIT 1",
        (tenant_id, session_id, user_id),
    ).fetchone()
    # A `high` turn is never the (plain-text, indexed) context of the next one.
    return row[0] if row is not None and row[1] != "high" else ""


def lookup_entities(db: Database, keys: list[tuple[str, str, str]]
                    ) -> dict[tuple[str, str, str], int]:
    """The ids of the stored entities among these (tenant, kind, norm) keys, one statement
    per tenant and 200 keys (ingest looks up a whole batch's before writing it)."""
    found: dict[tuple[str, str, str], int] = {}
    by_tenant: dict[str, list[tuple[str, str]]] = {}
    for tenant_id, kind, norm in dict.fromkeys(keys):
        by_tenant.setdefault(tenant_id, []).append((kind, norm))
    for tenant_id, pairs in by_tenant.items():
        for start in range(0, len(pairs), 200):
            part = pairs[start:start + 200]
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
    ids = {} if ids is None else ids
    aliases = set() if aliases is None else aliases
    if not entities:
        return
    if tenant_id is None:
        tenant_id = db.scalar("SELECT tenant_id FROM memories WHERE id = ?", (memory_id,))
    # Look up first, all the memory's unknown entities in one statement: most exist already,
    # and an upsert that touches the row measured ~0.3 ms against ~0.01 ms for the lookup;
    # on a server each statement is also a round trip.
    ids.update(lookup_entities(db, [(tenant_id, ent.kind, ent.norm) for ent in entities
                                    if (tenant_id, ent.kind, ent.norm) not in ids]))
    new_aliases: list[tuple[str, int]] = []
    links: list[int] = []
    for ent in entities:
        key = (tenant_id, ent.kind, ent.norm)
        entity_id = ids.get(key)
        if entity_id is None:  # created in the entities' order: the same ids on every engine
            entity_id = db.insert("INSERT INTO entities (tenant_id, kind, norm, display,"
                                  " created_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
                                  (tenant_id, ent.kind, ent.norm, ent.value, now))
            ids[key] = entity_id
        alias = (ent.value.lower(), entity_id)
        if alias not in aliases:
            new_aliases.append(alias)
            aliases.add(alias)
        if entity_id not in links:
            links.append(entity_id)
    if new_aliases:
        db.execute("INSERT INTO entity_aliases (alias, entity_id) VALUES "
                   + ", ".join(["(?, ?)"] * len(new_aliases)) + " ON CONFLICT DO NOTHING",
                   [v for alias in new_aliases for v in alias])
    db.execute("INSERT INTO memory_entities (memory_id, entity_id) VALUES "
               + ", ".join(["(?, ?)"] * len(links)) + " ON CONFLICT DO NOTHING",
               [v for entity_id in links for v in (memory_id, entity_id)])


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
    """`history_row`s in one multi-row INSERT per 50 (ingest's ADD rows: one statement per
    batch, not per memory; the ids follow the rows' order, as one INSERT each would)."""
    for start in range(0, len(rows), 50):
        part = rows[start:start + 50]
        db.execute("INSERT INTO history (memory_id, event_id, op, old_ref, new_ref, actor,"
                   " tenant_id, user_id, session_id, meta, ts) VALUES "
                   + ", ".join(["(?,?,?,?,?,?,?,?,?,?,?)"] * len(part)),
                   [v for row in part for v in row])


def thread_key(tenant_id: str | None, user_id: str | None, session_id: str | None) -> str:
    return f"{tenant_id or 'default'}/{user_id or '-'}/{session_id or '-'}"


def bump_revision(db: Database, key: str, changes: list[tuple[str, int | None, str]]) -> int:
    """Increment a thread's revision once and log what changed at it (same transaction)."""
    now = utcnow()
    db.execute(
        "INSERT INTO threads (thread_key, revision, updated_at) VALUES (?, 1, ?) "
        "ON CONFLICT (thread_key) DO UPDATE SET revision = threads.revision + 1, updated_at = ?",
        (key, now, now),
    )
    revision = int(db.scalar("SELECT revision FROM threads WHERE thread_key = ?", (key,)))
    high = high_memory_ids(db, [mid for _, mid, _ in changes])
    db.executemany(
        "INSERT INTO change_log (thread_key, revision, op, memory_id, summary, ts)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [(key, revision, op, mid, seal_if(db, mid in high, summary[:200]), now)
         for op, mid, summary in changes],
    )
    return revision


def get_memories(db: Database, ids: list[int], columns: tuple[str, ...] | None = None
                 ) -> dict[int, dict[str, Any]]:
    """Rows by id: every column, or only `columns` (which must include "id")."""
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    wanted = ", ".join(columns) if columns else "*"
    rows = db.query(f"SELECT {wanted} FROM memories WHERE id IN ({marks})", ids)
    return {row["id"]: row for row in rows}


def record_access(db: Database, ids: list[int]) -> None:
    if ids:
        marks = ",".join("?" * len(ids))
        db.execute(
            f"UPDATE memories SET access_count = access_count + 1, last_accessed = ?"
            f" WHERE id IN ({marks})",
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
        # Seed 004's memory_stats: when the newest record was written, overall and per kind.
        "latest_record_at": db.scalar("SELECT max(created_at) FROM memories"),
        "latest_by_kind": dict(db.execute(
            f"SELECT kind, max(created_at) FROM memories GROUP BY kind ORDER BY {b('kind')}")),
    }


def mark_superseded(db: Database, memory_id: int, now: str) -> None:
    db.execute(
        "UPDATE memories SET state = 'superseded', valid_to = ?, updated_at = ? WHERE id = ?",
        (now, now, memory_id),
    )
