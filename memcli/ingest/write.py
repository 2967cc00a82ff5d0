"""Ingest's write: a batch of prepared records (memcli.ingest) in one short transaction.

The writer lock is held from the transaction's start to its commit, and on PostgreSQL it is
one lock for the whole database (docs/design/postgresql.md), so what runs under it bounds
every writer's throughput. Everything a record needs that does not depend on the database
(validation, redaction, chunks, entities, embeddings, sparse terms) was computed before; under
the lock a batch makes a fixed number of statements, not a number per record: one multi-row
INSERT each for its events, memories, new entities, aliases, entity links, history rows,
session spans, vectors and sparse terms, and one lookup each for repeats, session owners and
previous turns (bench/results/ingest-profile.md; tests/pg/test_ingest_statements.py holds
the count). Ids come out as writing the records one by one would give them, on both engines.
A decision or task event adds its ledger row's writes (memcli.ledger.from_events), record by record.

If any record fails, the batch's savepoint is rolled back and the records are written again
one at a time (the same code with a batch of one), each in its own savepoint, so a failing
record never leaves half a write and the others still land.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memcli.core.progress import report as report_progress
from memcli.core.records import RecordProblem, write_time
from memcli.errors import DatabaseBusyError
from memcli.ledger.from_events import store as store_ledger
from memcli.store import events, memories
from memcli.store import sparse as sparse_sql
from memcli.store import vectors as vec
from memcli.store.sessions import check_session_user, load_owners

if TYPE_CHECKING:
    from memcli.core.progress import Progress
    from memcli.core.records import EventIn, IngestReport
    from memcli.ledger.from_events import LedgerEvent
    from memcli.store.connection import Database

Threads = dict[str, list[tuple[str, int | None, str]]]


@dataclass
class Prepared:
    line: int
    record: EventIn
    event_id: str
    content: dict[str, Any]
    content_hash: str
    redactions: list[str]
    artifact: dict[str, Any] | None = None
    chunks: list[Any] = field(default_factory=list)
    entities: list[list[Any]] = field(default_factory=list)  # per chunk (none when `high`)
    vectors: list[bytes] = field(default_factory=list)
    sparse: list[dict[int, float]] = field(default_factory=list)
    source: str | None = None
    ledger: LedgerEvent | None = None  # a decision or task event's row (memcli.ledger.from_events)
    duplicate_of: str | None = None  # the stored (or kept) event this record repeats



def write_batch(db: Database, fresh: list[Prepared], now: str, report: IngestReport,
                strict: bool, vocab_hash: str | None,
                progress: Progress | None = None) -> None:
    """Write the batch in one short transaction (waiting for the lock up to the database's
    busy timeout). Duplicates are decided here, under the lock: a record whose event id or
    content hash another process stored since ingest's first look is `skipped`, its
    embeddings unused."""
    if not fresh:
        return  # every record repeats a stored event: no need for the lock
    if any(p.record.sensitivity == "high" for p in fresh):
        db.crypto.key(create=True)  # first use creates the key file; else exit 1 before writing
    threads: Threads = {}
    high: set[int] = set()  # `high` memories among them (their change-log rows are sealed)
    with db.transaction():
        if vocab_hash is not None and any(p.sparse for p in fresh):
            sparse_sql.record_vocab(db, vocab_hash)
        todo = []
        stored = events.existing_events(db, [(p.event_id, p.content_hash) for p in fresh])
        for prep, dup in zip(fresh, stored, strict=True):
            if dup:
                report.skipped.append(dup)
                prep.duplicate_of = dup
            else:
                todo.append(prep)
        # Fast path: the whole batch in one savepoint. If any record fails, roll that back and
        # write record by record, each in its own savepoint, so only the failing one is lost.
        marks = report.marks()
        try:
            with db.savepoint():
                _write_records(db, todo, now, report, threads, high, _BatchCache())
                report_progress(progress, "writing", len(todo), len(todo))
        except DatabaseBusyError:
            raise  # not the record's fault: the whole batch is retried or exits 75
        except Exception as exc:
            failure = db.backend.environment_error(db, exc)
            if failure is not None:  # read-only file, full disk: no record would fare better
                raise failure from exc
            if strict:
                raise
            report.reset_to(marks)
            threads.clear()
            high.clear()  # (SQLite gives a rolled-back row's id to the next row)
            _one_by_one(db, todo, now, report, threads, high, progress)
        if threads:
            memories.bump_revisions(db, threads, high)


def _one_by_one(db: Database, todo: list[Prepared], now: str, report: IngestReport,
                threads: Threads, high: set[int], progress: Progress | None) -> None:
    """Each record in its own savepoint; a failing one is rejected, the others land."""
    cache = _BatchCache()
    for done, prep in enumerate(todo, start=1):
        record_marks = report.marks()
        record_threads = {k: len(v) for k, v in threads.items()}
        record_high = set(high)
        try:
            with db.savepoint():
                _write_records(db, [prep], now, report, threads, high, cache)
        except DatabaseBusyError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported per record, batch goes on
            failure = db.backend.environment_error(db, exc)
            if failure is not None:  # read-only file, full disk: not this record's fault
                raise failure from exc
            report.reset_to(record_marks)
            for key in list(threads):
                del threads[key][record_threads.get(key, 0):]
                if not threads[key]:
                    del threads[key]
            high.intersection_update(record_high)
            cache = _BatchCache()  # what it learnt inside the rolled-back savepoint
            report.rejected.append(
                RecordProblem(source=prep.source, line=prep.line,
                              reason=f"write failed: {exc}", event_id=prep.event_id)
            )
        if done % 64 == 0 or done == len(todo):
            report_progress(progress, "writing", done, len(todo))


class _BatchCache:
    """What the writes of one transaction learn and reuse: each session's latest turn (the
    next turn's context key), its owner, and entity ids and aliases. Dropped whenever a
    savepoint that filled it is rolled back."""

    def __init__(self) -> None:
        self.previous: dict[tuple[str, str], str] = {}  # (tenant, session) -> latest turn
        self.entities: dict[tuple[str, str, str], int] = {}  # (tenant, kind, norm)
        self.aliases: set[tuple[str, int]] = set()
        self.owners: dict[tuple[str, str], object] = {}  # (tenant, session) -> its user


def _write_records(db: Database, preps: list[Prepared], now: str, report: IngestReport,
                   threads: Threads, high: set[int], cache: _BatchCache) -> None:
    """Write these records (events, artifacts, memories, links, history, sessions, vectors,
    sparse terms), each kind of row in one statement per batch where the store allows. Every
    row is stamped `now`, the events' recorded_at, so a rebuild derives the same times."""
    if not preps:
        return
    with write_time(now):
        _write_batch(db, preps, now, report, threads, high, cache)


