"""`history`, `purge`, `forget`, `restore`, `stats`, `artifact`, `demo`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import (
    DbOpt,
    FormatOpt,
    JsonOpt,
    MemoryIdArg,
    id_argument,
    id_option,
    limit_option,
)
from memcli.cli.output import Format, emit, errors, resolve_format, warn


def _history_text(rows: list[dict]) -> None:
    for r in rows:
        ref = f"{r['old_ref'] or ''} -> {r['new_ref'] or ''}".strip()
        print(f"{r['ts']}  {r['op']:<7} memory={r['memory_id']} {ref} by {r['actor']}")


def register(app: typer.Typer) -> None:
    @app.command("history")
    def history_cmd(
        memory_id: Annotated[int | None, id_argument("A memory id.")] = None,
        user: Annotated[str | None, typer.Option("--user")] = None,
        tenant: Annotated[str | None, typer.Option(
            "--tenant", help="Tenant to read (default: the configured one).")] = None,
        all_tenants: Annotated[bool, typer.Option(
            "--all-tenants", help="Every tenant's trail (an operator's audit).")] = False,
        session: Annotated[str | None, typer.Option("--session")] = None,
        limit: Annotated[int, limit_option()] = 100,
        db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
    ) -> None:
        """Show what happened to a memory, or in a scope, newest first (--format jsonl exports)."""
        with errors(), open_memory(db, with_embedder=False, must_exist=True) as memory:
            rows = memory.history(memory_id, tenant_id=tenant, all_tenants=all_tenants,
                                  user_id=user, session_id=session, limit=limit)
            emit(rows, resolve_format(fmt, as_json), _history_text)

    @app.command("purge")
    def purge_cmd(
        memory_id: Annotated[int | None, id_option("--memory", help="One memory id.")] = None,
        session: Annotated[str | None, typer.Option("--session")] = None,
        user: Annotated[str | None, typer.Option("--user")] = None,
        tenant: Annotated[str | None, typer.Option("--tenant")] = None,
        app_id: Annotated[str | None, typer.Option("--app")] = None,
        all_tenants: Annotated[bool, typer.Option(
            "--all-tenants", help="A --user/--session/--app/--memory scope in every tenant.")
        ] = False,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan only.")] = False,
        db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
    ) -> None:
        """Delete a scope for good: events, memories, index rows, vectors, entity links, and
        every copy in the file (VACUUM, WAL emptied; exit 75 if a reader keeps old pages)."""
        from memcli.operations import check_purged, purge_payload

        with errors(), open_memory(db, with_embedder=False) as memory:
            out = purge_payload(memory, memory_id=memory_id, session=session, user=user,
                                tenant=tenant, app_id=app_id, all_tenants=all_tenants,
                                dry_run=dry_run)
            emit(out, resolve_format(fmt, as_json), lambda p: print(
                f"{'would purge' if p['dry_run'] else 'purged'} {p['events']} event(s), "
                f"{p['memories']} memories, {p['artifacts']} artifact(s)"))
            check_purged(out)
            if out.get("vacuum") == "owner":
                from memcli.operations import VACUUM_HINT, VACUUM_NOTICE

                warn(f"{VACUUM_NOTICE} ({VACUUM_HINT})")

    @app.command("forget")
    def forget_cmd(
        memory_id: MemoryIdArg,
        db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
    ) -> None:
        """Soft-delete a memory (hidden from queries; `restore` brings it back for 30 days)."""
        with errors(), open_memory(db, with_embedder=False, exists=True) as memory:
            emit(memory.forget(memory_id), resolve_format(fmt, as_json),
                 lambda p: print(f"forgot {p['id']} (purge after {p['purge_at']})"))

    @app.command("restore")
    def restore_cmd(
        memory_id: MemoryIdArg,
        db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
    ) -> None:
        """Bring back a soft-deleted memory."""
        with errors(), open_memory(db, with_embedder=False, exists=True) as memory:
            emit(memory.restore(memory_id), resolve_format(fmt, as_json),
                 lambda p: print(f"restored {p['id']}"))

    @app.command("stats")
    def stats_cmd(
        requests: Annotated[bool, typer.Option(
            "--requests", help="Query and acb request metrics: hit rate, fallback and "
                               "truncation shares, p50/p95 latency.")] = False,
        since: Annotated[str | None, typer.Option(
            "--since", help="With --requests: a window like 24h, 7d, 30m, or an ISO time "
                            "(default: all).")] = None,
        usage: Annotated[bool, typer.Option(
            "--usage", help="LLM calls, tokens and cost per command and per day.")] = False,
        db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
    ) -> None:
        """Counts by kind and state, database size, embedder in use (--requests: metrics)."""
        from memcli.config import load_settings

        with errors():
            if usage:
                from memcli.lifecycle.llm_usage import usage_report

                with open_memory(db, with_embedder=False, must_exist=True) as memory:
                    emit(usage_report(memory.db), resolve_format(fmt, as_json))
                return
            if requests:
                from memcli.acb.stats import request_stats, since_timestamp

                window = since_timestamp(since)
                with open_memory(db, with_embedder=False, must_exist=True) as memory:
                    emit(request_stats(memory.db, window), resolve_format(fmt, as_json))
                return
            if since is not None:
                from memcli.errors import UsageError

                raise UsageError("--since needs --requests")
            settings = load_settings(db)
            with open_memory(db, with_embedder=False, settings=settings,
                             must_exist=True) as memory:
                out = memory.stats()
            out["embedder"]["configured"] = settings.embedder.provider
            out["db"] = str(settings.db)
            emit(out, resolve_format(fmt, as_json))

    @app.command("artifact")
    def artifact_cmd(
        artifact_id: Annotated[str, typer.Argument(help="An artifact id from a tool result.")],
        db: DbOpt = None,
    ) -> None:
        """Print the full output kept for a truncated tool result."""
        from memcli.operations import artifact_body

        with errors(), open_memory(db, with_embedder=False, must_exist=True) as memory:
            sys.stdout.buffer.write(artifact_body(memory, artifact_id))

    @app.command("demo")
    def demo_cmd(
        question: Annotated[str, typer.Argument(help="A question about the example.")] = (
            "When does Anika visit?"),
        db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
    ) -> None:
        """Ingest the bundled example conversation into a scratch database and query it."""
        import tempfile

        from memcli.config import bundled_text
        from memcli.ingest import parse_records

        with errors(), tempfile.TemporaryDirectory() as tmp:
            path = db or Path(tmp) / "demo.db"
            with open_memory(path) as memory:
                report = memory.ingest(parse_records(bundled_text("data/example.jsonl")))
                print(f"memcli demo: ingested {len(report.created)} events into {path}",
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
