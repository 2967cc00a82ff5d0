"""`memcli rebuild`: regenerate every derived table from the append-only event log.

Principles P1 and P2 of the Agent Memory System PRD: the event log is the ground truth and
derived tables are disposable. What each table of schema.sql is to a rebuild:

ground truth (read, never written)
  events, artifacts (a tool result's full output: the event keeps only a 64 KB excerpt), and
  history (the audit trail: which memory ids an event's episodes had, and every person's
  forget / restore / pin / confirm / correct / purge).

rebuilt from events (and from history, for ids and state)
  memories cut from events (kind `episode`): one per chunk of each event's text, cut by the
    same code as ingest (memcli.ingest.prepare.event_text + chunking). A row that exists keeps its
    id
    and every state column (state, pinned, confidence, decay_rate, importance, category,
    access counts, purge_at, valid_to); only its text is rewritten if it no longer matches its
    chunk. A missing row gets back the id its ADD history row recorded, and the state its
    history replays (forget, restore, pin, confirm, supersede); a memory history says was
    purged is never brought back. Only a row with no ADD row (history deleted by hand) gets a
    new id, listed in the report.
  sessions: first/last event time, event count, user (consolidated_at and summary are kept).
  decisions and tasks recorded as events (kinds `decision`, `task_update`, and the `command`
    events of `decision add` / `supersede`, `task add` / `update`), with the memory of each
    decision and of each task version: replayed in log order (fields, refs, supersession,
    task status and text), brought back with the ids their history rows recorded; rows that
    exist are kept, purged ones stay gone (memcli/lifecycle/rebuild_ledger.py).
  memories and checkpoints memcli's own writes derived from their `command` events (remember,
    correct, proposals accept; checkpoint save): each row as the event describes it, at the
    event's time, with its recorded id and replayed state (memcli/lifecycle/rebuild_commands.py).

rebuilt from memories (their text, so from events for episodes)
  memories_fts, memories_trigram (dropped and created again), memory_sparse (+ sparse_postings
  on SQLite), sparse_df (SPLADE), memory_vectors, vec_memories (the embedder), entities,
  entity_aliases, memory_entities (regex extraction; an entity still in use keeps its id).
  relations: edges are kept; an edge history recorded (LINK -> related, UPDATE superseded_by
  -> supersedes) that is missing is added back.

kept: exists only as derived data (a model wrote it, or a write made before writes were
events; no event holds it)
  memories no event wrote (summary, insight, reflection, consolidation's facts, decisions and
  tasks) and their history; checkpoints no event saved, proposals, session_consolidation,
  pair_checks (consolidation decisions), threads, change_log, acb_seen (what agents saw),
  request_metrics, llm_usage, lifecycle_runs, run_locks, meta (models, key id).

cannot rebuild (said in the report and on stderr)
  - a memory no event wrote whose row is gone without a purge: its text existed only in that
    row (history keeps its id and kind, listed as `lost`);
  - of an episode row that was lost: its category and importance (given by the ingested
    record, not stored in the event), its confidence after decay, its access counts: they
    come back as ingest's defaults ('event', 0.5, 1.0, 0);
  - `related` edges history does not record (none today) and the strength of a purged one.

Stages, each its own transaction (so a busy database exits 75 with that stage undone, and a
rebuild run again after a crash finishes the job): tables (schema.sql's IF NOT EXISTS brings
back dropped tables), episodes + sessions + ledger + commands, relations, lexical,
entities, sparse, vectors. The
models run before each slice's write lock is taken, as ingest does. While the sparse stage
runs, the sparse leg sees only the memories done so far (the index is emptied first, then
filled in slices of 256); vectors are replaced in place, so the dense leg never has a gap.
A `high` database needs its key: without it the events and memories sealed with it could not
be read, and their derived rows would be lost (the rebuild refuses instead).
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from memcli.core.chunking import chunk_text
from memcli.core.progress import report, slices
from memcli.core.records import utcnow
from memcli.entities.extraction import extract_entities
from memcli.errors import UsageError
from memcli.ingest.prepare import CHUNK_TOKENS, ENCODE_SLICE, event_text
from memcli.lifecycle import rebuild_commands, rebuild_ledger
from memcli.lifecycle.rebuild_ledger import replay_state
from memcli.store import doctor_sql, memories, rebuild_sql, sparse
from memcli.store.postgres.tenant_roles import refuse_bound

if TYPE_CHECKING:
    from memcli.core.progress import Progress
    from memcli.store.connection import Database
    from memcli.store.handle import MemoryHandle

KEPT = ["memories no event wrote (summaries, insights, reflections and facts of "
        "consolidation; rows written before writes were recorded as events)", "history",
        "decisions and tasks no event wrote (consolidation's; rows written before writes "
        "were recorded as events)", "checkpoints no event saved", "proposals",
        "session_consolidation", "pair_checks", "threads", "change_log", "acb_seen",
        "request_metrics", "llm_usage", "lifecycle_runs", "meta"]
LOST_ROW_DEFAULTS = ("an episode row brought back from its event gets ingest's defaults for "
                     "what the event does not hold: category 'event', importance 0.5, "
                     "confidence 1.0, no access counts")


def _require_key(db: Database) -> None:
    if db.get_meta("enc_key_id") is not None and db.crypto.key() is None:
        raise UsageError("this database holds `high` items and no encryption key is set: a "
                         "rebuild could not read them", "set MEMCLI_KEY or MEMCLI_KEY_FILE; "
                         "memcli key status")


# -- episodes --------------------------------------------------------------------------------
def _attributes(event: dict[str, Any], content: dict[str, Any]) -> dict[str, Any]:
    """An episode's attributes as ingest writes them."""
    out: dict[str, Any] = {"tags": json.loads(event["tags"]), "event_kind": event["kind"]}
    redactions = json.loads(event["redactions"])
    if redactions:
        out["redactions"] = redactions
    if content.get("truncated") and content.get("artifact_id"):
        out["artifact_id"] = content["artifact_id"]
    return out