def _write_batch(db: Database, preps: list[Prepared], now: str, report: IngestReport,
                 threads: Threads, high: set[int], cache: _BatchCache) -> None:
    sessions = [(p.record.tenant_id, p.record.session_id) for p in preps
                if p.record.session_id is not None]
    load_owners(db, sessions, cache.owners)
    for prep in preps:  # never mix users (a record after the first of its session included)
        check_session_user(db, prep.record.tenant_id, prep.record.session_id,
                           prep.record.user_id, cache.owners)
    seqs = events.insert_events(db, [_event_row(prep, now) for prep in preps])
    for prep in preps:
        if prep.artifact:
            events.insert_artifact(db, prep.artifact)
            report.artifacts.append(prep.artifact["artifact_id"])
    cache.previous.update(memories.previous_turns(db, [
        (p.record.tenant_id, p.record.session_id, p.record.user_id) for p in preps
        if p.record.session_id is not None and p.chunks
        and (p.record.tenant_id, p.record.session_id) not in cache.previous]))
    # Every memory's row and context key, in the order one INSERT each would write them.
    items: list[tuple[dict[str, Any], str]] = []
    for prep, seq in zip(preps, seqs, strict=True):
        items.extend(_memory_rows(prep, seq, now, cache))
    ids = iter(memories.insert_memories(db, items))
    links: list[tuple[int, str, list]] = []
    history: list[tuple] = []
    vectors: list[tuple[int, bytes]] = []
    postings: list[tuple[int, dict[int, float]]] = []
    spans: dict[tuple[str, str], list[Any]] = {}
    for prep in preps:
        rec = prep.record
        ts = rec.ts or now
        if rec.session_id:
            span = spans.get((rec.tenant_id, rec.session_id))
            if span is None:
                spans[(rec.tenant_id, rec.session_id)] = [rec.user_id, ts, ts, 1]
            else:  # the owner check above made the user the same
                span[1], span[2], span[3] = min(span[1], ts), max(span[2], ts), span[3] + 1
        scope = {"tenant_id": rec.tenant_id, "user_id": rec.user_id,
                 "session_id": rec.session_id}
        key = memories.thread_key(rec.tenant_id, rec.user_id, rec.session_id)
        for index, chunk in enumerate(prep.chunks):
            memory_id = next(ids)
            if rec.sensitivity == "high":  # kept out of plain-text indexes (store/sealing.py)
                high.add(memory_id)
            else:
                links.append((memory_id, rec.tenant_id, prep.entities[index]))
            history.append(memories.history_row(memory_id, "ADD", event_id=prep.event_id,
                                           new_ref=str(memory_id), scope=scope))
            threads.setdefault(key, []).append(("created", memory_id, chunk.text))
            report.memory_ids.append(memory_id)
            if prep.vectors:
                vectors.append((memory_id, prep.vectors[index]))
            if prep.sparse:
                postings.append((memory_id, prep.sparse[index]))
        report.embedded += len(prep.vectors)
        report.created.append(prep.event_id)
        if prep.redactions:
            report.redacted.append({"event_id": prep.event_id, "kinds": prep.redactions})
    memories.link_entities_many(db, [link for link in links if link[2]], now,
                           ids=cache.entities, aliases=cache.aliases)
    if spans:
        events.touch_sessions(db, [(*key, *span) for key, span in spans.items()])
    memories.add_history_rows(db, history)
    if vectors:
        vec.insert_vectors(db, vectors)
    if postings:
        sparse_sql.insert_postings(db, postings)
    for prep in preps:  # a decision or task event's ledger row, in the event's savepoint
        if prep.ledger is not None:
            store_ledger(prep.ledger)


