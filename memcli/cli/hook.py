"""`memcli hook session-start` and `memcli hook record`: commands for a coding agent's hooks
(Claude Code, Codex). They read the agent's hook JSON on stdin (see memcli/service/hooks.py).

A hook must never break the agent's session: whatever goes wrong (no database, bad input, a
bug), the error is appended to `<data dir>/hooks.log` and the command exits 0 with empty
output (for session-start: no extra context). `--strict` exits non-zero instead, for tests
and for debugging a setup.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from memcli.cli.mcp import OLD_IDENTITY, AgentOpt, AppOpt, TenantOpt, UserOpt
from memcli.cli.options import DbOpt, old_spellings
from memcli.core import private

StrictOpt = Annotated[bool, typer.Option(
    "--strict", help="Fail (exit 1, message on stderr) instead of logging and exiting 0.")]


def _log(where: str, exc: BaseException) -> None:
    """One line per swallowed error in the hooks log (never raises)."""
    try:
        from datetime import UTC, datetime

        from memcli.config import hook_log_path

        path = hook_log_path()
        private.make_dirs(path.parent)
        line = f"{datetime.now(UTC).isoformat(timespec='seconds')} hook {where}: " \
               f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}\n"
        with private.open_private(path, "a") as log:
            log.write(line)
    except Exception:  # noqa: BLE001, S110 - nowhere left to report to
        pass


def _run(where: str, strict: bool, body: Any) -> None:
    try:
        body()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - a hook must not break the session
        if strict:
            from memcli.cli.output import errors

            with errors():
                raise
        _log(where, exc)
    raise typer.Exit(0)


def _read_payload() -> dict[str, Any]:
    from memcli.service.hooks import parse_payload

    data = sys.stdin.buffer.read() if not sys.stdin.isatty() else b""
    return parse_payload(data.decode("utf-8", errors="replace"))


def _call(db: str | None, operation: Any, scope: Any, request: Any) -> Any:
    """One api operation on a Service opened for this hook and closed after it."""
    from memcli.config import load_settings
    from memcli.service.api import Service

    service = Service(load_settings(db))
    try:
        return service.run(operation, scope, request)
    finally:
        service.close()


def _scope(tenant: str | None, user: str | None, agent: str | None, app_id: str | None) -> Any:
    from memcli.service.api import Binding

    return Binding(tenant=tenant, user_id=user, agent=agent, app_id=app_id)


@old_spellings({**OLD_IDENTITY, "budget_tokens": "--max-tokens"})
def session_start_cmd(
    db: DbOpt = None, tenant_id: TenantOpt = None, user_id: UserOpt = None,
    agent_id: AgentOpt = None, app_id: AppOpt = None,
    budget_tokens: Annotated[int, typer.Option(
        "--budget-tokens", min=1, help="Budget of the injected bundle.")] = 4000,
    query: Annotated[str | None, typer.Option(
        "--query", help="What to retrieve evidence for (default: the project folder's "
                        "name, from the hook's cwd).")] = None,
    strict: StrictOpt = False,
) -> None:
    """SessionStart: print a context bundle as the agent's additional context."""
    def body() -> None:
        import json

        from memcli.service import api
        from memcli.service.hooks import session_context, session_topic

        payload = _read_payload()
        request: dict[str, Any] = {"budget_tokens": budget_tokens}
        # Not the session's id: a bundle for a session narrows its evidence to that
        # session, and a new one has none yet.
        topic = query or session_topic(payload)
        if topic:
            request["query"] = topic
        bundle = _call(db, api.build_acb, _scope(tenant_id, user_id, agent_id, app_id), request)
        print(json.dumps(session_context(bundle), ensure_ascii=False))

    _run("session-start", strict, body)


@old_spellings(OLD_IDENTITY)
def record_cmd(
    db: DbOpt = None, tenant_id: TenantOpt = None, user_id: UserOpt = None,
    agent_id: AgentOpt = None, app_id: AppOpt = None, strict: StrictOpt = False,
) -> None:
    """UserPromptSubmit / Stop / SessionEnd: record the conversation's turns as events
    (idempotent: a turn already recorded is skipped). Prints nothing."""
    def body() -> None:
        from memcli.service import api
        from memcli.service.hooks import turns_from

        turns = turns_from(_read_payload())
        if not turns:
            return
        receipts = _call(db, api.record_events, _scope(tenant_id, user_id, agent_id, app_id),
                         turns)
        problems = [p for r in receipts for p in r["rejected"]]
        if problems:
            raise ValueError(f"{len(problems)} turn(s) rejected: {problems[0]}")

    _run("record", strict, body)


def register(app: typer.Typer) -> None:
    hook_app = typer.Typer(help="Commands for a coding agent's hooks (read the hook JSON on "
                                "stdin; never fail the agent: errors go to hooks.log, exit 0).",
                           no_args_is_help=True)

    hook_app.command("session-start")(session_start_cmd)
    hook_app.command("record")(record_cmd)
    app.add_typer(hook_app, name="hook")
