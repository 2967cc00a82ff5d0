"""Lifecycle commands: consolidate, decay, reflect, insights, remember, confirm, pin, proposals.

The commands cron runs (see README "Scheduling (cron)"): each takes a per-command lock in the
database (a second run exits 75), records its run in `lifecycle_runs`, and prints its report
(or, with --dry-run, its plan) on stdout. Commands that use a model say so on stderr in one
line when none is configured, and run only their model-free parts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import DbOpt, FormatOpt, JsonOpt, MemoryIdArg, id_argument, limit_option
from memcli.cli.output import emit, errors, read_stdin, resolve_format, warn, warn_redacted
from memcli.errors import MemcliError
from memcli.inputs import check_text

if TYPE_CHECKING:
    from memcli.config import Settings
    from memcli.lifecycle.llm_usage import Model
    from memcli.memory import Memory

TenantOpt = Annotated[str | None, typer.Option("--tenant", help="Only this tenant.")]
UserOpt = Annotated[str | None, typer.Option("--user", help="Only this user.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Ignore the skip rules.")]


def _settings(db: str | None) -> Settings:
    from memcli.config import load_settings

    return load_settings(db)


@contextmanager
def _model(
    memory: Memory, settings: Settings, command: str, *, disabled: bool = False, what: str = ""
) -> Iterator[Model | None]:
    from memcli.lifecycle.llm_usage import NO_LLM, NO_LLM_HINT, make_model

    model = None if disabled else make_model(memory.db, settings.llm, command)
    if model is None:
        # One line, so a cron mail says plainly that no model ran.
        reason = "--no-llm given" if disabled else f"{NO_LLM} ({NO_LLM_HINT})"
        warn(f"{reason}: {command} {what}")
    try:
        yield model
    finally:
        if model is not None:
            model.close()


@contextmanager
def _locked_run(
    memory: Memory, settings: Settings, command: str, dry_run: bool
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """The command's lock and its `lifecycle_runs` row (neither for a dry run)."""
    from memcli.lifecycle.runlock import run_lock
    from memcli.models import utcnow
    from memcli.store import lifecycle as lsql

    result: dict[str, Any] = {}
    if dry_run:
        yield None, result
        return
    with run_lock(memory.db, command, settings.lifecycle.lock_minutes) as lock:
        with memory.db.transaction():
            run_id = lsql.start_run(memory.db, command, None, None, utcnow())
        status = "failed"
        try:
            yield lock, result
            report = result.get("report", {})
            status = (
                "stopped" if report.get("stopped") else ("failed" if report.get("errors") else "ok")
            )
        finally:
            counts = {
                k: (len(v) if isinstance(v, list) else v)
                for k, v in result.get("report", {}).items()
                if k in ("sessions", "created", "decayed", "purged", "errors")
            }
            try:
                with memory.db.transaction():
                    lsql.finish_run(memory.db, run_id, status, counts, utcnow())
            except MemcliError:
                pass  # bookkeeping only: never mask the run's own outcome


def _finish(
    report: dict[str, Any], fmt: Any, as_json: bool, text: Callable[[dict[str, Any]], None]
) -> None:
    """Print the report; problems go to stderr, and a model failure makes the exit code 1."""
    emit(report, resolve_format(fmt, as_json), text)
    for err in report.get("errors", []):
        where = err.get("session_id") or err.get("user_id") or ""
        warn(f"{where}: {err.get('task', 'llm')}: {err['reason']}".lstrip(": "))
    for app_report in report.get("compaction", []):
        for action in app_report.get("actions", []):
            if action.get("fallback_because") and action["fallback_because"] != "no LLM configured":
                warn(
                    f"app {app_report['app_id']}: compaction fell back to FIFO: "
                    f"{action['fallback_because']}"
                )
    stopped = report.get("stopped")
    if stopped:
        warn(f"stopped early: {stopped}")
    budget = stopped and "budget" in stopped
    if report.get("errors") and not budget:
        raise typer.Exit(1)


