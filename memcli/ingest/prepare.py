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
from typing import TYPE_CHECKING, Any

import pydantic

from memcli.core import inputs
from memcli.core.chunking import chunk_text
from memcli.core.progress import slices
from memcli.core.records import EventIn, IngestReport, RecordProblem, utcnow
from memcli.entities.extraction import extract_entities
from memcli.errors import NotFoundError, UsageError, ValidationError, validation_line
from memcli.ingest.background import session_starts
from memcli.ingest.write import Prepared, write_batch
from memcli.ledger.from_events import episode_text
from memcli.ledger.from_events import parse as parse_ledger
from memcli.ledger.from_events import prepare as prepare_ledger
from memcli.policy.redaction import redact_event
from memcli.providers.passes import encode_both
from memcli.store import events

if TYPE_CHECKING:
    from collections.abc import Callable

    from memcli.core.progress import Progress
    from memcli.ingest.background import Queue
    from memcli.providers.embedders import Embedder
    from memcli.providers.splade import SpladeEncoder
    from memcli.store.connection import Database
    from memcli.store.handle import MemoryHandle

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


def event_text(kind: str, content: dict[str, Any]) -> str:
    """The text an episode remembers for an event."""
    for key in ("text", "excerpt_text", "output", "summary"):
        value = content.get(key)
        if isinstance(value, str) and value.strip():
            return value
    ledger_text = episode_text(kind, content)  # a decision or task without `text`
    if ledger_text:
        return ledger_text
    if kind == "tool_call" and "name" in content:
        args = json.dumps(content.get("args", content.get("arguments", {})), ensure_ascii=False)
        return f"{content['name']}({args})"
    return json.dumps(content, ensure_ascii=False, sort_keys=True)




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


# The Agent Memory System PRD, 7.4: a tool result's excerpt is `content.excerpt_text`; `text`
# and `output` are accepted on input and stored under that one name.
EXCERPT_KEYS = ("excerpt_text", "output", "text")


def _is_file_read(content: dict[str, Any]) -> bool:
    """A file read (`fs.read_file` and the like, or any result naming a `path`): the Agent Memory
    System PRD (7.4) wants its `line_range` always, whatever its size."""
    tool = content.get("tool", content.get("name"))
    return isinstance(content.get("path"), str) or (
        isinstance(tool, str) and tool.rsplit(".", 1)[-1] == "read_file")


def _line_count(text: str) -> int:
    return max(1, text.count("\n") + (0 if text.endswith("\n") else 1))


def _normalise_tool_result(prep: Prepared, now: str) -> None:
    """Keep the output in `excerpt_text`, at most 64 KB of it, and the full output in
    `artifacts` when it is longer (`truncated`, `artifact_id`, `total_lines`). `line_range` is
    the excerpt's lines: always for a file read (from the caller's first line, if it gave a
    range), and for every cut output."""
    key = next((k for k in EXCERPT_KEYS if isinstance(prep.content.get(k), str)), None)
    if key is None:
        return
    full = prep.content[key]
    content = {k: v for k, v in prep.content.items() if k != key}
    raw = full.encode("utf-8")
    excerpt, truncated = full, len(raw) > EXCERPT_BYTES
    if truncated:
        excerpt = raw[:EXCERPT_BYTES].decode("utf-8", errors="ignore")
        if "\n" in excerpt:
            excerpt = excerpt[: excerpt.rindex("\n")]
    content.update(excerpt_text=excerpt, truncated=truncated)
    if truncated or _is_file_read(content):
        given = content.get("line_range")
        first = given[0] if (isinstance(given, list) and len(given) == 2
                             and isinstance(given[0], int) and given[0] >= 1) else 1
        content["line_range"] = [first, first + _line_count(excerpt) - 1]
    if not truncated:
        prep.content = content
        return
    # Per event (the same output can come back in two sessions, and purging one must not
    # take the other's artifact with it).
    artifact_id = "art_" + hashlib.sha256(prep.event_id.encode() + b"\0" + raw).hexdigest()[:24]
    prep.content = {**content, "total_lines": _line_count(full), "artifact_id": artifact_id}
    prep.artifact = {
        "artifact_id": artifact_id, "event_id": prep.event_id, "mime": "text/plain",
        "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest(), "body": raw,
        "created_at": now,
    }


