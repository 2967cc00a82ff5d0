"""Writing records and reading artifacts: `memcli ingest`, the PRD's `record_event`, `memcli
artifact`. Each returns what the CLI prints as JSON and the service answers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.core.records import EventReceipt
from memcli.ingest.prepare import parse_records
from memcli.store.events import event_receipts
from memcli.store.owner import artifact

if TYPE_CHECKING:
    from memcli.operations.memory import Memory
    from memcli.operations.requests import IngestRequest
    from memcli.store.owner import Owner


def ingest_payload(memory: Memory, sources: list[tuple[str, str]], request: IngestRequest, *,
                   progress: Any = None) -> dict[str, Any]:
    """Record the records of each (source name, text) (one JSON object, an array, or NDJSON):
    the ingest report, per-record problems in `rejected`, duplicates in `skipped`. `progress`:
    the optional callback of memcli/core/progress.py (the CLI's bar on a terminal)."""

    # (line, value, source name): the source names each rejected record's origin.
    records: list[Any] = [(line, value, name) for name, body in sources
               for line, value in parse_records(body)]
    report = memory.ingest(records, defaults=request.defaults(), strict=request.strict,
                           defer_embed=request.defer_embed, progress=progress)
    if request.wait and report.memory_ids:
        memory.wait_indexed(report.memory_ids)
    return report.model_dump()


def record_events_payload(memory: Memory, records: list[Any], *, defaults: dict[str, Any],
                          tenant: str | None = None) -> list[dict[str, Any]]:
    """The `record_event` answer for each record, in order: the Agent Memory System
    PRD's `{event_id, chunk_ids, created_at}` beside that record's ingest report
    (memcli.core.records.EventReceipt). `tenant`: a caller bound to one tenant learns nothing of
    another tenant's event an id repeats (its `skipped` says only that the id is taken)."""

    body = json.dumps(records, ensure_ascii=False)
    report = memory.ingest([(line, value, "request") for line, value in parse_records(body)],
                           defaults=defaults)
    ids = [r.created[0] if r.created else r.skipped[0] if r.skipped
           else r.rejected[0].event_id if r.rejected else None for r in report.records]
    stored = event_receipts(memory.db, [i for i in ids if i is not None], tenant)
    out = []
    for event_id, one in zip(ids, report.records, strict=True):
        receipt = stored.get(event_id or "", {}) if not one.rejected else {}
        out.append(EventReceipt(event_id=event_id, **receipt, **one.model_dump()).payload())
    return out


def artifact_body(memory: Memory, artifact_id: str, owner: Owner | None = None) -> bytes:
    """The full output kept for a truncated tool result (`art_...`), or the content of an event
    of kind `artifact` by its event id (its text, else its content as JSON): `owner`'s only
    (default: this memory's tenant); another's is "not found", never shown."""

    kept, event = artifact(memory.db, artifact_id, owner or memory.owner())
    if kept is not None:
        return bytes(kept["body"])
    text = event["content"].get("text")
    if not isinstance(text, str):
        text = json.dumps(event["content"], ensure_ascii=False)
    return text.encode("utf-8", errors="surrogateescape")
