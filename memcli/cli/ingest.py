"""`memcli ingest`, `memcli embed`, `memcli reindex`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import DbOpt, FormatOpt, JsonOpt
from memcli.cli.output import (
    emit,
    errors,
    one_line,
    read_inputs,
    resolve_format,
    warn_redacted,
)
from memcli.cli.progress_bar import progress_bar


def _ingest_text(report: dict) -> None:
    print(f"created {len(report['created'])} event(s), {len(report['memory_ids'])} memories; "
          f"skipped {len(report['skipped'])}; rejected {len(report['rejected'])}")
    for item in report["redacted"]:
        print(f"  redacted {', '.join(item['kinds'])} in {item['event_id']}")


def register(app: typer.Typer) -> None:
    @app.command("ingest")
    def ingest_cmd(
        paths: Annotated[list[str] | None, typer.Argument(
            help="JSON / NDJSON files to read; `-` reads stdin.", show_default=False)] = None,
        text: Annotated[str | None, typer.Option("--text", "-t",
                                                 help="Record one message with this text.")] = None,
        session: Annotated[str | None, typer.Option(
            "--session", help="Default session id.")] = None,
        user: Annotated[str | None, typer.Option("--user", help="Default user id.")] = None,
        tenant: Annotated[str | None, typer.Option("--tenant", help="Default tenant id.")] = None,
        agent: Annotated[str | None, typer.Option("--agent", help="Default agent id.")] = None,
        app_id: Annotated[str | None, typer.Option("--app", help="Default app id.")] = None,
        run: Annotated[str | None, typer.Option("--run", help="Default run id.")] = None,
        channel: Annotated[str | None, typer.Option(
            "--channel", help="Default channel: private, public, team or agent.")] = None,
        category: Annotated[str | None, typer.Option("--category",
                                                     help="Default category.")] = None,
        strict: Annotated[bool, typer.Option(
            "--strict", help="All or nothing: one bad record rejects the batch.")] = False,
        defer_embed: Annotated[bool, typer.Option(
            "--defer-embed", help="Store without vectors now; `memcli embed` adds them.")] = False,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Record events (messages, tool calls, results, decisions) as memories."""
        from memcli.operations import ingest_payload

        with errors():
            sources = read_inputs(paths or [], text)
            if not sources:
                from memcli.errors import UsageError

                raise UsageError("nothing to ingest", "give a file, `-` for stdin, or --text")
            defaults = {"session_id": session, "user_id": user, "tenant_id": tenant,
                        "agent_id": agent, "app_id": app_id, "run_id": run, "channel": channel,
                        "category": category}
            with open_memory(db) as memory, progress_bar() as progress:
                payload = ingest_payload(memory, sources, defaults=defaults, strict=strict,
                                         defer_embed=defer_embed, progress=progress)
            emit(payload, resolve_format(fmt, as_json), _ingest_text)
            for written in payload.get("ledger") or []:  # an app over its limit
                warn_redacted(written)
            for problem in payload["rejected"]:
                where = f"{problem['source']}:" if problem["source"] else "record "
                message = f"{where}{problem['line']}: {problem['reason']}"
                print(f"memcli: error: {one_line(message)}", file=sys.stderr)
            if payload["rejected"]:
                raise typer.Exit(2)

    @app.command("embed")
    def embed_cmd(db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False) -> None:
        """Add vectors to memories stored with --defer-embed."""
        with errors(), open_memory(db, exists=True) as memory:
            with progress_bar() as progress:
                done = memory.embed_pending(progress=progress)
            emit({"embedded": done}, resolve_format(fmt, as_json),
                 lambda p: print(f"embedded {p['embedded']} memories"))

    @app.command("reindex")
    def reindex_cmd(db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False) -> None:
        """Re-embed every memory with the configured embedder (after changing models)."""
        with errors(), open_memory(db, check_embedder=False, exists=True) as memory:
            with progress_bar() as progress:
                done = memory.reindex(progress=progress)
            emit({"embedded": done, "model": memory.embedder.model_id},
                 resolve_format(fmt, as_json),
                 lambda p: print(f"re-embedded {p['embedded']} memories with {p['model']}"))