def prepare(number: int, value: Any, defaults: dict[str, Any], now: str,
            check_category: Callable[[str | None], None] | None = None) -> Prepared:
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
        raise ValidationError(validation_line(exc, where="record")) from exc
    except (ValueError, TypeError, OverflowError) as exc:  # raised inside a validator
        raise ValidationError(f"invalid record: {exc}".splitlines()[0]) from exc
    event_id = rec.event_id or f"evt_{uuid.uuid4().hex}"
    rec, kinds = redact_event(rec)  # every text field, keys too (memcli.policy.redaction)
    if check_category is not None:  # after redaction: the refusal quotes the category
        check_category(rec.category)
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
    prep.ledger = parse_ledger(rec, event_id, prep.content)
    if rec.sensitivity != "secret":
        prep.chunks = chunk_text(event_text(rec.kind, prep.content), max_tokens=CHUNK_TOKENS)
        # found here, before the write lock (a `high` memory links none: plain-text names)
        prep.entities = [[] if rec.sensitivity == "high" else extract_entities(c.text)
                         for c in prep.chunks]
    return prep


def ingest(db: Database, values: list[tuple], *, embedder: Embedder | None,
           sparse: SpladeEncoder | None = None, defaults: dict[str, Any] | None = None,
           strict: bool = False, defer_embed: bool = False,
           progress: Progress | None = None, memory: MemoryHandle | None = None,
           check_category: Callable[[str | None], None] | None = None,
           queue: Queue | None = None) -> IngestReport:
    """`progress`: called as records are embedded and written (memcli/core/progress.py).
    `memory`: the one writing, for the ledger rows of decision and task events.
    `check_category`: refuses a record's category (ValidationError), e.g.
    `Categories.check_write`. `queue`: a daemon's indexer (memcli.ingest.background): the
    vectors and sparse terms are left to it, and it is woken once the records are written."""
    report = IngestReport()
    now = utcnow()
    prepared: list[Prepared] = []
    order: list[Prepared | RecordProblem] = []  # every input record, in input order
    for number, value, *source in values:
        try:
            prep = prepare(number, value, defaults or {}, now, check_category)
        except ValidationError as exc:
            ident = value.get("event_id") if isinstance(value, dict) else None
            if not isinstance(ident, str) or inputs.has_bad_text(ident):
                ident = None  # the report shows a usable event id or none
            problem = RecordProblem(source=source[0] if source else None, line=number,
                                    reason=str(exc), event_id=ident)
            report.rejected.append(problem)
            order.append(problem)
            continue
        prep.source = source[0] if source else None
        prepared.append(prep)
        order.append(prep)
    if strict and report.rejected:
        report.records.extend(_per_record(order, report))
        return report

    fresh = _unseen(db, prepared, report)
    fresh = _prepare_ledger(memory, fresh, report)
    if strict and report.rejected:
        report.records.extend(_per_record(order, report))
        return report
    starts: list[tuple[str, str]] = []
    if queue is not None:
        defer_embed = True
        starts = session_starts(db, fresh)
    if not defer_embed:
        # the models run here, before any lock is taken
        _encode(fresh, embedder, sparse, progress)
    write_batch(db, fresh, now, report, strict,
                None if sparse is None or defer_embed else sparse.vocab_hash, progress)
    if queue is not None and report.created:
        queue.notify(starts)
    deferred = defer_embed and (embedder is not None or sparse is not None)
    if deferred:
        report.deferred_embedding = sum(len(p.chunks) for p in fresh)
    created = set(report.created)
    report.ledger = [p.ledger.written for p in fresh
                     if p.ledger is not None and p.event_id in created and p.ledger.written]
    report.records.extend(_per_record(order, report, deferred))
    return report


