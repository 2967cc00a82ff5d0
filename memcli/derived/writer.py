"""Writing derived memories (facts, summaries, insights, decisions ...) the one right way.

Every derived memory: cites its sources, is indexed in every leg (FTS, trigram, sparse, vector),
links its entities, records history and a change-log entry, and is linked to its closest
semantic neighbours in `relations`. Consolidation, reflection, decisions and `remember` all
write through `write_memory`, inside the caller's transaction. It is also a redaction choke point
(see `memcli.policy.redaction`): text a model wrote is redacted before anything is derived from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.core.records import utcnow
from memcli.entities.extraction import extract_entities
from memcli.policy.redaction import redact_record, redact_text
from memcli.store import memories, relations, sparse
from memcli.store import vectors as vec

if TYPE_CHECKING:
    from memcli.store.handle import MemoryHandle

SEMANTIC_KINDS = ("fact", "summary", "insight", "reflection", "procedural", "decision", "task")
LINK_TOP_K = 3
LINK_MIN = 0.80  # cosine similarity for a `related` edge (e5-small scores unrelated text ~0.7)
DEFAULT_DECAY = 0.01  # a derived memory's decay rate unless its writer says


def write_memory(memory: MemoryHandle, *, content: str, kind: str, source_ids: list[Any],
                 tenant_id: str = "default", user_id: str | None = None,
                 agent_id: str | None = None, session_id: str | None = None,
                 app_id: str | None = None, run_id: str | None = None,
                 category: str | None = None, channel: str = "private",
                 sensitivity: str = "none", importance: float = 0.5, pinned: bool = False,
                 confidence: float = 1.0, decay_rate: float = DEFAULT_DECAY,
                 event_time: str | None = None,
                 attributes: dict[str, Any] | None = None, actor: str = "memcli",
                 link: bool = True, vector: Any = None,
                 sparse_terms: dict[int, float] | None = None,
                 origin_event: str | None = None) -> int:
    """Insert one derived memory with all its index rows; returns its id.

    Call inside `memory.db.transaction()` when several writes must land together. `vector`
    and `sparse_terms`: the content's embedding and SPLADE terms if the caller has them already
    (from `encode_ahead`, or consolidation's deduplication), so they are not computed twice,
    and not while the caller's transaction holds the write lock. Otherwise they are computed
    here before this function's own transaction begins. `origin_event`: the command event the
    memory is derived from (memcli.ledger.commands), named by its ADD history row.
    """
    # Model-written text (facts, summaries, insights) is redacted here, before it is indexed,
    # embedded or linked to entities; a caller's already redacted input passes unchanged.
    (content, attributes, source_ids), _ = redact_record((content, attributes or {}, source_ids))
    db = memory.db
    now = utcnow()
    if memory.sparse is not None and sparse_terms is None:
        sparse_terms = memory.sparse.encode_documents([content])[0]
    if memory.embedder is None:
        vector = None
    elif vector is None:
        vector = memory.embedder.embed_documents([content])[0]
    with db.transaction():
        memory_id = memories.insert_memory(db, memory_row(
            content=content, kind=kind, category=category, source_ids=source_ids,
            scope={"tenant_id": tenant_id, "user_id": user_id, "agent_id": agent_id,
                   "session_id": session_id, "app_id": app_id, "run_id": run_id},
            channel=channel, sensitivity=sensitivity, importance=importance, pinned=pinned,
            confidence=confidence, decay_rate=decay_rate, event_time=event_time,
            attributes=attributes, actor=actor, now=now))
        if sensitivity != "high":  # entity names are stored in plain text
            memories.link_entities(db, memory_id, extract_entities(content), now)
        if sparse_terms is not None:
            sparse.insert_postings(db, [(memory_id, sparse_terms)])
        if vector is not None:
            vector = vector.astype("float32")
            vec.insert_vectors(db, [(memory_id, vector.tobytes())])
        scope = {"tenant_id": tenant_id, "user_id": user_id, "session_id": session_id}
        event_id, row_ref = ledger_origin(kind, attributes or {})
        if origin_event is not None:
            event_id, row_ref = origin_event, "command"  # memcli.ledger.commands.ORIGIN
        memories.add_history(db, memory_id, "ADD", event_id=event_id, old_ref=row_ref,
                        new_ref=str(memory_id), actor=actor, scope=scope,
                        meta={"kind": kind, "sources": source_ids[:20]})
        memories.bump_revision(db, memories.thread_key(tenant_id, user_id, session_id),
                          [("created", memory_id, content)])
        if link and vector is not None and kind in SEMANTIC_KINDS:
            link_related(memory, memory_id, vector.tobytes(), tenant_id, user_id, session_id)
    return memory_id


def memory_row(*, content: str, kind: str, category: str | None, source_ids: list[Any],
               scope: dict[str, Any], channel: str, sensitivity: str, importance: float,
               pinned: bool, confidence: float, decay_rate: float, event_time: str | None,
               attributes: dict[str, Any] | None, actor: str, now: str) -> dict[str, Any]:
    """The memories row of a derived memory written at `now` (`write_memory`'s; `memcli
    rebuild` derives the same row from a command event)."""
    return {
        "kind": kind, "category": category, "content": content,
        **{k: scope.get(k) for k in ("tenant_id", "user_id", "agent_id", "session_id",
                                     "app_id", "run_id")},
        "channel": channel, "sensitivity": sensitivity, "actor_type": "memcli",
        "actor_id": actor, "event_id": None, "event_seq": None, "chunk_index": 0,
        "token_count": max(1, (len(content) + 3) // 4), "importance": importance,
        "pinned": int(pinned), "confidence": confidence, "decay_rate": decay_rate,
        "event_time": event_time or now, "created_at": now, "updated_at": now,
        "valid_from": event_time or now, "source_ids": source_ids,
        "attributes": attributes or {},
    }


def ledger_origin(kind: str, attributes: dict[str, Any]) -> tuple[str | None, str | None]:
    """(event id, `decision:ID` / `task:ID`) of a decision or task memory written for an event
    (attributes `event_id` and `decision_id` / `task_id`), else (None, None). Its ADD history
    row names both (columns a purge never empties, unlike meta), so `memcli rebuild` knows
    which ledger row, and which memory, each event wrote."""
    key = {"decision": "decision_id", "task": "task_id"}.get(kind)
    event_id, row_id = attributes.get("event_id"), attributes.get(key or "")
    if not isinstance(event_id, str) or not isinstance(row_id, int):
        return None, None
    return event_id, f"{kind}:{row_id}"


def encode_ahead(memory: MemoryHandle, texts: list[str],
                 known: dict[str, Any] | None = None) -> dict[str, tuple[Any, Any]]:
    """text -> (vector, sparse terms) for memories about to be written, computed before the
    caller takes the write lock (a batch of writes in one transaction passes them on to
    `write_memory`, which then runs no model while other writers wait). `known`: vectors the
    caller has already (text -> vector), not embedded again."""
    known = known or {}
    unique = list(dict.fromkeys(texts))
    vectors = dict(known)
    todo = [t for t in unique if t not in known]
    if memory.embedder is not None and todo:
        vectors.update(zip(todo, memory.embedder.embed_documents(todo), strict=True))
    terms = {}
    if memory.sparse is not None and unique:
        terms = dict(zip(unique, memory.sparse.encode_documents(unique), strict=True))
    return {t: (vectors.get(t), terms.get(t)) for t in unique}


def link_related(memory: MemoryHandle, memory_id: int, vector_blob: bytes, tenant_id: str,
                 user_id: str | None, session_id: str | None = None) -> list[tuple[int, float]]:
    """Edges to the top-K semantic neighbours with similarity >= LINK_MIN (one per pair). The
    LINK history rows carry the new memory's scope, so `history --user` lists them."""
    db = memory.db
    near = relations.semantic_neighbours(db, memory_id, vector_blob, tenant_id, user_id,
                                   SEMANTIC_KINDS, LINK_TOP_K)
    edges = [(other, score) for other, score in near if score >= LINK_MIN]
    scope = {"tenant_id": tenant_id, "user_id": user_id, "session_id": session_id}
    for other, score in edges:
        relations.add_edge(db, memory_id, other, "related", score)
        memories.add_history(db, memory_id, "LINK", new_ref=str(other), meta={"strength": score},
                        scope=scope)
    return edges


def supersede(memory: MemoryHandle, old_id: int, new_id: int, *, actor: str = "memcli",
              reason: str = "") -> None:
    """The new memory replaces the old: old gets valid_to + state superseded; nothing deleted.

    The old memory was true until the new one became true: its `valid_to` is the new memory's
    `valid_from` (the time of the event it came from), not the time of this write, so history
    back-filled by an import or by ingest with `ts` gets the intervals it describes. An old
    memory that starts later than its replacement (an older fact ingested after it) ends where
    it starts: an interval never runs backwards."""
    db = memory.db
    now = utcnow()
    reason, _ = redact_text(reason)
    with db.transaction():
        rows = memories.get_memories(db, [old_id, new_id])
        old = rows[old_id]
        valid_to = max(rows[new_id]["valid_from"] or now, old["valid_from"] or "")
        memories.mark_superseded(db, old_id, valid_to, now)
        relations.add_edge(db, new_id, old_id, "supersedes", 1.0)
        memories.add_history(db, old_id, "UPDATE", old_ref=str(old_id), new_ref=str(new_id),
                        actor=actor, scope=old,
                        meta={"superseded_by": new_id, "reason": reason, "valid_to": valid_to})
        memories.bump_revision(db, memories.thread_key(old["tenant_id"], old["user_id"],
                                             old["session_id"]),
                          [("updated", new_id, f"superseded #{old_id}")])