def plan_episodes(db: Database) -> dict[str, Any]:
    """What the episodes stage would do: rows to rewrite, to bring back, to create."""
    present = rebuild_sql.episodes_by_event(db)
    added = rebuild_sql.added_ids(db)
    purged = rebuild_sql.purged_ids(db)
    plan: dict[str, Any] = {"expected": 0, "present": 0, "rewrite": [], "restore": [],
                            "new": [], "not_restored_purged": [], "unmatched": []}
    for event in list(rebuild_sql.events_in_order(db)):  # read whole: the stage writes after
        event_id = event["event_id"]
        content = json.loads(event["content"])
        chunks = ([] if event["sensitivity"] == "secret"
                  else chunk_text(event_text(event["kind"], content), max_tokens=CHUNK_TOKENS))
        rows = present.get(event_id, {})
        ids = added.get(event_id, [])
        plan["expected"] += len(chunks)
        for index, chunk in enumerate(chunks):
            if index in rows:
                plan["present"] += 1
                memory_id, text = rows[index]
                if text != chunk.text:
                    plan["rewrite"].append((memory_id, chunk, event["sensitivity"] == "high"))
                continue
            # History recorded one ADD per chunk, in chunk order: the lost row's id.
            old_id = ids[index] if len(ids) == len(chunks) else None
            if old_id is not None and old_id in purged:
                plan["not_restored_purged"].append(old_id)
                continue
            row = _episode_row(event, content, index, chunk)
            row["id"] = old_id
            (plan["restore"] if old_id is not None else plan["new"]).append(row)
        plan["unmatched"] += [mid for index, (mid, _) in rows.items() if index >= len(chunks)]
    # Rows of events that are gone are purge leftovers (doctor names them): left alone.
    taken = rebuild_sql.existing_ids(db, [r["id"] for r in plan["restore"]])
    for row in [r for r in plan["restore"] if r["id"] in taken]:
        # The id was given to another memory since (SQLite reuses the highest free id).
        plan["restore"].remove(row)
        row["reused_id"], row["id"] = row["id"], None
        plan["new"].append(row)
    return plan