def _consolidate_text(r: dict[str, Any]) -> None:
    verb = "would consolidate" if r["dry_run"] else "consolidated"
    print(f"{verb} {len(r['sessions'])} session(s) [{r['method']}]")
    for s in r["sessions"]:
        if r["dry_run"]:
            print(
                f"  {s['session_id']}: +{len(s['add'])} merge {len(s['merge'])} "
                f"supersede {len(s['supersede'])} proposals {len(s['proposals'])}"
            )
        else:
            print(
                f"  {s['session_id']}: +{len(s['added'])} merged {len(s['merged'])} "
                f"superseded {len(s['superseded'])} proposals {len(s['proposals'])}"
            )
        if s.get("capped"):
            print(f"    {len(s['capped'])} write(s) over a cap: {s['capped'][0]['reason']}")
    for d in r.get("deferred", []):
        print(f"  {d['session_id']}: waits for tomorrow ({d['reason']})")
    for a in r["compaction"]:
        print(
            f"  app {a['app_id']}: {a['before']} -> {a.get('after', a['before'])} "
            f"(limit {a['limit']})"
        )


def _created_text(r: dict[str, Any]) -> None:
    for item in r["created"]:
        print(f"{item.get('id', '(dry run)')}: {item['text']}")
    for item in r["skipped"]:
        print(f"skipped {item['user_id']}: {item['reason']}")


