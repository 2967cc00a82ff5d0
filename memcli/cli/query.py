"""`memcli query`: hybrid retrieval with filters applied in SQL."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from memcli.cli.common import open_memory
from memcli.cli.output import DbOpt, FormatOpt, JsonOpt, emit, errors, resolve_format


class ReturnMode(StrEnum):
    bullets = "bullets"
    full = "full"


def _render(payload: dict, explain: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{payload['query']}  [scope: {payload['scope']}]", show_lines=False)
    for col in ("#", "id", "score", "session", "text"):
        table.add_column(col, overflow="fold")
    if explain:
        table.add_column("legs / boosts", overflow="fold")
    for i, hit in enumerate(payload["hits"], start=1):
        row = [str(i), str(hit["id"]), f"{hit['score']:.3f}", hit["session_id"] or "",
               hit["text"]]
        if explain:
            legs = " ".join(f"{k}#{v['rank']}={v['score']:.3g}" for k, v in hit["scores"].items())
            boosts = " ".join(f"{k}={v:.3g}" for k, v in hit["boosts"].items())
            row.append(f"{legs}\n{boosts}")
        table.add_row(*row)
    Console().print(table)


def register(app: typer.Typer) -> None:
    @app.command("query")
    def query_cmd(
        text: Annotated[str, typer.Argument(help="What to look for; `-` reads it from stdin.")],
        session: Annotated[str | None, typer.Option(
            "--session", help="Search this session first, widening to its user when thin.")] = None,
        user: Annotated[str | None, typer.Option("--user")] = None,
        tenant: Annotated[str | None, typer.Option("--tenant")] = None,
        agent: Annotated[str | None, typer.Option(
            "--agent", help="The asking agent: its category allowlist applies.")] = None,
        agent_id: Annotated[str | None, typer.Option(
            "--agent-id", help="Only memories written by this agent id.")] = None,
        run: Annotated[str | None, typer.Option("--run")] = None,
        actor: Annotated[str | None, typer.Option("--actor", help="Actor id.")] = None,
        role: Annotated[str | None, typer.Option("--role", help="Actor type, e.g. human.")] = None,
        app_id: Annotated[str | None, typer.Option("--app")] = None,
        category: Annotated[list[str] | None, typer.Option("--category")] = None,
        kind: Annotated[list[str] | None, typer.Option("--kind")] = None,
        channel: Annotated[list[str] | None, typer.Option("--channel")] = None,
        sensitivity: Annotated[list[str] | None, typer.Option("--sensitivity")] = None,
        pinned: Annotated[bool | None, typer.Option("--pinned/--unpinned")] = None,
        importance_min: Annotated[float | None, typer.Option("--importance-min")] = None,
        importance_max: Annotated[float | None, typer.Option("--importance-max")] = None,
        updated_after: Annotated[str | None, typer.Option("--updated-after")] = None,
        updated_before: Annotated[str | None, typer.Option("--updated-before")] = None,
        top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, max=1000)] = 10,
        threshold: Annotated[float | None, typer.Option(
            "--threshold", help="Drop hits whose final score (0-1) is below this.")] = None,
        return_mode: Annotated[ReturnMode, typer.Option("--return")] = ReturnMode.full,
        budget_tokens: Annotated[int | None, typer.Option(
            "--budget-tokens", min=1, help="Stop adding hits before this many tokens.")] = None,
        legs: Annotated[str | None, typer.Option(
            "--legs",
            help="Comma-separated legs to use (lexical,sparse,dense,entity,trigram).")] = None,
        no_widen: Annotated[bool, typer.Option(
            "--no-widen", help="Never widen a session query to the user.")] = False,
        explain: Annotated[bool, typer.Option(
            "--explain", help="Show each leg's rank and score and each boost.")] = False,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Find memories: full-text, vector and entity search fused, then reranked."""
        import sys

        from memcli.errors import UsageError
        from memcli.models import parse_ts

        with errors():
            if text == "-":
                text = sys.stdin.read()
            if not text.strip():
                raise UsageError("empty query")
            wanted = {p.strip() for p in legs.split(",")} if legs else None
            if wanted and not wanted <= {"lexical", "sparse", "dense", "entity", "trigram"}:
                raise UsageError(f"unknown leg in --legs: {legs}",
                                 "use lexical, sparse, dense, entity, trigram")
            try:
                after = parse_ts(updated_after) if updated_after else None
                before = parse_ts(updated_before) if updated_before else None
            except ValueError as exc:  # a bad flag value is a usage error (exit 2), not a crash
                raise UsageError(str(exc), "use ISO 8601, e.g. 2025-01-31T09:00:00Z") from None
            with open_memory(db, with_embedder=wanted is None or "dense" in wanted,
                             with_sparse=wanted is None or "sparse" in wanted,
                             preload=True) as memory:
                if wanted is not None:
                    memory.retrieval.leg_weights = {
                        k: v for k, v in memory.retrieval.leg_weights.items() if k in wanted}
                filters = memory.filters(
                    agent=agent, tenant_id=tenant, user_id=user, agent_id=agent_id,
                    session_id=session, app_id=app_id, run_id=run, actor_id=actor, role=role,
                    categories=category, kinds=kind, channels=channel,
                    **({"sensitivities": tuple(sensitivity)} if sensitivity else {}),
                    pinned=pinned, importance_min=importance_min,
                    importance_max=importance_max, updated_after=after,
                    updated_before=before,
                )
                result = memory.query(text, filters=filters, top_k=top_k, threshold=threshold,
                                      budget_tokens=budget_tokens,
                                      return_format=return_mode.value, widen=not no_widen)
            resolved = resolve_format(fmt, as_json)
            payload = result.model_dump()
            if resolved.value == "text":
                emit(payload, resolved, lambda p: _render(p, explain))
            else:
                # The JSON contract: an array of hits (each explains itself).
                emit(payload["hits"], resolved)
