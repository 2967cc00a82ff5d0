"""The bodies of the operations that both the CLI and the service (`memcli.service.api`) run.

Each step here returns what the CLI prints as JSON, so `memcli query --json` and
`POST /api/v1/query` answer with one payload built by one function. The CLI keeps only what is
its own: flags, stdin, warnings on stderr, the text rendering. Nothing here prints, reads stdin
or imports Typer; the module imports nothing heavy at load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.errors import DatabaseBusyError

if TYPE_CHECKING:

    from memcli.acb.build import AcbRequest
    from memcli.config import Settings
    from memcli.core.records import QueryResult
    from memcli.memory import Memory
    from memcli.store.owner import Owner


# -- query -----------------------------------------------------------------------------------
def bounded(text: str) -> tuple[str, str | None]:
    """The query cut to what the legs use, and the note saying so (None when not cut)."""
    from memcli.retrieval.text import MAX_QUERY_CHARS, bound_query

    kept = bound_query(text)
    if kept == text:
        return text, None
    return kept, (f"query truncated to its first {MAX_QUERY_CHARS} of {len(text)} characters "
                  "(what the search legs can use)")


def check_query(text: str) -> tuple[str, str | None]:
    """The query text checked (valid UTF-8, not blank) and bounded, with the note if cut."""
    from memcli.core.inputs import check_text
    from memcli.errors import UsageError

    check_text(text, "the query")
    if not text.strip():
        raise UsageError("empty query")
    return bounded(text)


def query_window(values: dict[str, Any]) -> tuple[str | None, str | None]:
    """`updated_after` / `updated_before` parsed; a bad one is a usage error (exit 2)."""
    return parse_time(values, "updated_after"), parse_time(values, "updated_before")


def parse_time(values: dict[str, Any], name: str) -> str | None:
    """`values[name]`, an ISO 8601 date or time, in memcli's stored form; a bad one is a
    usage error (exit 2)."""
    from memcli.core.records import parse_ts
    from memcli.errors import UsageError

    value = values.get(name)
    if not value:
        return None
    try:
        return parse_ts(value)
    except ValueError as exc:
        raise UsageError(f"bad {name}: {exc}", "use ISO 8601, e.g. 2026-03-01 or "
                         "2025-01-31T09:00:00Z") from None


def run_query(memory: Memory, text: str, v: dict[str, Any], *, all_tenants: bool = False,
              sensitivity: list[str] | None = None, no_widen: bool = False,
              fallback: bool = True) -> QueryResult:
    """The query once its text is checked and its parameters (`v`: the query command's
    REQUEST_FIELDS) are known. The agent's category allowlist is enforced by `Memory.filters`.
    `fallback`: the recency fallback when no leg finds anything (memcli.retrieval.fallback)."""
    after, before = query_window(v)
    as_of = parse_time(v, "as_of")
    filters = memory.filters(
        agent=v["agent"], tenant_id=v["tenant"], all_tenants=all_tenants,
        user_id=v["user"], agent_id=v["agent_id"], session_id=v["session"],
        app_id=v["app_id"], run_id=v["run"], actor_id=v["actor"], role=v["role"],
        categories=v["category"] or None, kinds=v["kind"] or None,
        channels=v["channel"] or None,
        **({"sensitivities": tuple(sensitivity)} if sensitivity else {}),
        pinned=v["pinned"], importance_min=v["importance_min"],
        importance_max=v["importance_max"], updated_after=after, updated_before=before,
        as_of=as_of,
    )
    return memory.query(text, filters=filters, top_k=v["top_k"] or 10,
                        threshold=v["threshold"], budget_tokens=v["budget_tokens"],
                        return_format=str(v["return_mode"] or "full"), widen=not no_widen,
                        fallback=fallback)


def hits_payload(result: QueryResult, return_mode: str | None) -> list[dict[str, Any]]:
    """The JSON contract of a query: an array of hits (each explains itself, its scope
    included), or the memory system spec's bullets `{id, category, text}` plus the scope that
    answered."""
    if str(return_mode or "full") == "bullets":
        return [hit.bullet() for hit in result.hits]
    return [hit.model_dump() for hit in result.hits]


# -- acb build -------------------------------------------------------------------------------
def prepare_acb(data: dict[str, Any]) -> tuple[AcbRequest, str | None]:
    """The validated acb request with its query bounded, and the note if it was cut."""
    from memcli.acb.build import parse_request

    req = parse_request(data)
    note = None
    if req.query_text:
        req.query_text, note = bounded(req.query_text)
    return req, note


def acb_payload(memory: Memory, req: AcbRequest, note: str | None, *, settings: Settings,
                allowed: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The bundle `acb build --json` prints (`allowed`: the only categories it may hold)."""
    from memcli.acb.build import build_acb

    bundle = build_acb(memory, req, settings=settings.acb, context_dir=settings.context_dir,
                       allowed=allowed)
    if note and isinstance(bundle.get("provenance"), dict):
        bundle["provenance"]["query_truncated"] = note
    return bundle


