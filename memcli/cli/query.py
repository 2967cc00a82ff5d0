"""`memcli query`: its Typer declaration (the body is `memcli.cli.run.query`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from memcli.cli.options import AsOfOpt, DbOpt, FormatOpt, JsonOpt


class ReturnMode(StrEnum):
    bullets = "bullets"
    full = "full"


def register(app: typer.Typer) -> None:
    @app.command("query")
    def query_cmd(
        text: Annotated[str, typer.Argument(
            help="What to look for; `-` reads stdin: a memory.query JSON request "
                 "when it starts with `{`, else the query text.")],
        session: Annotated[str | None, typer.Option(
            "--session", help="Search this session first, widening to its user when thin.")] = None,
        user: Annotated[str | None, typer.Option("--user")] = None,
        tenant: Annotated[str | None, typer.Option(
            "--tenant", help="Tenant to read (default: the configured one, else `default`).")
        ] = None,
        all_tenants: Annotated[bool, typer.Option(
            "--all-tenants", help="Read every tenant (an operator's search; not with --tenant).")
        ] = False,
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
        top_k: Annotated[int | None, typer.Option(
            "--top-k", "-k", min=1, max=1000, help="How many hits (default 10).")] = None,
        threshold: Annotated[float | None, typer.Option(
            "--threshold", help="Drop hits whose final score (0-1) is below this.")] = None,
        return_mode: Annotated[ReturnMode | None, typer.Option(
            "--return", help="full: whole hits; bullets: {id, category, text, scope} "
                             "(default full).")] = None,
        budget_tokens: Annotated[int | None, typer.Option(
            "--budget-tokens", min=1, help="Stop adding hits before this many tokens.")] = None,
        legs: Annotated[str | None, typer.Option(
            "--legs",
            help="Comma-separated legs to use (lexical,sparse,dense,entity,trigram).")] = None,
        no_widen: Annotated[bool, typer.Option(
            "--no-widen", help="Never widen a session query to the user.")] = False,
        explain: Annotated[bool, typer.Option(
            "--explain", help="Show each leg's rank and score and each boost.")] = False,
        as_of: AsOfOpt = None,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Find memories: full-text, vector and entity search fused, then reranked."""
        from memcli.cli import run as body

        body.query(
            text, session=session, user=user, tenant=tenant, all_tenants=all_tenants,
            agent=agent, agent_id=agent_id, run=run, actor=actor, role=role, app_id=app_id,
            category=category, kind=kind,
            channel=channel, sensitivity=sensitivity, pinned=pinned,
            importance_min=importance_min, importance_max=importance_max,
            updated_after=updated_after, updated_before=updated_before, top_k=top_k,
            threshold=threshold, return_mode=return_mode, budget_tokens=budget_tokens,
            legs=legs, no_widen=no_widen, explain=explain, as_of=as_of, db=db, fmt=fmt,
            as_json=as_json,
        )
