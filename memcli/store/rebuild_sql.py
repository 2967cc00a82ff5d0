"""SQL for `memcli rebuild`: read the ground truth (events, history), rewrite derived tables.

Every function here is called by memcli/lifecycle/rebuild_derived.py inside that stage's transaction
(or, for the reads of a plan, outside any). Nothing here deletes or changes an event, a history
row, or a memory's state columns.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.store import sparse
from memcli.store.batching import chunks, marks
from memcli.store.orphans import PURGED, UNUSED_ENTITIES, delete_lacking, ids_lacking, lacking
from memcli.store.sealing import seal_if
from memcli.store.vectors import delete_vectors

if TYPE_CHECKING:
    from collections.abc import Iterator

    from memcli.store.connection import Database

# Row counts a plan shows, per derived table (with the engine's own index tables first, and
# its sparse tables before sparse_df).
DERIVED_TABLES = ("sparse_df", "entities", "entity_aliases", "memory_entities", "relations",
                  "sessions")


def table_names(db: Database) -> set[str]:
    return db.backend.table_names(db)


def create_missing(db: Database) -> list[str]:
    """Dropped tables, indexes and triggers come back empty, existing ones are left alone.
    Returns the tables it created."""
    return db.backend.create_missing(db)


def drop_lexical(db: Database) -> None:
    """Drop and re-create the lexical indexes, empty (filled by doctor.rebuild_lexical)."""
    db.backend.reset_lexical(db)


def count_rows(db: Database) -> dict[str, int | None]:
    """Rows per derived table (None: the table is missing or unreadable)."""
    backend = db.backend
    names = (*backend.lexical_tables, "memory_vectors", *backend.vector_tables,
             *backend.sparse_tables, *DERIVED_TABLES)
    return backend.row_counts(db, names)


def memory_counts(db: Database) -> dict[str, int]:
    return {
        "events": int(db.scalar("SELECT count(*) FROM events")),
        "episode_memories": int(db.scalar(
            "SELECT count(*) FROM memories WHERE event_id IS NOT NULL")),
        "derived_memories": int(db.scalar(
            "SELECT count(*) FROM memories WHERE event_id IS NULL")),
    }


# -- episodes --------------------------------------------------------------------------------
def events_in_order(db: Database) -> Iterator[dict[str, Any]]:
    """Every event an episode is cut from, oldest first (not memcli's own `command` events;
    the row tracer opens `high` ones; rebuild checks the key)."""
    yield from db.stream(
        "SELECT seq, event_id, ts, recorded_at, tenant_id, user_id, agent_id, session_id,"
        " app_id, run_id, channel, actor_type, actor_id, kind, sensitivity, tags, content,"
        " redactions FROM events WHERE kind != 'command' ORDER BY seq")  # no episode


def episodes_by_event(db: Database) -> dict[str, dict[int, tuple[int, str]]]:
    """event id -> chunk index -> (memory id, content) of the memories cut from events."""
    out: dict[str, dict[int, tuple[int, str]]] = {}
    for mid, event_id, index, content in db.execute(
            "SELECT id, event_id, chunk_index, content FROM memories"
            " WHERE event_id IS NOT NULL ORDER BY id"):
        out.setdefault(event_id, {})[int(index)] = (int(mid), content)
    return out


def added_ids(db: Database) -> dict[str, list[int]]:
    """event id -> the memory ids its ADD history rows recorded, in order (= chunk order).
    A decision or task memory an event wrote names its ledger row in old_ref: not a chunk."""
    out: dict[str, list[int]] = {}
    for event_id, mid in db.execute(
            "SELECT event_id, memory_id FROM history WHERE op = 'ADD' AND event_id IS NOT NULL"
            " AND memory_id IS NOT NULL AND old_ref IS NULL ORDER BY memory_id"):
        out.setdefault(event_id, []).append(int(mid))
    return out


def purged_ids(db: Database) -> set[int]:
    """Memory ids a person or decay deleted for good (a PURGE row names them)."""
    return {int(r[0]) for r in db.execute(
        "SELECT memory_id FROM history WHERE op = 'PURGE' AND memory_id IS NOT NULL")}


def existing_ids(db: Database, ids: list[int]) -> set[int]:
    found: set[int] = set()
    for part in chunks(ids, 500):
        found |= {int(r[0]) for r in db.execute(
            f"SELECT id FROM memories WHERE id IN ({marks(part)})", part)}
    return found


def history_of(db: Database, ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Each memory's history rows, oldest first (meta parsed; the tracer opens sealed ones)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for part in chunks(ids, 500):
        for row in db.query(f"SELECT memory_id, op, old_ref, new_ref, meta, ts FROM history"
                            f" WHERE memory_id IN ({marks(part)}) ORDER BY id", part):
            try:
                row["meta"] = json.loads(row["meta"] or "{}")
            except ValueError:
                row["meta"] = {}
            out.setdefault(int(row["memory_id"]), []).append(row)
    return out


_EPISODE_COLUMNS = (
    "id", "kind", "category", "content", "tenant_id", "user_id", "agent_id", "session_id",
    "app_id", "run_id", "channel", "sensitivity", "actor_type", "actor_id", "event_id",
    "event_seq", "chunk_index", "token_count", "importance", "pinned", "confidence",
    "decay_rate", "event_time", "created_at", "updated_at", "valid_from", "valid_to", "state",
    "purge_at", "source_ids", "attributes",
)


def insert_episode(db: Database, row: dict[str, Any]) -> int:
    """One memory cut from an event, with the id it had (`row["id"]`) or a new one (None).
    Only the memories row: the index stages that follow write its index rows."""
    high = row["sensitivity"] == "high"
    # No id: a new one is generated (PostgreSQL's identity refuses an explicit NULL).
    values = {c: row.get(c) for c in _EPISODE_COLUMNS if c != "id" or row.get("id") is not None}
    values["content"] = seal_if(db, high, row["content"])
    values["source_ids"] = json.dumps(row["source_ids"], ensure_ascii=False)
    values["attributes"] = seal_if(db, high, json.dumps(row["attributes"], ensure_ascii=False))
    return db.insert(f"INSERT INTO memories ({', '.join(values)}) VALUES"
                     f" ({', '.join(':' + c for c in values)}) RETURNING id", values)


def rewrite_content(db: Database, memory_id: int, content: str, token_count: int,
                    high: bool) -> None:
    """An episode whose text no longer matches its event's chunk gets the chunk's text."""
    db.execute("UPDATE memories SET content = ?, token_count = ? WHERE id = ?",
               (seal_if(db, high, content), token_count, memory_id))


def refresh_sessions(db: Database) -> int:
    """Each session's event-derived columns again from its events (first and last event time,
    count, user; memcli's own `command` events are not the session's turns); its
    consolidation state (consolidated_at, summary) is kept."""
    return db.change_count("""
        INSERT INTO sessions (tenant_id, session_id, user_id, started_at, last_event_at,
                              event_count)
        SELECT tenant_id, session_id, max(user_id), min(ts), max(ts), count(*)
        FROM events WHERE session_id IS NOT NULL AND kind != 'command'
        GROUP BY tenant_id, session_id
        ON CONFLICT (tenant_id, session_id) DO UPDATE SET
            started_at = excluded.started_at, last_event_at = excluded.last_event_at,
            event_count = excluded.event_count,
            user_id = coalesce(sessions.user_id, excluded.user_id)""")


# -- relations -------------------------------------------------------------------------------
def edges_in_history(db: Database) -> list[tuple[int, int, str, float, str]]:
    """(src, dst, kind, strength, created_at) of every edge history recorded: a LINK row is a
    `related` edge, an UPDATE naming `superseded_by` a `supersedes` edge (new -> old)."""
    edges = []
    for row in db.query("SELECT memory_id, op, new_ref, meta, ts FROM history"
                        " WHERE op IN ('LINK', 'UPDATE') AND memory_id IS NOT NULL ORDER BY id"):
        try:
            meta = json.loads(row["meta"] or "{}")
        except ValueError:
            continue
        if row["op"] == "LINK" and row["new_ref"] and "strength" in meta:
            src, dst = sorted((int(row["memory_id"]), int(row["new_ref"])))
            edges.append((src, dst, "related", float(meta["strength"]), row["ts"]))
        elif row["op"] == "UPDATE" and isinstance(meta.get("superseded_by"), int):
            edges.append((meta["superseded_by"], int(row["memory_id"]), "supersedes", 1.0,
                          row["ts"]))
    return edges


def restore_edges(db: Database, edges: list[tuple[int, int, str, float, str]]) -> int:
    """Add the edges that are missing and whose two memories exist; returns how many."""
    before = int(db.scalar("SELECT count(*) FROM relations"))
    db.executemany(
        "INSERT INTO relations (src_id, dst_id, kind, strength, created_at)"
        " SELECT :src, :dst, :kind, :strength, :ts WHERE EXISTS"
        " (SELECT 1 FROM memories WHERE id = :src) AND EXISTS"
        " (SELECT 1 FROM memories WHERE id = :dst) ON CONFLICT DO NOTHING",
        [dict(zip(("src", "dst", "kind", "strength", "ts"), edge, strict=True))
         for edge in edges])
    return int(db.scalar("SELECT count(*) FROM relations")) - before


# -- entities, sparse, vectors ---------------------------------------------------------------
def memory_texts(db: Database, after_id: int = 0) -> list[tuple[int, str, str]]:
    """(id, content, sensitivity) of every memory above `after_id`, any state, by id."""
    return [(int(i), c, s) for i, c, s in db.execute(
        "SELECT id, content, sensitivity FROM memories WHERE id > ? ORDER BY id", (after_id,))]


def reset_entity_links(db: Database) -> None:
    """Links and aliases go; entity rows stay, so an entity keeps its id while it is used."""
    db.execute("DELETE FROM memory_entities")
    db.execute("DELETE FROM entity_aliases")


def drop_unused_entities(db: Database) -> int:
    return delete_lacking(db, *UNUSED_ENTITIES)


def reset_sparse(db: Database) -> None:
    """Empty the sparse index (the model and vocabulary stay recorded in meta)."""
    sparse.clear(db)


def recount_df(db: Database) -> None:
    """Document frequencies again from the stored terms (exact, whatever happened before)."""
    sparse.recount_df(db)


def stored_vectors(db: Database, ids: list[int]) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    for part in chunks(ids, 500):
        found.update((int(i), bytes(b)) for i, b in db.execute(
            f"SELECT memory_id, embedding FROM memory_vectors WHERE memory_id IN ({marks(part)})",
            part))
    return found


def write_vectors(db: Database, rows: list[tuple[int, bytes]]) -> None:
    """Float vectors only: the vector index is made again from them in one go at the end."""
    db.backend.store_vectors(db, rows)


def remake_vec_index(db: Database, dimension: int) -> None:
    """Make the vector index again from memory_vectors (call in a transaction: no reader
    sees it missing). Its rows, including any a damage left wrong, are all new."""
    db.backend.rebuild_vectors(db, dimension)


def delete_orphan_vectors(db: Database) -> list[int]:
    """Vectors whose memory is gone."""
    ids = ids_lacking(db, "memory_vectors", ("memory_vectors.memory_id", "memories", "id"))
    for part in chunks(ids, 500):
        delete_vectors(db, part)
    return ids


# -- what only exists as derived data --------------------------------------------------------
def lost_derived(db: Database) -> list[dict[str, Any]]:
    """Memories not cut from events (facts, summaries ...) that history says were written and
    that are gone without a purge: their text existed only in their memories row, unless a
    command event holds it (the commands stage brings those back; the caller leaves them out).
    A purge empties the meta of the rows it covers, so a purged memory is not listed."""
    rows = db.query(
        "SELECT h.memory_id AS id, h.meta FROM history h WHERE h.op = 'ADD'"
        " AND (h.event_id IS NULL OR h.old_ref IS NOT NULL) AND h.memory_id IS NOT NULL"
        " AND h.meta != '{}'"
        f" AND {lacking('h.memory_id', 'memories')}"
        f" AND {lacking('h.memory_id', 'history', 'memory_id', also=PURGED)}"
        " ORDER BY h.memory_id")
    out = []
    for row in rows:
        try:
            kind = json.loads(row["meta"]).get("kind")
        except (ValueError, AttributeError):
            kind = None
        out.append({"id": int(row["id"]), "kind": kind})
    return out