def _episode_row(event: dict[str, Any], content: dict[str, Any], index: int,
                 chunk: Any) -> dict[str, Any]:
    return {
        "kind": "episode", "category": "event", "content": chunk.text,
        **{k: event[k] for k in ("tenant_id", "user_id", "agent_id", "session_id", "app_id",
                                 "run_id", "channel", "sensitivity", "actor_type", "actor_id",
                                 "event_id")},
        "event_seq": event["seq"], "chunk_index": index, "token_count": chunk.token_estimate,
        "importance": 0.5, "pinned": 0, "confidence": 1.0, "decay_rate": 0.01,
        "event_time": event["ts"], "created_at": event["recorded_at"],
        "updated_at": event["recorded_at"], "valid_from": event["ts"], "valid_to": None,
        "state": "active", "purge_at": None, "source_ids": [event["event_id"]],
        "attributes": _attributes(event, content),
    }


def _apply_episodes(db: Database, plan: dict[str, Any]) -> dict[str, Any]:
    for memory_id, chunk, high in plan["rewrite"]:
        rebuild_sql.rewrite_content(db, memory_id, chunk.text, chunk.token_estimate, high)
    history = rebuild_sql.history_of(db, [r["id"] for r in plan["restore"]])
    for row in plan["restore"]:
        replay_state(row, history.get(row["id"], []))
        rebuild_sql.insert_episode(db, row)
    new_ids = []
    for row in plan["new"]:
        memory_id = rebuild_sql.insert_episode(db, row)
        new_ids.append({"id": memory_id, "event_id": row["event_id"],
                        "chunk_index": row["chunk_index"],
                        "why": (f"id {row['reused_id']} now belongs to another memory"
                                if row.get("reused_id") else
                                "no ADD history row recorded this chunk's id")})
        memories.add_history(db, memory_id, "ADD", event_id=row["event_id"], new_ref=str(memory_id),
                        actor="rebuild", scope=row, meta={"rebuilt": True})
    return {"new": new_ids}


def _episodes_summary(plan: dict[str, Any]) -> dict[str, Any]:
    return {
        "expected": plan["expected"], "present": plan["present"],
        "rewritten": len(plan["rewrite"]),
        "restored": len(plan["restore"]),
        "restored_ids": [r["id"] for r in plan["restore"]][:100],
        "new": len(plan["new"]),
        "not_restored_purged": plan["not_restored_purged"][:100],
        "unmatched": plan["unmatched"][:100],
    }


# -- the run ---------------------------------------------------------------------------------
class _DryRun(Exception):
    """Raised to roll back the tables a dry run had to create to read its plan."""


def plan_rebuild(memory: MemoryHandle) -> dict[str, Any]:
    """The plan and counts; writes nothing. With a table missing (the memories table
    dropped, say), the plan is read inside a transaction that creates the missing tables
    and is rolled back."""
    db = memory.db
    _require_key(db)
    out: dict[str, Any] = {"dry_run": True, "derived_rows_now": rebuild_sql.count_rows(db)}
    missing = doctor_sql.missing_tables(db)
    try:
        with db.transaction() if missing else nullcontext():
            if missing:
                rebuild_sql.create_missing(db)
            episodes = plan_episodes(db)
            ledger = rebuild_ledger.plan_ledger(db)
            commands = rebuild_commands.plan_commands(db)
            out.update({
                **rebuild_sql.memory_counts(db),
                "episodes": _episodes_summary(episodes),
                "ledger": rebuild_ledger.summary(ledger),
                "commands": rebuild_commands.summary(commands),
                "tables_to_recreate": missing,
                "stages": _stages(memory),
                "skipped": _skipped(memory),
                "kept": KEPT,
                "cannot_rebuild": _cannot(db, episodes, ledger, commands),
            })
            if missing:
                raise _DryRun
    except _DryRun:
        pass
    return out


