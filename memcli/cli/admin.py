"""`history`, `purge`, `forget`, `restore`, `stats`, `artifact`, `demo`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from memcli.cli.common import on_one, open_memory
from memcli.cli.options import (
    DbOpt,
    FormatOpt,
    Given,
    JsonOpt,
    MemoryIdArg,
    id_argument,
    limit_option,
    request_options,
)
from memcli.cli.output import Format, emit, errors, resolve_format, warn
from memcli.operations.ledger_requests import ArtifactRequest
from memcli.operations.lifecycle_requests import MemoryRequest, StatsRequest
from memcli.operations.requests import HistoryRequest, PurgeRequest


def _history_text(rows: list[dict]) -> None:
    for r in rows:
        ref = f"{r['old_ref'] or ''} -> {r['new_ref'] or ''}".strip()
        print(f"{r['ts']}  {r['op']:<7} memory={r['memory_id']} {ref} by {r['actor']}")


@request_options(HistoryRequest)
def history_cmd(
    memory_id: Annotated[int | None, id_argument("A memory id.")] = None,
    *,
    given: Given,
    all_tenants: Annotated[bool, typer.Option(
        "--all-tenants", help="Every tenant's trail (an operator's audit).")] = False,
    limit: Annotated[int, limit_option()] = 100,
    db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Show what happened to a memory, or in a scope, newest first (--format jsonl exports)."""
    with errors():
        request = given.request("history request", memory_id=memory_id)
        with open_memory(db, with_embedder=False, must_exist=True) as memory:
            rows = memory.history(all_tenants=all_tenants, limit=limit,
                                  **request.model_dump(exclude={"limit"}))
        emit(rows, resolve_format(fmt, as_json), _history_text)