def register(app: typer.Typer) -> None:
    @app.command("consolidate")
    def consolidate_cmd(
        session: Annotated[
            str | None,
            typer.Option(
                "--session", help="Consolidate this session now, even if it is still open."
            ),
        ] = None,
        tenant: TenantOpt = None,
        user: UserOpt = None,
        idle_hours: Annotated[
            float | None,
            typer.Option(
                "--idle-hours", min=0, help="Also take a user's latest session once idle this long."
            ),
        ] = None,
        no_llm: Annotated[
            bool,
            typer.Option("--no-llm", help="Model-free parts only, even with a model configured."),
        ] = False,
        dry_run: DryRunOpt = False,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Turn finished sessions into deduplicated facts and summaries (cron: nightly)."""
        from memcli.cli.progress import progress_bar
        from memcli.lifecycle.consolidate import consolidate

        with errors():
            settings = _settings(db)
            with (
                open_memory(db, settings=settings, exists=True) as memory,
                _model(
                    memory,
                    settings,
                    "consolidate",
                    disabled=no_llm,
                    what="writes extractive summaries, deduplicates and links; no facts",
                ) as model,
                _locked_run(memory, settings, "consolidate", dry_run) as (lock, result),
                progress_bar() as progress,
            ):
                result["report"] = consolidate(
                    memory,
                    model,
                    settings.lifecycle,
                    tenant_id=tenant,
                    user_id=user,
                    session_id=session,
                    idle_hours=idle_hours,
                    dry_run=dry_run,
                    lock=lock,
                    progress=progress,
                )
            _finish(result["report"], fmt, as_json, _consolidate_text)

    @app.command("decay")
    def decay_cmd(
        purge_expired: Annotated[
            bool,
            typer.Option(
                "--purge-expired", help="Also hard-delete soft-deleted memories past purge_at."
            ),
        ] = False,
        threshold: Annotated[
            float | None,
            typer.Option(
                "--threshold",
                min=0,
                max=1,
                help="Soft-delete below this confidence (default 0.05).",
            ),
        ] = None,
        dry_run: DryRunOpt = False,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Ebbinghaus decay and the TTL rule; pinned and protected memories never change."""
        from memcli.lifecycle.decay import apply_decay, plan_decay

        with errors():
            settings = _settings(db)
            with (
                open_memory(db, with_embedder=False, settings=settings, exists=True) as memory,
                _locked_run(memory, settings, "decay", dry_run) as (_lock, result),
            ):
                run = plan_decay if dry_run else apply_decay
                result["report"] = run(
                    memory.db, settings.lifecycle, threshold=threshold, purge_expired=purge_expired
                )
            _finish(
                result["report"],
                fmt,
                as_json,
                lambda r: print(
                    f"{'would decay' if r['dry_run'] else 'decayed'} {r['decayed']}; soft-deleted "
                    f"{r['soft_deleted']['decay']} (confidence) + {r['soft_deleted']['ttl']} (TTL);"
                    f" purged {r['purged']}"
                ),
            )

    app.command("reflect")(_reflection_command(
        "reflect", "Weekly reflection per user over the last 7 days of facts (cron: weekly)."))
    app.command("insights")(_reflection_command(
        "insights",
        "1-3 relationship and preference insights per active user (at most once a day)."))

    @app.command("remember")
    def remember_cmd(
        text: Annotated[
            str | None,
            typer.Argument(help="The fact (or steps); `-` reads stdin.", show_default=False),
        ] = None,
        procedural: Annotated[
            bool, typer.Option("--procedural", help="Numbered how-to steps (lines, `;` or --step).")
        ] = False,
        step: Annotated[
            list[str] | None, typer.Option("--step", help="One step of a procedure (repeatable).")
        ] = None,
        title: Annotated[str | None, typer.Option("--title", help="A procedure's title.")] = None,
        field: Annotated[
            str | None,
            typer.Option(
                "--field",
                help="A sensitive profile field (preferred_name, pronouns, city, "
                "language): queued for consent.",
            ),
        ] = None,
        tenant: Annotated[str | None, typer.Option(
            "--tenant", help="Tenant (default: the configured one).")] = None,
        user: Annotated[str | None, typer.Option("--user")] = None,
        agent_id: Annotated[str | None, typer.Option("--agent-id")] = None,
        session: Annotated[str | None, typer.Option("--session")] = None,
        app_id: Annotated[str | None, typer.Option("--app")] = None,
        category: Annotated[str | None, typer.Option("--category")] = None,
        importance: Annotated[float | None, typer.Option("--importance", min=0, max=1)] = None,
        pin: Annotated[bool, typer.Option("--pin", help="Pin it.")] = False,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Store a fact or a procedure on explicit request (near-duplicates are merged)."""
        from memcli.lifecycle.remember import remember

        with errors():
            if text == "-":
                text = check_text(read_stdin(), "the text on stdin")
            if text is None and not step:
                from memcli.errors import UsageError

                raise UsageError("nothing to remember", "give TEXT, `-` for stdin, or --step")
            settings = _settings(db)
            with open_memory(db, settings=settings) as memory:
                out = remember(
                    memory,
                    settings.lifecycle,
                    text=text,
                    procedural=procedural,
                    steps=step,
                    field=field,
                    tenant_id=tenant,
                    user_id=user,
                    agent_id=agent_id,
                    session_id=session,
                    app_id=app_id,
                    category=category,
                    importance=importance,
                    pinned=pin,
                    title=title,
                )
            warn_redacted(out)
            emit(
                out,
                resolve_format(fmt, as_json),
                lambda p: print(f"{p['status']}: {p.get('id', p.get('proposal_id'))}"),
            )

    @app.command("confirm")
    def confirm_cmd(
        memory_id: MemoryIdArg,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Protect a memory: confidence 1, decay_rate 0 (decay never touches it again)."""
        from memcli.lifecycle.remember import confirm

        with errors(), open_memory(db, with_embedder=False, exists=True) as memory:
            emit(
                confirm(memory, memory_id, owner=memory.owner()),
                resolve_format(fmt, as_json),
                lambda p: print(f"protected {p['id']}"),
            )

    app.command("pin")(_pin_command(True))
    app.command("unpin")(_pin_command(False))
    app.add_typer(_proposals_app(), name="proposals")


def _reflection_command(name: str, doc: str) -> Callable[..., None]:
    """`reflect` and `insights`: the same per-user LLM job shape, run under a lock."""

    def command(
        tenant: TenantOpt = None,
        user: UserOpt = None,
        force: ForceOpt = False,
        dry_run: DryRunOpt = False,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        from memcli.lifecycle import reflect as jobs

        job = getattr(jobs, name)
        with errors():
            settings = _settings(db)
            with (
                open_memory(db, settings=settings, exists=True) as memory,
                _model(memory, settings, name, what="needs a model; skipped") as model,
                _locked_run(memory, settings, name, dry_run) as (_lock, result),
            ):
                result["report"] = job(
                    memory,
                    model,
                    settings.lifecycle,
                    tenant_id=tenant,
                    user_id=user,
                    force=force,
                    dry_run=dry_run,
                )
            _finish(result["report"], fmt, as_json, _created_text)

    command.__doc__ = doc
    command.__name__ = f"{name}_cmd"
    return command


def _pin_command(flag: bool) -> Callable[..., None]:
    def pin_cmd(
        memory_id: MemoryIdArg,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        from memcli.lifecycle.remember import set_pin

        with errors(), open_memory(db, with_embedder=False, exists=True) as memory:
            emit(
                set_pin(memory, memory_id, flag, owner=memory.owner()),
                resolve_format(fmt, as_json),
                lambda p: print(f"{'pinned' if p['pinned'] else 'unpinned'} {p['id']}"),
            )

    pin_cmd.__doc__ = (
        "Pin a memory: decay, TTL and app compaction leave it alone."
        if flag
        else "Unpin a memory (decay and TTL apply again)."
    )
    return pin_cmd


def _proposals_app() -> typer.Typer:
    sub = typer.Typer(
        help="Consent for sensitive profile changes: list, accept, reject.", no_args_is_help=True
    )

    @sub.command("list")
    def list_cmd(
        status: Annotated[
            str, typer.Option("--status", help="pending, accepted, rejected, expired or all.")
        ] = "pending",
        tenant: TenantOpt = None,
        user: UserOpt = None,
        limit: Annotated[int, limit_option()] = 100,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Proposed changes to preferred name, pronouns, city, language (pending: 7 days)."""
        from memcli.lifecycle.proposals import list_proposals

        with errors(), open_memory(db, with_embedder=False, must_exist=True) as memory:
            rows = list_proposals(
                memory.db,
                status=None if status == "all" else status,
                tenant_id=tenant,
                user_id=user,
                limit=limit,
            )
            emit(
                rows,
                resolve_format(fmt, as_json),
                lambda rs: [
                    print(
                        f"{r['id']}  {r['status']:<8} {r['user_id']} {r['field']}: "
                        f"{r['old_text'] or '(none)'} -> {r['text']}"
                    )
                    for r in rs
                ],
            )

    @sub.command("accept")
    def accept_cmd(
        proposal_id: Annotated[int, id_argument("A proposal id.")],
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Apply a proposal: write the new profile fact, supersede the old one."""
        from memcli.lifecycle.proposals import accept

        with errors(), open_memory(db, exists=True) as memory:
            emit(
                accept(memory, proposal_id, owner=memory.owner()),
                resolve_format(fmt, as_json),
                lambda p: print(f"accepted {p['id']}: memory {p['memory_id']}"),
            )

    @sub.command("reject")
    def reject_cmd(
        proposal_id: Annotated[int, id_argument("A proposal id.")],
        reason: Annotated[str | None, typer.Option("--reason")] = None,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Refuse a proposal (recorded in history; nothing changes)."""
        from memcli.lifecycle.proposals import reject

        with errors(), open_memory(db, with_embedder=False, exists=True) as memory:
            emit(
                reject(memory.db, proposal_id, owner=memory.owner(), reason=reason),
                resolve_format(fmt, as_json),
                lambda p: print(f"rejected {p['id']}"),
            )

    return sub