def _skipped(memory: MemoryHandle) -> list[dict[str, str]]:
    out = []
    if memory.sparse is None:
        out.append({"stage": "sparse", "why": "the SPLADE leg is off (leg_weights.sparse = 0): "
                    "sparse terms are left as they are"})
    if memory.embedder is None:
        out.append({"stage": "vectors", "why": "no embedder configured: vectors are left as "
                    "they are"})
    return out


def _stages(memory: MemoryHandle) -> list[str]:
    stages = ["tables", "episodes", "ledger", "relations", "lexical", "entities"]
    stages += ["sparse"] if memory.sparse is not None else []
    stages += ["vectors"] if memory.embedder is not None else []
    return stages


def _cannot(db: Database, episodes: dict[str, Any], ledger: dict[str, Any],
            commands: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    # A dry run's: what the ledger and commands stages are to write.
    coming = {m["id"] for m in (*ledger["memories"], *commands["memories"])}
    lost = [m for m in rebuild_sql.lost_derived(db) if m["id"] not in coming]
    if lost:
        out.append({"what": "memories no event wrote whose row is gone",
                    "ids": lost[:100], "count": len(lost),
                    "why": "their text was written by a model or a person and existed only "
                           "in that row; history keeps their id and kind"})
    if episodes["restore"] or episodes["new"]:
        out.append({"what": "state of lost episode rows not in events or history",
                    "count": len(episodes["restore"]) + len(episodes["new"]),
                    "why": LOST_ROW_DEFAULTS})
    if episodes["not_restored_purged"]:
        out.append({"what": "episodes purged on purpose", "ids":
                    episodes["not_restored_purged"][:100],
                    "why": "history records their purge: a rebuild never brings them back"})
    if episodes["unmatched"]:
        out.append({"what": "episode rows with no chunk of their event", "ids":
                    episodes["unmatched"][:100],
                    "why": "the event cuts into fewer chunks than when it was ingested "
                           "(chunking changed): kept as they are"})
    return out + rebuild_ledger.cannot(ledger) + rebuild_commands.cannot(commands)


def rebuild(memory: MemoryHandle, *, dry_run: bool = False,
            progress: Progress | None = None) -> dict[str, Any]:
    """Run every stage (or, `dry_run`, only say what they would do); returns the report."""
    refuse_bound(memory.db, "rebuild")
    if dry_run:
        return plan_rebuild(memory)
    db = memory.db
    _require_key(db)
    out: dict[str, Any] = {"dry_run": False, "stages": _stages(memory),
                           "skipped": _skipped(memory)}
    steps = len(out["stages"])
    report(progress, "rebuild", 0, steps)
    with db.transaction():
        out["tables_recreated"] = rebuild_sql.create_missing(db)
    report(progress, "rebuild", 1, steps)
    with db.transaction():
        plan = plan_episodes(db)  # again under the lock: an ingest may have run meanwhile
        applied = _apply_episodes(db, plan)
        out["sessions_refreshed"] = rebuild_sql.refresh_sessions(db)
        ledger = rebuild_ledger.plan_ledger(db)
        rebuild_ledger.apply_ledger(db, ledger)
        commands = rebuild_commands.plan_commands(db)
        rebuild_commands.apply_commands(db, commands)
    out["episodes"] = _episodes_summary(plan) | {"new_ids": applied["new"][:100]}
    out["ledger"] = rebuild_ledger.summary(ledger)
    out["commands"] = rebuild_commands.summary(commands)
    report(progress, "rebuild", 3, steps)
    with db.transaction():
        out["relations_restored"] = rebuild_sql.restore_edges(db, rebuild_sql.edges_in_history(db))
    report(progress, "rebuild", 4, steps)
    with db.transaction():
        rebuild_sql.drop_lexical(db)
        doctor_sql.rebuild_lexical(db)
    report(progress, "rebuild", 5, steps)
    out["entities"] = _entities(db, progress)
    report(progress, "rebuild", 6, steps)
    if memory.sparse is not None:
        out["sparse"] = _sparse(memory, progress)
    if memory.embedder is not None:
        out["vectors"] = _vectors(memory, progress)
    report(progress, "rebuild", steps, steps)
    out.update(rebuild_sql.memory_counts(db))
    out["derived_rows"] = rebuild_sql.count_rows(db)
    out["kept"] = KEPT
    out["cannot_rebuild"] = _cannot(db, plan, ledger, commands)
    return out


def _entities(db: Database, progress: Progress | None) -> dict[str, int]:
    """Extract outside the lock; inside it, also the memories written meanwhile."""
    texts = rebuild_sql.memory_texts(db)
    found = {}
    for part in slices(texts, 1024, progress, "entities"):
        found.update((mid, extract_entities(text)) for mid, text, s in part if s != "high")
    with db.transaction():
        newer = rebuild_sql.memory_texts(db, texts[-1][0] if texts else 0)
        found.update((mid, extract_entities(t)) for mid, t, s in newer if s != "high")
        rebuild_sql.reset_entity_links(db)
        now = utcnow()
        ids: dict[tuple[str, str, str], int] = {}
        aliases: set[tuple[str, int]] = set()
        for mid in sorted(found):
            memories.link_entities(db, mid, found[mid], now, ids=ids, aliases=aliases)
        dropped = rebuild_sql.drop_unused_entities(db)
    return {"memories": len(found), "entities": len(ids), "dropped": dropped}


def _sparse(memory: MemoryHandle, progress: Progress | None) -> dict[str, Any]:
    db, encoder = memory.db, memory.sparse
    assert encoder is not None
    with db.transaction():
        rebuild_sql.reset_sparse(db)
    texts = rebuild_sql.memory_texts(db)
    for part in slices(texts, ENCODE_SLICE, progress, "sparse terms"):
        encoded = encoder.encode_documents([t for _, t, _ in part])  # before the lock
        with db.transaction():
            sparse.record_vocab(db, encoder.vocab_hash)
            live = rebuild_sql.existing_ids(db, [mid for mid, _, _ in part])  # purged meanwhile?
            sparse.insert_postings(db, [(mid, terms) for (mid, _, _), terms
                                            in zip(part, encoded, strict=True) if mid in live])
    with db.transaction():
        rebuild_sql.recount_df(db)
    return {"memories": len(texts), "model": encoder.model_id}


def _vectors(memory: MemoryHandle, progress: Progress | None) -> dict[str, Any]:
    """Embed every memory; write only the vectors that differ from the stored ones (a
    rebuild of an intact file rewrites nothing), then make the bit index again."""
    db, embedder = memory.db, memory.embedder
    assert embedder is not None
    texts = rebuild_sql.memory_texts(db)
    written = 0
    for part in slices(texts, ENCODE_SLICE, progress, "embedding"):
        matrix = embedder.embed_documents([t for _, t, _ in part]).astype("float32")
        blobs = [(mid, v.tobytes()) for (mid, _, _), v in zip(part, matrix, strict=True)]
        with db.transaction():
            stored = rebuild_sql.stored_vectors(db, [mid for mid, _ in blobs])
            live = rebuild_sql.existing_ids(db, [mid for mid, _ in blobs])  # purged meanwhile?
            changed = [(mid, b) for mid, b in blobs if mid in live and stored.get(mid) != b]
            rebuild_sql.write_vectors(db, changed)
            written += len(changed)
    with db.transaction():
        orphans = rebuild_sql.delete_orphan_vectors(db)
        rebuild_sql.remake_vec_index(db, embedder.dimension)
    return {"memories": len(texts), "written": written, "model": embedder.model_id,
            "orphans_deleted": len(orphans)}