def _prepare_ledger(memory: MemoryHandle | None, fresh: list[Prepared],
                    report: IngestReport) -> list[Prepared]:
    """Decision and task events checked against the stored ledger and encoded, before the
    write lock; one that cannot be written (an unknown task, a decision superseded already)
    is rejected here."""
    kept = []
    for prep in fresh:
        if prep.ledger is not None:
            try:
                if memory is None:
                    raise ValidationError("decision and task events are written by a Memory")
                prepare_ledger(memory, prep.ledger)
            except (UsageError, NotFoundError) as exc:
                report.rejected.append(RecordProblem(source=prep.source, line=prep.line,
                                                     reason=str(exc), event_id=prep.event_id))
                continue
        kept.append(prep)
    return kept


def _per_record(order: list[Prepared | RecordProblem], report: IngestReport,
                deferred: bool = False) -> list[IngestReport]:
    """The report of each input record, in input order (the batch's report, split)."""
    chunks = {p.event_id: len(p.chunks) for p in order
              if isinstance(p, Prepared) and p.duplicate_of is None}
    ids = iter(report.memory_ids)  # written record by record, in `created` order
    written = {eid: [next(ids) for _ in range(chunks[eid])] for eid in report.created}
    problems = {(r.source, r.line): r for r in report.rejected}
    out: list[IngestReport] = []
    for entry in order:
        if isinstance(entry, RecordProblem):
            out.append(IngestReport(rejected=[entry]))
        elif entry.duplicate_of is not None:
            out.append(IngestReport(skipped=[entry.duplicate_of]))
        elif entry.event_id in written:
            eid = entry.event_id
            out.append(IngestReport(
                created=[eid], memory_ids=written[eid],
                redacted=[r for r in report.redacted if r["event_id"] == eid],
                artifacts=[entry.artifact["artifact_id"]] if entry.artifact else [],
                ledger=[entry.ledger.written]
                if entry.ledger is not None and entry.ledger.written else [],  # its ledger row
                embedded=len(entry.vectors),
                deferred_embedding=len(entry.chunks) if deferred else 0))
        elif (entry.source, entry.line) in problems:  # its write failed
            out.append(IngestReport(rejected=[problems[(entry.source, entry.line)]]))
        else:  # not written (a strict batch with a bad record)
            out.append(IngestReport())
    return out


def _unseen(db: Database, prepared: list[Prepared], report: IngestReport) -> list[Prepared]:
    """The records not repeating an earlier one of the batch or a stored event (same event id
    or content hash), so no embedding is paid for a repeat. Only a first pass: another process
    may store the same event meanwhile, and `write_batch` decides again under the lock."""
    fresh: list[Prepared] = []
    seen: dict[str, str] = {}  # event id or content hash -> the event id kept for it
    stored = events.existing_events(db, [(p.event_id, p.content_hash) for p in prepared])
    for prep, known in zip(prepared, stored, strict=True):
        dup = known or seen.get(prep.event_id) or seen.get(prep.content_hash)
        if dup:
            report.skipped.append(dup)  # the stored (or kept) event this record repeats
            prep.duplicate_of = dup
            continue
        seen[prep.event_id] = seen[prep.content_hash] = prep.event_id
        fresh.append(prep)
    return fresh


def _encode(fresh: list[Prepared], embedder: Embedder | None,
            sparse: SpladeEncoder | None, progress: Progress | None = None) -> None:
    """Dense vectors and sparse terms for every chunk, outside any transaction: embedding
    takes seconds under load, and other writers must not wait for it. Each slice's sparse pass
    runs beside its dense pass (memcli/providers/passes.py)."""

    texts = [c.text for p in fresh for c in p.chunks]
    if not texts:
        return
    matrix, encoded = [], []
    stage = "embedding" if embedder is not None else "sparse terms"
    for part in slices(texts, ENCODE_SLICE, progress, stage):
        vectors, terms = encode_both(embedder, part, sparse, part)
        matrix += [] if vectors is None else list(vectors)
        encoded += terms
    if embedder is not None:
        rows = iter(matrix)
        for prep in fresh:
            prep.vectors = [next(rows).tobytes() for _ in prep.chunks]
    if sparse is not None:
        terms_of = iter(encoded)
        for prep in fresh:
            prep.sparse = [next(terms_of) for _ in prep.chunks]
