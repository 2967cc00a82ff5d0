"""`memcli decision add|supersede|list`, `memcli task add|update|list`,
`memcli checkpoint save|load`."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import DbOpt, FormatOpt, JsonOpt, id_argument, limit_option
from memcli.cli.output import emit, errors, read_stdin, resolve_format, warn_redacted
from memcli.inputs import check_text

Tenant = Annotated[
    str | None, typer.Option("--tenant", help="Tenant id (default: the configured one).")
]
AllTenants = Annotated[
    bool, typer.Option("--all-tenants", help="List every tenant's (an operator's view).")
]
User = Annotated[str | None, typer.Option("--user", help="User id (none: tenant-wide).")]
Session = Annotated[str | None, typer.Option("--session", help="Session it came from.")]
Agent = Annotated[str | None, typer.Option("--agent", help="Agent that recorded it.")]
AppId = Annotated[str | None, typer.Option("--app", help="App it belongs to.")]
Refs = Annotated[
    list[str] | None, typer.Option("--ref", help="Evidence: an event id or mem:ID (repeatable).")
]
Sensitivity = Annotated[
    str, typer.Option("--sensitivity", help="none, low or high (secret is never stored).")
]
Channel = Annotated[str, typer.Option("--channel", help="private, public, team or agent.")]


class DecisionStatus(StrEnum):
    active = "active"
    superseded = "superseded"
    all = "all"


def _decision_text(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        tail = f" (superseded by D{r['superseded_by']})" if r["superseded_by"] else ""
        print(f"D{r['id']} [{r['status']}, {r['scope']}] {r['decision']}{tail}")


def _task_text(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        print(f"T{r['id']} [{r['status']}] {r['title']}")


def _one(fmt: Any, as_json: bool, render: Any) -> Any:
    def out(row: dict[str, Any]) -> None:
        warn_redacted(row)
        emit(row, resolve_format(fmt, as_json), lambda r: render([r]))

    return out


def register(app: typer.Typer) -> None:
    decision = typer.Typer(
        help="The decision ledger: what was decided, why, and what replaced it.",
        no_args_is_help=True,
    )
    task = typer.Typer(
        help="Tasks an agent is working on (open, doing, done).", no_args_is_help=True
    )
    checkpoint = typer.Typer(
        help="An agent's saved state per (user, thread), for resuming.", no_args_is_help=True
    )
    app.add_typer(decision, name="decision")
    app.add_typer(task, name="task")
    app.add_typer(checkpoint, name="checkpoint")

    @decision.command("add")
    def decision_add(
        text: Annotated[str, typer.Argument(help="What was decided.")],
        rationale: Annotated[list[str] | None, typer.Option("--rationale", "-r")] = None,
        constraint: Annotated[list[str] | None, typer.Option("--constraint")] = None,
        alternative: Annotated[list[str] | None, typer.Option("--alternative")] = None,
        consequence: Annotated[list[str] | None, typer.Option("--consequence")] = None,
        ref: Refs = None,
        scope: Annotated[str, typer.Option("--scope", help="project, user or global.")] = (
            "project"
        ),
        tenant: Tenant = None,
        user: User = None,
        session: Session = None,
        agent: Agent = None,
        app_id: AppId = None,
        channel: Channel = "private",
        sensitivity: Sensitivity = "none",
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Record a decision (active) with its rationale, trade-offs and evidence."""
        from memcli import ledger

        with errors(), open_memory(db) as memory:
            row = ledger.add_decision(
                memory,
                text,
                rationale=rationale,
                constraints=constraint,
                alternatives=alternative,
                consequences=consequence,
                refs=ref,
                scope=scope,
                tenant_id=tenant,
                user_id=user,
                session_id=session,
                agent_id=agent,
                app_id=app_id,
                channel=channel,
                sensitivity=sensitivity,
            )
            _one(fmt, as_json, _decision_text)(row)

    @decision.command("supersede")
    def decision_supersede(
        decision_id: Annotated[int, id_argument("The decision it replaces.")],
        text: Annotated[str, typer.Argument(help="The new decision.")],
        rationale: Annotated[list[str] | None, typer.Option("--rationale", "-r")] = None,
        constraint: Annotated[list[str] | None, typer.Option("--constraint")] = None,
        alternative: Annotated[list[str] | None, typer.Option("--alternative")] = None,
        consequence: Annotated[list[str] | None, typer.Option("--consequence")] = None,
        ref: Refs = None,
        reason: Annotated[str, typer.Option("--reason", help="Why it changed.")] = "",
        tenant: Tenant = None,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Replace a decision: the old one stays, marked superseded and linked to the new."""
        from memcli import ledger

        with errors(), open_memory(db, exists=True) as memory:
            row = ledger.supersede_decision(
                memory,
                decision_id,
                text,
                owner=memory.owner(tenant),
                reason=reason,
                rationale=rationale,
                constraints=constraint,
                alternatives=alternative,
                consequences=consequence,
                refs=ref,
            )
            _one(fmt, as_json, _decision_text)(row)

    @decision.command("list")
    def decision_list(
        status: Annotated[DecisionStatus, typer.Option("--status")] = DecisionStatus.active,
        tenant: Tenant = None,
        all_tenants: AllTenants = False,
        user: Annotated[str | None, typer.Option("--user")] = None,
        app_id: AppId = None,
        limit: Annotated[int, limit_option()] = 100,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """List decisions, newest first (--status all shows superseded ones and their links)."""
        from memcli import ledger

        with errors(), open_memory(db, with_embedder=False, must_exist=True) as memory:
            rows = ledger.list_decisions(
                memory,
                status=None if status is DecisionStatus.all else status.value,
                tenant_id=tenant,
                all_tenants=all_tenants,
                user_id=user,
                app_id=app_id,
                limit=limit,
            )
            emit(rows, resolve_format(fmt, as_json), _decision_text)

    @task.command("add")
    def task_add(
        title: Annotated[str, typer.Argument(help="What to do.")],
        details: Annotated[str, typer.Option("--details")] = "",
        status: Annotated[str, typer.Option("--status", help="open, doing or done.")] = "open",
        ref: Refs = None,
        tenant: Tenant = None,
        user: User = None,
        session: Session = None,
        agent: Agent = None,
        app_id: AppId = None,
        channel: Channel = "private",
        sensitivity: Sensitivity = "none",
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Add a task."""
        from memcli import ledger

        with errors(), open_memory(db) as memory:
            row = ledger.add_task(
                memory,
                title,
                details=details,
                status=status,
                refs=ref,
                tenant_id=tenant,
                user_id=user,
                session_id=session,
                agent_id=agent,
                app_id=app_id,
                channel=channel,
                sensitivity=sensitivity,
            )
            _one(fmt, as_json, _task_text)(row)

    @task.command("update")
    def task_update(
        task_id: Annotated[int, id_argument("A task id.")],
        status: Annotated[str | None, typer.Option("--status", help="open, doing or done.")] = None,
        title: Annotated[str | None, typer.Option("--title")] = None,
        details: Annotated[str | None, typer.Option("--details")] = None,
        ref: Refs = None,
        tenant: Tenant = None,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Change a task's status, title, details or evidence (the history keeps each version)."""
        from memcli import ledger

        with errors(), open_memory(db, exists=True) as memory:
            row = ledger.update_task(
                memory, task_id, status=status, title=title, details=details, refs=ref,
                owner=memory.owner(tenant),
            )
            _one(fmt, as_json, _task_text)(row)

    @task.command("list")
    def task_list(
        status: Annotated[
            list[str] | None,
            typer.Option("--status", help="open, doing or done (repeatable; default all)."),
        ] = None,
        tenant: Tenant = None,
        all_tenants: AllTenants = False,
        user: Annotated[str | None, typer.Option("--user")] = None,
        app_id: AppId = None,
        limit: Annotated[int, limit_option()] = 100,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """List tasks, newest first."""
        from memcli import ledger

        with errors(), open_memory(db, with_embedder=False, must_exist=True) as memory:
            rows = ledger.list_tasks(
                memory,
                statuses=tuple(status or ()),
                tenant_id=tenant,
                all_tenants=all_tenants,
                user_id=user,
                app_id=app_id,
                limit=limit,
            )
            emit(rows, resolve_format(fmt, as_json), _task_text)

    @checkpoint.command("save")
    def checkpoint_save(
        source: Annotated[
            str | None, typer.Argument(help="A JSON file, or `-` for stdin.", show_default=False)
        ] = None,
        thread: Annotated[str, typer.Option("--thread", help="Thread (session) id.")] = "",
        user: Annotated[str, typer.Option("--user", help="User id.")] = "",
        tenant: Tenant = None,
        data: Annotated[str | None, typer.Option("--data", help="The state as JSON text.")] = None,
        sensitivity: Sensitivity = "none",
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Save an agent's state (any JSON) for (user, thread), replacing the previous one."""
        import json

        from memcli import ledger
        from memcli.errors import UsageError

        with errors():
            if (source is None) == (data is None):
                raise UsageError("give the state once", "a file, `-` for stdin, or --data")
            if data is None:
                data = (
                    check_text(read_stdin(), "the state on stdin")
                    if source == "-"
                    else Path(str(source)).read_text(encoding="utf-8")
                )
            try:
                state = json.loads(data)
            except json.JSONDecodeError as exc:
                raise UsageError(f"checkpoint state is not JSON: {exc.msg}") from exc
            with open_memory(db, with_embedder=False) as memory:
                row = ledger.save_checkpoint(
                    memory,
                    state,
                    user_id=user,
                    thread_id=thread,
                    tenant_id=tenant,
                    sensitivity=sensitivity,
                )
            out = {k: v for k, v in row.items() if k != "data"}
            warn_redacted(out)
            emit(
                out,
                resolve_format(fmt, as_json),
                lambda r: print(
                    f"saved checkpoint v{r['version']} for {r['user_id']}/{r['thread_id']}"
                ),
            )

    @checkpoint.command("load")
    def checkpoint_load(
        thread: Annotated[str, typer.Option("--thread", help="Thread (session) id.")] = "",
        user: Annotated[str, typer.Option("--user", help="User id.")] = "",
        version: Annotated[
            int | None,
            typer.Option("--version", min=1, help="An older save (1 = the first); default: the "
                         "latest.", show_default=False),
        ] = None,
        tenant: Tenant = None,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Print the saved state of (user, thread) with its version and time."""
        from memcli import ledger

        with errors(), open_memory(db, with_embedder=False, must_exist=True) as memory:
            row = ledger.load_checkpoint(memory, user_id=user, thread_id=thread, tenant_id=tenant,
                                         version=version)
            emit(row, resolve_format(fmt, as_json))
