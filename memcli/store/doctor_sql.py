"""SQL for `memcli doctor`: integrity, stored model ids, derived rows that lost their memory or
that a memory lacks, and the repairs `doctor --fix` may run (derived rows only, never events)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcli.store import sparse as sparse_sql
from memcli.store import vectors as vec
from memcli.store.batching import chunks
from memcli.store.orphans import PURGED, UNUSED_ENTITIES, Link, delete_lacking, ids_lacking, lacking

if TYPE_CHECKING:
    from memcli.store.connection import Database


def integrity(db: Database, *, full: bool = False) -> list[str]:
    """The engine's own check: ["ok"] when sound (`full`: the slow, thorough one)."""
    return db.backend.integrity(db, full)


def schema_version(db: Database) -> int:
    return db.backend.schema_version(db)


def stored_models(db: Database) -> dict[str, str | None]:
    return {key: db.get_meta(key) for key in
            ("embedder_model", "embedder_dimension", "sparse_model", "sparse_vocab")}


def _ids(db: Database, sql: str) -> list[int]:
    return [int(r[0]) for r in db.execute(sql)]


# (table, its links) of the rows that lost their memory, and of the memories without their row.
# The lexical indexes (the backend's) hold every memory (any state); vectors and sparse terms
# skip soft-deleted ones. memcli.store.orphans writes the anti-join (NOT EXISTS, see there).
_MEMORY = ("memories", "id")
ORPHANS: dict[str, tuple[Link, ...]] = {
    "memory_vectors": (("memory_vectors.memory_id", *_MEMORY),),
    "memory_sparse": (("memory_sparse.memory_id", *_MEMORY),),
    "memory_entities": (("memory_entities.memory_id", *_MEMORY),
                        ("memory_entities.entity_id", "entities", "id")),
    "relations": (("relations.src_id", *_MEMORY), ("relations.dst_id", *_MEMORY)),
}
MISSING: dict[str, Link] = {
    "memory_vectors": ("memories.id", "memory_vectors", "memory_id"),
    "memory_sparse": ("memories.id", "memory_sparse", "memory_id"),
}


def orphans(db: Database) -> dict[str, list[int]]:
    found = db.backend.lexical_orphans(db)
    found.update((name, ids_lacking(db, name, *links)) for name, links in ORPHANS.items())
    found.update(db.backend.sparse_orphans(db))
    found.update(db.backend.vector_orphans(db))
    return found


def missing(db: Database, *, vectors: bool, sparse: bool) -> dict[str, list[int]]:
    """Memories missing from each lexical index, and (if asked) without vector / sparse terms."""
    found = db.backend.lexical_missing(db)
    names = (("memory_vectors",) if vectors else ()) + (("memory_sparse",) if sparse else ())
    found.update((name, ids_lacking(db, "memories", MISSING[name],
                                    where="memories.state != 'soft_deleted'"))
                 for name in names)
    return found


def memories_without_event(db: Database) -> list[int]:
    """Memories cut from an event that no longer exists (purge takes both, so: leftovers)."""
    return ids_lacking(db, "memories", ("memories.event_id", "events", "event_id"),
                       pick="memories.id", where="memories.event_id IS NOT NULL", order=True)


# Derived tables the schema creates, beside the engine's lexical indexes and sparse tables (a
# vector index is created on open, for the embedder's size).
DERIVED_TABLES = ("memories", "memory_vectors", "sparse_df", "entities", "entity_aliases",
                  "memory_entities", "relations", "sessions")


def missing_tables(db: Database) -> list[str]:
    present = db.backend.table_names(db)
    names = (DERIVED_TABLES[0], *db.backend.lexical_tables, DERIVED_TABLES[1],
             *db.backend.sparse_tables, *DERIVED_TABLES[2:])
    return [name for name in names if name not in present]


def missing_indexes(db: Database) -> list[str]:
    return db.backend.missing_indexes(db)


def lost_episodes(db: Database) -> list[int]:
    """Memories cut from a stored event that history added and never purged, and that are
    gone: `memcli rebuild` cuts them again with the same ids."""
    return _ids(db, "SELECT h.memory_id FROM history h JOIN events e ON e.event_id = h.event_id"
                    " WHERE h.op = 'ADD' AND h.memory_id IS NOT NULL AND h.old_ref IS NULL"
                    f" AND {lacking('h.memory_id', 'memories')}"
                    f" AND {lacking('h.memory_id', 'history', 'memory_id', also=PURGED)}"
                    " ORDER BY h.memory_id")


def count_memories(db: Database) -> int:
    return int(db.scalar("SELECT count(*) FROM memories"))


# -- repairs (doctor --fix): derived rows only -------------------------------------------------
def rebuild_lexical(db: Database) -> None:
    """The lexical indexes again from `memories` (the same rows ingest writes: a `high`
    memory's rows are empty, and it is nobody's context, as `memories.insert_memory` does)."""
    db.backend.rebuild_lexical(db)


def delete_orphans(db: Database, found: dict[str, list[int]]) -> None:
    """Derived rows whose memory is gone: vectors, sparse terms, entity links, edges."""
    vector_ids = sorted({i for name in ("memory_vectors", *db.backend.vector_tables)
                         for i in found.get(name, [])})
    for part in chunks(vector_ids, 500):
        vec.delete_vectors(db, part)
    sparse_sql.delete_postings(db, found.get("memory_sparse", []))
    db.backend.delete_sparse_orphans(db)
    sparse_sql.recount_df(db)
    delete_lacking(db, "memory_entities", *ORPHANS["memory_entities"])
    delete_lacking(db, *UNUSED_ENTITIES)
    delete_lacking(db, "relations", *ORPHANS["relations"])