# -- ingest ----------------------------------------------------------------------------------
def ingest_payload(memory: Memory, sources: list[tuple[str, str]], *,
                   defaults: dict[str, Any], strict: bool = False,
                   defer_embed: bool = False, progress: Any = None) -> dict[str, Any]:
    """Record the records of each (source name, text) (one JSON object, an array, or NDJSON):
    the ingest report, per-record problems in `rejected`, duplicates in `skipped`. `progress`:
    the optional callback of memcli/core/progress.py (the CLI's bar on a terminal)."""
    from memcli.ingest.prepare import parse_records

    # (line, value, source name): the source names each rejected record's origin.
    records: list[Any] = [(line, value, name) for name, body in sources
               for line, value in parse_records(body)]
    report = memory.ingest(records, defaults=defaults, strict=strict, defer_embed=defer_embed,
                           progress=progress)
    return report.model_dump()


def record_events_payload(memory: Memory, records: list[Any], *, defaults: dict[str, Any],
                          tenant: str | None = None) -> list[dict[str, Any]]:
    """The `record_event` answer for each record, in order: the Agent Memory System
    PRD's `{event_id, chunk_ids, created_at}` beside that record's ingest report
    (memcli.core.records.EventReceipt). `tenant`: a caller bound to one tenant learns nothing of
    another tenant's event an id repeats (its `skipped` says only that the id is taken)."""
    import json

    from memcli.core.records import EventReceipt
    from memcli.ingest.prepare import parse_records
    from memcli.store.events import event_receipts

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


# -- purge -----------------------------------------------------------------------------------
def purge_payload(memory: Memory, *, memory_id: int | None = None, session: str | None = None,
                  user: str | None = None, tenant: str | None = None, app_id: str | None = None,
                  all_tenants: bool = False, dry_run: bool = False) -> dict[str, Any]:
    """`memcli purge`: the plan (dry run) or what was deleted (then `check_purged`)."""
    from memcli.errors import UsageError

    if all_tenants and tenant is not None:
        raise UsageError("--all-tenants and --tenant exclude each other")
    # "alice" of another tenant is another person: a narrower scope stays in the configured
    # tenant unless --all-tenants says otherwise (as reads do).
    narrower = any(v is not None for v in (memory_id, session, user, app_id))
    if tenant is None and narrower and not all_tenants:
        tenant = memory.tenant
    scope = {"memory_id": memory_id, "session_id": session, "user_id": user,
             "tenant_id": tenant, "app_id": app_id}
    plan = memory.plan_purge(**scope)
    if dry_run:
        return {k: v for k, v in plan.items() if k != "memory_ids"} | {"dry_run": True}
    return memory.purge(**scope) | {"dry_run": False}


VACUUM_NOTICE = ("purged: no query or reader can reach the text any more, but it stays in the "
                 "tables' free space until their owner VACUUMs them (only the owner may)")
VACUUM_HINT = ("the owner of memcli's tables runs `memcli doctor --fix` (its doctor shows "
               "this meanwhile), or any purge, or VACUUM; autovacuum gets there in time too")


def check_purged(out: dict[str, Any]) -> None:
    """A purge that deleted and committed, but could not rewrite the file (a reader's old
    snapshot, or a writer holding the lock, kept its WAL from being emptied): exit 75. A
    tenant role's purge (`"vacuum": "owner"`) is not retried: waiting does not give it the
    right to VACUUM; the caller says who must (`VACUUM_NOTICE`)."""
    if out.get("complete") is False and out.get("vacuum") != "owner":
        raise DatabaseBusyError(
            "purged, but another connection kept the file busy: purged text may remain in the "
            "file and its WAL until it finishes",
            "run the same purge again when readers are done; exit code 75")


def artifact_body(memory: Memory, artifact_id: str, owner: Owner | None = None) -> bytes:
    """The full output kept for a truncated tool result (`art_...`), or the content of an event
    of kind `artifact` by its event id (its text, else its content as JSON): `owner`'s only
    (default: this memory's tenant); another's is "not found", never shown."""
    import json

    from memcli.store.owner import artifact

    kept, event = artifact(memory.db, artifact_id, owner or memory.owner())
    if kept is not None:
        return bytes(kept["body"])
    text = event["content"].get("text")
    if not isinstance(text, str):
        text = json.dumps(event["content"], ensure_ascii=False)
    return text.encode("utf-8", errors="surrogateescape")