def _event_row(prep: Prepared, now: str) -> dict[str, Any]:
    rec = prep.record
    return {
        "event_id": prep.event_id, "ts": rec.ts or now, "recorded_at": now,
        "tenant_id": rec.tenant_id, "user_id": rec.user_id, "agent_id": rec.agent_id,
        "session_id": rec.session_id, "app_id": rec.app_id, "run_id": rec.run_id,
        "channel": rec.channel, "actor_type": rec.actor.type, "actor_id": rec.actor.id,
        "kind": rec.kind, "sensitivity": rec.sensitivity, "tags": rec.tags,
        "content": prep.content, "refs": rec.refs, "content_hash": prep.content_hash,
        "redactions": prep.redactions,
    }


def _memory_rows(prep: Prepared, seq: int, now: str, cache: _BatchCache
                 ) -> list[tuple[dict[str, Any], str]]:
    """A record's episode rows (one per chunk) with their context keys: each chunk's is the
    turn before it, the session's latest stored or batched one for the first (a `high` chunk
    is nobody's context: the next one gets an empty key)."""
    rec = prep.record
    ts = rec.ts or now
    attributes: dict[str, Any] = {"tags": rec.tags, "event_kind": rec.kind}
    if prep.redactions:
        attributes["redactions"] = prep.redactions
    if prep.artifact:
        attributes["artifact_id"] = prep.artifact["artifact_id"]
    session = (rec.tenant_id, rec.session_id or "")
    context = cache.previous.get(session, "") if rec.session_id is not None else ""
    rows = []
    for index, chunk in enumerate(prep.chunks):
        rows.append(({
            "kind": "episode", "category": rec.category or "event", "content": chunk.text,
            "tenant_id": rec.tenant_id, "user_id": rec.user_id, "agent_id": rec.agent_id,
            "session_id": rec.session_id, "app_id": rec.app_id, "run_id": rec.run_id,
            "channel": rec.channel, "sensitivity": rec.sensitivity,
            "actor_type": rec.actor.type, "actor_id": rec.actor.id,
            "event_id": prep.event_id, "event_seq": seq, "chunk_index": index,
            "token_count": chunk.token_estimate, "importance": rec.importance,
            "pinned": int(rec.pinned), "event_time": ts, "created_at": now, "updated_at": now,
            "valid_from": ts, "source_ids": [prep.event_id], "attributes": attributes,
        }, context))
        context = "" if rec.sensitivity == "high" else chunk.text
    if rec.session_id is not None and prep.chunks:
        cache.previous[session] = context
    return rows
