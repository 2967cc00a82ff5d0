"""`memcli ingest`, `memcli embed`, `memcli reindex`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import DbOpt, FormatOpt, Given, JsonOpt, request_options
from memcli.cli.output import (
    emit,
    errors,
    one_line,
    read_inputs,
    resolve_format,
    warn_redacted,
)
from memcli.cli.progress_bar import progress_bar
from memcli.errors import UsageError
from memcli.operations.requests import IngestRequest


def _ingest_text(report: dict) -> None:
    print(f"created {len(report['created'])} event(s), {len(report['memory_ids'])} memories; "
          f"skipped {len(report['skipped'])}; rejected {len(report['rejected'])}")
    for item in report["redacted"]:
        print(f"  redacted {', '.join(item['kinds'])} in {item['event_id']}")


@request_options(IngestRequest, legacy={"agent_id": "--agent"},
                 help={"tenant_id": "Default tenant id.", "user_id": "Default user id.",
                       "session_id": "Default session id.", "app_id": "Default app id."})
def ingest_cmd(
    paths: Annotated[list[str] | None, typer.Argument(
        help="JSON / NDJSON files to read; `-` reads stdin.", show_default=False)] = None,
    text: Annotated[str | None, typer.Option("--text", "-t",
                                             help="Record one message with this text.")] = None,
    *,
    given: Given,
    db: DbOpt = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Record events (messages, tool calls, results, decisions) as memories."""
    from memcli.operations.record import ingest_payload

    with errors():
        request = given.request("ingest request")
        sources = read_inputs(paths or [], text)
        if not sources:
            raise UsageError("nothing to ingest", "give a file, `-` for stdin, or --text")
        with open_memory(db) as memory, progress_bar() as progress:
            payload = ingest_payload(memory, sources, request, progress=progress)
        emit(payload, resolve_format(fmt, as_json), _ingest_text)
        for written in payload.get("ledger") or []:  # an app over its limit
            warn_redacted(written)
        for problem in payload["rejected"]:
            where = f"{problem['source']}:" if problem["source"] else "record "
            message = f"{where}{problem['line']}: {problem['reason']}"
            print(f"memcli: error: {one_line(message)}", file=sys.stderr)
        if payload["rejected"]:
            raise typer.Exit(2)


def embed_cmd(db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False) -> None:
    """Add vectors to memories stored with --defer-embed."""
    with errors(), open_memory(db, exists=True) as memory:
        with progress_bar() as progress:
            done = memory.embed_pending(progress=progress)
        emit({"embedded": done}, resolve_format(fmt, as_json),
             lambda p: print(f"embedded {p['embedded']} memories"))


def reindex_cmd(db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False) -> None:
    """Re-embed every memory with the configured embedder (after changing models)."""
    with errors(), open_memory(db, check_embedder=False, exists=True) as memory:
        with progress_bar() as progress:
            done = memory.reindex(progress=progress)
        emit({"embedded": done, "model": memory.embedder.model_id},
             resolve_format(fmt, as_json),
             lambda p: print(f"re-embedded {p['embedded']} memories with {p['model']}"))


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest_cmd)
    app.command("embed")(embed_cmd)
    app.command("reindex")(reindex_cmd)
