"""`memcli export`: a scope of a memory as JSONL (the format: memcli/portable/file_format.py).

Every table of memcli/schema.sql, and what an export does with it:

- events: exported (ground truth), in event order; `seq` is not (a rowid; the file order is
  the order, and an import appends in that order).
- artifacts: exported (full tool outputs; bodies as UTF-8 text, base64 when they are not text,
  or the ciphertext of a `high` event's output).
- memories: exported with their `id` (kept on import when free) and their history rows;
  `event_seq` is not (recomputed on import from the memory's `event_id`). Episodes could be cut
  from the events again, but their state (forgotten, corrected, pinned, access counts) and every
  fact, summary, insight, reflection, procedure and compaction result exist only here.
- history: exported inside its memory (no `id`, in order). Rows of purged memories are not
  exported: the memory they describe is gone and its id means nothing in another database.
- decisions, tasks: exported (ledger rows over their memory), with `id` (kept when free).
- checkpoints: exported (agent state; none in a --session or --app export: they name neither).
- relations: exported when both ends are in the export (consolidation and supersede edges are
  not recomputed).
- proposals: exported (pending and decided profile changes; none in an --app export).
- sessions: exported (the summary of a consolidated session exists only here).
- session_consolidation: exported as kind `consolidation`, its progress as the `event_id` it
  reached instead of a `seq`.
- memories_fts, memories_trigram: derived, recomputed on import.
- memory_vectors, vec_memories, sparse_postings (SQLite), memory_sparse, sparse_df: derived,
  recomputed on import with the importing side's models (or later with `memcli embed` after
  `--defer-embed`).
- entities, entity_aliases, memory_entities: derived from memory text, recomputed on import
  (nothing else writes them).
- meta: not exported; the header carries what matters (embedder, SPARSE model, key id).
- threads, change_log, acb_seen: not exported: revision counters of delta bundles, per database
  (a new database starts at revision 0 and sends full bundles).
- request_metrics, llm_usage, lifecycle_runs, run_locks: not exported: operational records of
  this database's own runs (latencies, model spend, locks), not memory.
- pair_checks: not exported: a cache of model answers, keyed by this database's memory ids.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from memcli.core.progress import Progress, report
from memcli.core.version import __version__
from memcli.portable import file_format
from memcli.store import portable_sql
from memcli.store.sealing import META_KEY_ID

if TYPE_CHECKING:
    from memcli.store.connection import Database

Scope = portable_sql.Scope


def _fields(kind: str) -> list[str]:
    return [f for f, k in file_format.SPECS[kind].items() if k != "history"]


def _convert(spec: dict[str, str], row: dict[str, Any]) -> dict[str, Any]:
    return {f: file_format.from_column(spec[f], row[f]) for f in spec if f in row}


def _memories(db: Database, scope: Scope) -> Iterator[dict[str, Any]]:
    """Each memory with its history rows (two ordered reads merged, not a query per memory)."""
    hist = portable_sql.history(db, scope, list(file_format.HISTORY))
    pending = next(hist, None)
    for row in portable_sql.memories(db, scope, _fields("memory")):
        out = _convert(file_format.SPECS["memory"], row)
        items = []
        while pending is not None and pending["memory_id_"] <= row["id"]:
            if pending["memory_id_"] == row["id"]:
                items.append(_convert(file_format.HISTORY, pending))
            pending = next(hist, None)
        out["history"] = items
        yield out


def _artifact(row: dict[str, Any]) -> dict[str, Any]:
    body = row["body"]
    if isinstance(body, str):
        encoding = "text"  # a `high` event's output, sealed as text in the BLOB column
    else:
        try:
            body, encoding = bytes(body).decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            body, encoding = base64.b64encode(bytes(body)).decode("ascii"), "base64"
    return {**row, "body": body, "body_encoding": encoding}  # _convert orders the fields


def records(db: Database, scope: Scope) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, record) in file order."""
    plain: dict[str, Callable[[], Iterator[dict[str, Any]]]] = {
        "event": lambda: portable_sql.events(db, scope, _fields("event")),
        "decision": lambda: portable_sql.ledger(db, "decisions", scope, _fields("decision")),
        "task": lambda: portable_sql.ledger(db, "tasks", scope, _fields("task")),
        "checkpoint": lambda: portable_sql.checkpoints(db, scope, _fields("checkpoint")),
        "relation": lambda: portable_sql.relations(db, scope, _fields("relation")),
        "proposal": lambda: portable_sql.proposals(db, scope, _fields("proposal")),
        "artifact": lambda: (_artifact(r) for r in portable_sql.artifacts(
            db, scope, [f for f in _fields("artifact") if f != "body_encoding"])),
        "session": lambda: portable_sql.sessions(db, scope, _fields("session")),
        "consolidation": lambda: portable_sql.consolidations(db, scope, _fields("consolidation")),
    }
    for kind in file_format.KINDS:
        rows = _memories(db, scope) if kind == "memory" else (
            _convert(file_format.SPECS[kind], r) for r in plain[kind]())
        for row in rows:
            yield kind, row


def header(db: Database, scope: Scope) -> dict[str, Any]:
    key_id = db.get_meta(META_KEY_ID) if portable_sql.has_high(db, scope) else None
    return file_format.header(
        memcli_version=__version__, schema=db.backend.schema_version(db),
        embedder=db.get_meta("embedder_model"), sparse=db.get_meta("sparse_model"),
        key_id=key_id,
        scope={"tenant": scope.tenant_id, "all_tenants": scope.tenant_id is None,
               "user": scope.user_id, "app": scope.app_id, "session": scope.session_id},
    )


# Records between two progress reports (a report per line would cost more than the line).
REPORT_EVERY = 256


def export(db: Database, scope: Scope, out: IO[str],
           progress: Progress | None = None) -> dict[str, int]:
    """Write the header and every record of `scope` to `out`; returns the count per kind.
    `progress`: memcli.core.progress's callback (the total is not known ahead: None)."""
    counts = dict.fromkeys(file_format.KINDS, 0)
    done = 0
    with portable_sql.snapshot(db):
        out.write(file_format.dumps(header(db, scope)) + "\n")
        for kind, row in records(db, scope):
            out.write(file_format.dumps({file_format.RECORD: kind, **row}) + "\n")
            counts[kind] += 1
            done += 1
            if done % REPORT_EVERY == 0:
                report(progress, "exporting", done, None)
    report(progress, "exporting", done, None)
    return counts