@request_options(PurgeRequest, legacy={"memory_id": "--memory"})
def purge_cmd(
    *,
    given: Given,
    all_tenants: Annotated[bool, typer.Option(
        "--all-tenants",
        help="A --user-id/--session-id/--app-id/--memory-id scope in every tenant.")
    ] = False,
    db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Delete a scope for good: events, memories, index rows, vectors, entity links, and
    every copy in the file (VACUUM, WAL emptied; exit 75 if a reader keeps old pages)."""
    from memcli.operations.erase import check_purged, purge_payload

    with errors():
        request = given.request("purge request")
        with open_memory(db, with_embedder=False) as memory:
            out = purge_payload(memory, request, all_tenants=all_tenants)
        emit(out, resolve_format(fmt, as_json), lambda p: print(
            f"{'would purge' if p['dry_run'] else 'purged'} {p['events']} event(s), "
            f"{p['memories']} memories, {p['artifacts']} artifact(s)"))
        check_purged(out)
        if out.get("vacuum") == "owner":
            from memcli.operations.erase import VACUUM_HINT, VACUUM_NOTICE

            warn(f"{VACUUM_NOTICE} ({VACUUM_HINT})")


@request_options(MemoryRequest)
def forget_cmd(
    memory_id: MemoryIdArg, *, given: Given,
    db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Soft-delete a memory (hidden from queries; `restore` brings it back for 30 days)."""
    on_one(given, "forget request",
           lambda memory, req: memory.forget(req.memory_id, memory.owner(req.tenant_id)),
           lambda p: print(f"forgot {p['id']} (purge after {p['purge_at']})"),
           db, fmt, as_json, memory_id=memory_id)


@request_options(MemoryRequest)
def restore_cmd(
    memory_id: MemoryIdArg, *, given: Given,
    db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Bring back a soft-deleted memory."""
    on_one(given, "restore request",
           lambda memory, req: memory.restore(req.memory_id, memory.owner(req.tenant_id)),
           lambda p: print(f"restored {p['id']}"), db, fmt, as_json, memory_id=memory_id)


@request_options(StatsRequest)
def stats_cmd(
    *, given: Given, db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Counts by kind and state, database size, embedder in use (--requests: metrics)."""
    from memcli.config import load_settings

    with errors():
        req = given.request("stats request")
        if req.usage:
            from memcli.derived.llm_usage import usage_report

            with open_memory(db, with_embedder=False, must_exist=True) as memory:
                emit(usage_report(memory.db), resolve_format(fmt, as_json))
            return
        if req.requests:
            from memcli.acb.stats import request_stats, since_timestamp

            window = since_timestamp(req.since)
            with open_memory(db, with_embedder=False, must_exist=True) as memory:
                emit(request_stats(memory.db, window), resolve_format(fmt, as_json))
            return
        if req.since is not None:
            from memcli.errors import UsageError

            raise UsageError("--since needs --requests")
        settings = load_settings(db)
        with open_memory(db, with_embedder=False, settings=settings, must_exist=True) as memory:
            out = memory.stats()
            from memcli.service.daemon.indexer import backlog_status

            out["backlog"] = backlog_status(memory.db, settings)
        out["embedder"]["configured"] = settings.embedder.provider
        out["db"] = str(settings.db)
        out["daemon"] = _daemon_summary(settings.db)
        emit(out, resolve_format(fmt, as_json))


@request_options(ArtifactRequest)
def artifact_cmd(
    artifact_id: Annotated[str, typer.Argument(
        help="An artifact id from a tool result, or the event id of an `artifact` event.")],
    *, given: Given, db: DbOpt = None,
) -> None:
    """Print the full output kept for a truncated tool result."""
    from memcli.operations.record import artifact_body

    with errors():
        req = given.request("artifact request", artifact_id=artifact_id)
        with open_memory(db, with_embedder=False, must_exist=True) as memory:
            sys.stdout.buffer.write(artifact_body(memory, req.artifact_id,
                                                  memory.owner(req.tenant_id)))


def demo_cmd(
    question: Annotated[str, typer.Argument(help="A question about the example.")] = (
        "When does Anika visit?"),
    db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Ingest the bundled example conversation into a scratch database and query it."""
    import tempfile

    from memcli.config import bundled_text
    from memcli.ingest.prepare import parse_records

    with errors(), tempfile.TemporaryDirectory() as tmp:
        path = db or Path(tmp) / "demo.db"
        with open_memory(str(path)) as memory:
            report = memory.ingest(parse_records(bundled_text("data/example.jsonl")))
            print(f"memcli demo: ingested {len(report.created)} events into {path}",
                  file=sys.stderr)
            if resolve_format(fmt, as_json) is not Format.text:  # text prints it as `Q:`
                # stdout carries the hits alone: the question they answer goes beside them.
                print(f"memcli demo: the hits for {question!r} (user priya, tenant demo):",
                      file=sys.stderr)
            result = memory.query(question, top_k=3, filters=memory.filters(
                tenant_id="demo", user_id="priya"))  # the example's own scope
        resolved = resolve_format(fmt, as_json)
        if resolved is Format.text:
            print(f"Q: {question}")
            for i, hit in enumerate(result.hits, start=1):
                print(f"{i}. ({hit.score:.2f}) {hit.text}")
        else:
            emit([h.model_dump() for h in result.hits], resolved)


def register(app: typer.Typer) -> None:
    for name, command in (("history", history_cmd), ("purge", purge_cmd),
                          ("forget", forget_cmd), ("restore", restore_cmd),
                          ("stats", stats_cmd), ("artifact", artifact_cmd)):
        app.command(name)(command)

    app.command("demo")(demo_cmd)


def _daemon_summary(db: str) -> dict[str, Any]:
    """Whether a `memcli serve` answers for the database (the one started for it, else the
    user's; this command runs in it, then) and since when:
    memcli.service.daemon.main_process.summary."""
    from memcli.service.daemon import main_process, paths

    socket = os.environ.get("MEMCLI_SOCKET")
    ep = paths.endpoint_for_socket(socket) if socket else main_process.answering(db)
    return main_process.summary(ep)
