"""Ingest: parse, validate, redact, normalise tool output, chunk, entities, embed, write.

Every record of a batch is validated first. Good records are written in one transaction, first
all in one savepoint; if a record fails, that is rolled back and the batch is written again
record by record, so a failing record never leaves half a write and the others still land. With
`strict`, one bad record rejects the whole batch before anything is written.

Several processes may ingest into one file at once. Embeddings and sparse terms are computed
before the write lock is taken, which is held only to write; whether a record repeats a stored
event is decided again under the lock, so a repeat another process stored meanwhile is
`skipped`, not an error. Waiting for the lock is bounded by the database's busy timeout.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic

from memcli import inputs
from memcli.chunking import chunk_text
from memcli.entities import extract_entities
from memcli.errors import DatabaseBusyError, ValidationError
from memcli.models import EventIn, IngestReport, RecordProblem, utcnow
from memcli.progress import report as report_progress
from memcli.progress import slices
from memcli.scrub import redact_event
from memcli.store import events as ev
from memcli.store import memories as mem
from memcli.store import sparse as sparse_sql
from memcli.store import vectors as vec
from memcli.store.sessions import check_session_user

if TYPE_CHECKING:
    from memcli.progress import Progress
    from memcli.providers.embedders import Embedder
    from memcli.providers.splade import SpladeEncoder
    from memcli.store.connection import Database

EXCERPT_BYTES = 64 * 1024
CHUNK_TOKENS = 512
# Texts per embed_documents call: a progress step, and a bound on the matrices held at once
# (the same size as `memcli embed`'s batches). Fixed, so vectors never depend on whether a
# terminal shows the bar.
ENCODE_SLICE = 256


def parse_records(text: str) -> list[tuple[int, Any]]:
    """(line or item number, parsed value or an Exception) for a JSON object, array or NDJSON."""
    stripped = text.strip()
    if not stripped:
        return []
    try:
        value = json.loads(stripped, parse_int=_parse_int)
    except (ValueError, RecursionError):  # not one JSON document: read it as NDJSON
        value = None
    else:
        if isinstance(value, list):
            return [(i, item) for i, item in enumerate(value, start=1)]
        return [(1, value)]
    out: list[tuple[int, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        out.append((number, _parse_line(line)))
    return out


def _parse_int(digits: str) -> int | inputs.HugeNumber:
    # Python refuses to convert integers of more than 4,300 digits; kept as a marker instead,
    # so only the record holding one is rejected, not the whole document.
    return int(digits) if len(digits) <= inputs.MAX_INT_DIGITS else inputs.HugeNumber(digits)


def _parse_line(line: str) -> Any:
    """One NDJSON line's value, or the ValueError saying why it is not one (per record)."""
    try:
        return json.loads(line, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        return ValueError(f"invalid JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:
        return ValueError(f"nested deeper than {inputs.MAX_DEPTH} levels")
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        return ValueError(f"invalid JSON: {exc}".splitlines()[0])


def _reason(exc: pydantic.ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "record"
    return f"{where}: {first['msg']}"


def event_text(kind: str, content: dict[str, Any]) -> str:
    """The text an episode remembers for an event."""
    for key in ("text", "output", "summary"):
        value = content.get(key)
        if isinstance(value, str) and value.strip():
            return value
    if kind == "tool_call" and "name" in content:
        args = json.dumps(content.get("args", content.get("arguments", {})), ensure_ascii=False)
        return f"{content['name']}({args})"
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


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


def _content_hash(rec: EventIn, content: dict[str, Any]) -> str:
    key = {
        "scope": [rec.tenant_id, rec.user_id, rec.agent_id, rec.session_id, rec.app_id,
                  rec.run_id, rec.channel],
        "actor": [rec.actor.type, rec.actor.id],
        "kind": rec.kind,
        "content": content,
        "ts": rec.ts,  # only set when the record gave one: then repeats at other times differ
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _normalise_tool_result(prep: Prepared, now: str) -> None:
    """Keep a 64 KB excerpt in the event and the full output in `artifacts`."""
    key = "output" if isinstance(prep.content.get("output"), str) else "text"
    full = prep.content.get(key)
    if not isinstance(full, str):
        return
    raw = full.encode("utf-8")
    if len(raw) <= EXCERPT_BYTES:
        return
    excerpt = raw[:EXCERPT_BYTES].decode("utf-8", errors="ignore")
    if "\n" in excerpt:
        excerpt = excerpt[: excerpt.rindex("\n")]
    # Per event (the same output can come back in two sessions, and purging one must not
    # take the other's artifact with it).
    artifact_id = "art_" + hashlib.sha256(prep.event_id.encode() + b"\0" + raw).hexdigest()[:24]
    prep.content = {
        **prep.content,
        key: excerpt,
        "truncated": True,
        "line_range": [1, excerpt.count("\n") + 1],
        "total_lines": full.count("\n") + 1,
        "artifact_id": artifact_id,
    }
    prep.artifact = {
        "artifact_id": artifact_id, "event_id": prep.event_id, "mime": "text/plain",
        "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest(), "body": raw,
        "created_at": now,
    }


def prepare(number: int, value: Any, defaults: dict[str, Any], now: str) -> Prepared:
    if isinstance(value, Exception):
        raise ValidationError(str(value))
    if not isinstance(value, dict):
        raise ValidationError("a record must be a JSON object")
    data = {**{k: v for k, v in defaults.items() if v is not None}, **value}
    reason = inputs.problem(data)  # before any step that recurses or encodes
    if reason is not None:
        raise ValidationError(reason)
    try:
        rec = EventIn.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ValidationError(_reason(exc)) from exc
    except (ValueError, TypeError, OverflowError) as exc:  # raised inside a validator
        raise ValidationError(f"invalid record: {exc}".splitlines()[0]) from exc
    event_id = rec.event_id or f"evt_{uuid.uuid4().hex}"
    rec, kinds = redact_event(rec)  # every text field, keys too (memcli.scrub)
    if rec.sensitivity == "secret":
        # Secret content is never stored: the event keeps only that something was said.
        content, kinds = {"text": "[REDACTED:secret]"}, ["secret"]
    else:
        content = rec.content
    # Redacted secrets all look alike, so their hash also takes the event id: two different
    # secrets said in one session are two events (the secret itself is never hashed: a hash of
    # a short secret could be brute-forced from the file).
    digest = _content_hash(rec, content if rec.sensitivity != "secret"
                           else {**content, "event_id": event_id})
    prep = Prepared(number, rec, event_id, content, digest, kinds)
    if rec.kind == "tool_result":
        _normalise_tool_result(prep, now)
    if rec.sensitivity != "secret":
        prep.chunks = chunk_text(event_text(rec.kind, prep.content), max_tokens=CHUNK_TOKENS)
        # found here, before the write lock (a `high` memory links none: plain-text names)
        prep.entities = [[] if rec.sensitivity == "high" else extract_entities(c.text)
                         for c in prep.chunks]
    return prep


def ingest(db: Database, values: list[tuple], *, embedder: Embedder | None,
           sparse: SpladeEncoder | None = None, defaults: dict[str, Any] | None = None,
           strict: bool = False, defer_embed: bool = False,
           progress: Progress | None = None) -> IngestReport:
    """`progress`: called as records are embedded and written (memcli/progress.py)."""
    report = IngestReport()
    now = utcnow()
    prepared: list[Prepared] = []
    for number, value, *source in values:
        try:
            prep = prepare(number, value, defaults or {}, now)
        except ValidationError as exc:
            ident = value.get("event_id") if isinstance(value, dict) else None
            if not isinstance(ident, str) or inputs.has_bad_text(ident):
                ident = None  # the report shows a usable event id or none
            report.rejected.append(RecordProblem(source=source[0] if source else None,
                                                 line=number, reason=str(exc), event_id=ident))
            continue
        prep.source = source[0] if source else None
        prepared.append(prep)
    if strict and report.rejected:
        return report

    fresh = _unseen(db, prepared, report)
    if not defer_embed:
        # the models run here, before any lock is taken
        _encode(fresh, embedder, sparse, progress)
    _write_batch(db, fresh, now, report, strict,
                 None if sparse is None or defer_embed else sparse.vocab_hash, progress)
    if defer_embed and (embedder is not None or sparse is not None):
        report.deferred_embedding = sum(len(p.chunks) for p in fresh)
    return report


def _unseen(db: Database, prepared: list[Prepared], report: IngestReport) -> list[Prepared]:
    """The records not repeating an earlier one of the batch or a stored event (same event id
    or content hash), so no embedding is paid for a repeat. Only a first pass: another process
    may store the same event meanwhile, and `_write_batch` decides again under the lock."""
    fresh: list[Prepared] = []
    seen: dict[str, str] = {}  # event id or content hash -> the event id kept for it
    stored = ev.existing_events(db, [(p.event_id, p.content_hash) for p in prepared])
    for prep, known in zip(prepared, stored, strict=True):
        dup = known or seen.get(prep.event_id) or seen.get(prep.content_hash)
        if dup:
            report.skipped.append(dup)  # the stored (or kept) event this record repeats
            continue
        seen[prep.event_id] = seen[prep.content_hash] = prep.event_id
        fresh.append(prep)
    return fresh


def _encode(fresh: list[Prepared], embedder: Embedder | None,
            sparse: SpladeEncoder | None, progress: Progress | None = None) -> None:
    """Dense vectors and sparse terms for every chunk, outside any transaction: embedding
    takes seconds under load, and other writers must not wait for it."""
    texts = [c.text for p in fresh for c in p.chunks]
    if not texts:
        return
    if embedder is not None:
        matrix = [row for part in slices(texts, ENCODE_SLICE, progress, "embedding")
                  for row in embedder.embed_documents(part).astype("float32")]
        rows = iter(matrix)
        for prep in fresh:
            prep.vectors = [next(rows).tobytes() for _ in prep.chunks]
    if sparse is not None:
        encoded = iter([terms for part in slices(texts, ENCODE_SLICE, progress, "sparse terms")
                        for terms in sparse.encode_documents(part)])
        for prep in fresh:
            prep.sparse = [next(encoded) for _ in prep.chunks]


def _write_batch(db: Database, fresh: list[Prepared], now: str, report: IngestReport,
                 strict: bool, vocab_hash: str | None,
                 progress: Progress | None = None) -> None:
    """Write the batch in one short transaction (waiting for the lock up to the database's
    busy timeout). Duplicates are decided here, under the lock: a record whose event id or
    content hash another process stored since `_unseen` is `skipped`, its embeddings unused."""
    if not fresh:
        return  # every record repeats a stored event: no need for the lock
    if any(p.record.sensitivity == "high" for p in fresh):
        db.crypto.key(create=True)  # first use creates the key file; else exit 1 before writing
    threads: dict[str, list[tuple[str, int | None, str]]] = {}
    with db.transaction():
        if vocab_hash is not None and any(p.sparse for p in fresh):
            sparse_sql.record_vocab(db, vocab_hash)
        todo = []
        stored = ev.existing_events(db, [(p.event_id, p.content_hash) for p in fresh])
        for prep, dup in zip(fresh, stored, strict=True):
            if dup:
                report.skipped.append(dup)
            else:
                todo.append(prep)
        # Fast path: the whole batch in one savepoint. If any record fails, roll that back and
        # write record by record, each in its own savepoint, so only the failing one is lost.
        marks = report.marks()
        try:
            with db.savepoint():
                cache = _BatchCache()
                # the batch's stored entities in one lookup, not one per memory
                cache.entities.update(mem.lookup_entities(db, [
                    (p.record.tenant_id, e.kind, e.norm)
                    for p in todo for found in p.entities for e in found]))
                for done, prep in enumerate(todo, start=1):
                    _write(db, prep, now, report, threads, cache)
                    if done % 64 == 0 or done == len(todo):
                        report_progress(progress, "writing", done, len(todo))
                _flush(db, cache)
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
            cache = _BatchCache()
            for prep in todo:
                record_marks = report.marks()
                record_threads = {k: len(v) for k, v in threads.items()}
                try:
                    with db.savepoint():
                        _write(db, prep, now, report, threads, cache)
                        _flush(db, cache)
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
                    cache = _BatchCache()  # ids it learnt inside the rolled-back savepoint
                    report.rejected.append(
                        RecordProblem(source=prep.source, line=prep.line,
                                      reason=f"write failed: {exc}", event_id=prep.event_id)
                    )
        for key, changes in threads.items():
            mem.bump_revision(db, key, changes)


class _BatchCache:
    """What one batch's writes learn and reuse: each session's latest turn (the next turn's
    context key), its owner, and entity ids; and the rows no later write of the batch reads
    (history, session spans, vectors), written by `_flush` in a few multi-row statements
    inside the same savepoint. Dropped whenever a savepoint it saw is rolled back."""

    def __init__(self) -> None:
        self.previous: dict[tuple[str, str | None], str] = {}
        self.entities: dict[tuple[str, str, str], int] = {}  # (tenant, kind, norm)
        self.aliases: set[tuple[str, int]] = set()
        self.owners: dict[tuple[str, str], str | None] = {}  # (tenant, session) -> its user
        self.history: list[tuple] = []
        # (tenant, session) -> [user, first ts, last ts, events], in first-seen order
        self.sessions: dict[tuple[str, str], list[Any]] = {}
        self.vectors: list[tuple[int, bytes]] = []


def _flush(db: Database, cache: _BatchCache) -> None:
    """Write what the batch's records left pending (see _BatchCache): on a server each
    statement is a round trip, and these were one or more per record."""
    if cache.sessions:
        ev.touch_sessions(db, [(*key, *span) for key, span in cache.sessions.items()])
        cache.sessions.clear()
    if cache.history:
        mem.add_history_rows(db, cache.history)
        cache.history.clear()
    if cache.vectors:
        vec.insert_vectors(db, cache.vectors)
        cache.vectors.clear()


def _write(db: Database, prep: Prepared, now: str, report: IngestReport,
           threads: dict[str, list[tuple[str, int | None, str]]], cache: _BatchCache) -> None:
    rec = prep.record
    ts = rec.ts or now
    check_session_user(db, rec.tenant_id, rec.session_id, rec.user_id,  # never mix users
                       cache.owners)
    seq = ev.insert_event(db, {
        "event_id": prep.event_id, "ts": ts, "recorded_at": now, "tenant_id": rec.tenant_id,
        "user_id": rec.user_id, "agent_id": rec.agent_id, "session_id": rec.session_id,
        "app_id": rec.app_id, "run_id": rec.run_id, "channel": rec.channel,
        "actor_type": rec.actor.type, "actor_id": rec.actor.id, "kind": rec.kind,
        "sensitivity": rec.sensitivity, "tags": rec.tags, "content": prep.content,
        "refs": rec.refs, "content_hash": prep.content_hash, "redactions": prep.redactions,
    })
    if prep.artifact:
        ev.insert_artifact(db, prep.artifact)
        report.artifacts.append(prep.artifact["artifact_id"])
    if rec.session_id:
        span = cache.sessions.get((rec.tenant_id, rec.session_id))
        if span is None:
            cache.sessions[(rec.tenant_id, rec.session_id)] = [rec.user_id, ts, ts, 1]
        else:  # the owner check above made the user the same
            span[1], span[2], span[3] = min(span[1], ts), max(span[2], ts), span[3] + 1
    scope = {"tenant_id": rec.tenant_id, "user_id": rec.user_id, "session_id": rec.session_id}
    key = mem.thread_key(rec.tenant_id, rec.user_id, rec.session_id)
    attributes: dict[str, Any] = {"tags": rec.tags, "event_kind": rec.kind}
    if prep.redactions:
        attributes["redactions"] = prep.redactions
    if prep.artifact:
        attributes["artifact_id"] = prep.artifact["artifact_id"]
    session = (rec.tenant_id, rec.session_id)
    context = cache.previous.get(session)
    if context is None:
        context = mem.previous_turn(db, rec.tenant_id, rec.session_id, rec.user_id)
    vectors: list[tuple[int, bytes]] = []
    postings: list[tuple[int, dict[int, float]]] = []
    for index, chunk in enumerate(prep.chunks):
        memory_id = mem.insert_memory(db, {
            "kind": "episode", "category": rec.category or "event", "content": chunk.text,
            "tenant_id": rec.tenant_id, "user_id": rec.user_id, "agent_id": rec.agent_id,
            "session_id": rec.session_id, "app_id": rec.app_id, "run_id": rec.run_id,
            "channel": rec.channel, "sensitivity": rec.sensitivity,
            "actor_type": rec.actor.type, "actor_id": rec.actor.id,
            "event_id": prep.event_id, "event_seq": seq, "chunk_index": index,
            "token_count": chunk.token_estimate, "importance": rec.importance,
            "pinned": int(rec.pinned), "event_time": ts, "created_at": now, "updated_at": now,
            "valid_from": ts, "source_ids": [prep.event_id], "attributes": attributes,
        }, context=context)
        high = rec.sensitivity == "high"  # kept out of plain-text indexes (store/crypto.py)
        context = "" if high else chunk.text
        if not high:
            mem.link_entities(db, memory_id, prep.entities[index], now,
                              ids=cache.entities, aliases=cache.aliases,
                              tenant_id=rec.tenant_id)
        cache.history.append(mem.history_row(memory_id, "ADD", event_id=prep.event_id,
                                             new_ref=str(memory_id), scope=scope))
        threads.setdefault(key, []).append(("created", memory_id, chunk.text))
        report.memory_ids.append(memory_id)
        if prep.vectors:
            vectors.append((memory_id, prep.vectors[index]))
        if prep.sparse:
            postings.append((memory_id, prep.sparse[index]))
    if rec.session_id is not None and prep.chunks:
        cache.previous[session] = context
    if postings:
        sparse_sql.insert_postings(db, postings)
    if vectors:
        cache.vectors.extend(vectors)  # written by _flush
        report.embedded += len(vectors)
    report.created.append(prep.event_id)
    if prep.redactions:
        report.redacted.append({"event_id": prep.event_id, "kinds": prep.redactions})
