"""`memcli decision add|supersede|list`, `memcli task add|update|list`,
`memcli checkpoint save|load`: options built from the ledger's request models
(memcli.operations.ledger_ops), the flags of before kept as hidden aliases."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import DbOpt, FormatOpt, JsonOpt, check_flags, id_argument, request_options
from memcli.cli.output import emit, errors, read_stdin, resolve_format, warn_redacted
from memcli.errors import UsageError
from memcli.operations.ledger_requests import (
    CheckpointLoad,
    CheckpointSave,
    DecisionRequest,
    DecisionsQuery,
    TaskRequest,
    TasksQuery,
)

# The flags of before: singular where the field is a list, `--agent` for agent_id.
OLD = {"constraints": "--constraint", "alternatives": "--alternative",
       "consequences": "--consequence", "refs": "--ref", "agent_id": "--agent",
       "thread_id": "--thread"}
# What a write's own request leaves to the command's arguments, or to the other operation.
ADD_ONLY = ("scope", "user_id", "session_id", "agent_id", "app_id", "channel", "sensitivity")

AllTenants = Annotated[
    bool, typer.Option("--all-tenants", help="List every tenant's (an operator's view).")
]


def _decision_text(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        tail = f" (superseded by D{r['superseded_by']})" if r["superseded_by"] else ""
        print(f"D{r['id']} [{r['status']}, {r['scope']}] {r['decision']}{tail}")


def _task_text(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        print(f"T{r['id']} [{r['status']}] {r['title']}")


def _one(row: dict[str, Any], fmt: Any, as_json: bool, render: Any) -> None:
    warn_redacted(row)
    emit(row, resolve_format(fmt, as_json), lambda r: render([r]))


def _request(model: Any, given: dict[str, Any], what: str, **fixed: Any) -> Any:
    """The command's flags (and arguments, `fixed`) as the validated request `model`."""
    from memcli.operations.requests import validated

    check_flags(given)
    return validated(model, {**given, **fixed}, what)


@request_options(DecisionRequest, skip=("decision", "supersedes", "reason"),
                 legacy=OLD, short={"rationale": "-r"})
def decision_add(
    text: Annotated[str, typer.Argument(help="What was decided.")],
    *, given: dict[str, Any], db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Record a decision (active) with its rationale, trade-offs and evidence."""
    from memcli.operations.ledger_ops import record_decision

    with errors(), open_memory(db) as memory:  # opened first, as a write always did
        req = _request(DecisionRequest, given, "decision", decision=text)
        _one(record_decision(memory, req), fmt, as_json, _decision_text)


@request_options(DecisionRequest, skip=("decision", "supersedes", *ADD_ONLY),
                 legacy=OLD, short={"rationale": "-r"})
def decision_supersede(
    decision_id: Annotated[int, id_argument("The decision it replaces.")],
    text: Annotated[str, typer.Argument(help="The new decision.")],
    *, given: dict[str, Any], db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Replace a decision: the old one stays, marked superseded and linked to the new."""
    from memcli.operations.ledger_ops import record_decision

    with errors():
        req = _request(DecisionRequest, given, "decision", decision=text,
                       supersedes=decision_id)
        with open_memory(db, exists=True) as memory:
            row = record_decision(memory, req, owner=memory.owner(req.tenant_id))
            _one(row, fmt, as_json, _decision_text)


@request_options(DecisionsQuery)
def decision_list(
    *, given: dict[str, Any], all_tenants: AllTenants = False, db: DbOpt = None,
    fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """List decisions, newest first (--status all shows superseded ones and their links)."""
    from memcli.operations.ledger_ops import query_decisions

    with errors():
        req = _request(DecisionsQuery, given, "decisions query")
        with open_memory(db, with_embedder=False, must_exist=True) as memory:
            rows = query_decisions(memory, req, all_tenants=all_tenants)
        emit(rows, resolve_format(fmt, as_json), _decision_text)


@request_options(TaskRequest, skip=("task_id", "title"), legacy=OLD)
def task_add(
    title: Annotated[str, typer.Argument(help="What to do.")],
    *, given: dict[str, Any], db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Add a task."""
    from memcli.operations.ledger_ops import record_task

    with errors(), open_memory(db) as memory:  # opened first, as a write always did
        req = _request(TaskRequest, given, "task", title=title)
        _one(record_task(memory, req), fmt, as_json, _task_text)


@request_options(TaskRequest, skip=("task_id", *ADD_ONLY), legacy=OLD)
def task_update(
    task_id: Annotated[int, id_argument("A task id.")],
    *, given: dict[str, Any], db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Change a task's status, title, details or evidence (the history keeps each version)."""
    from memcli.operations.ledger_ops import record_task

    with errors():
        req = _request(TaskRequest, given, "task", task_id=task_id)
        with open_memory(db, exists=True) as memory:
            row = record_task(memory, req, owner=memory.owner(req.tenant_id))
            _one(row, fmt, as_json, _task_text)


@request_options(TasksQuery)
def task_list(
    *, given: dict[str, Any], all_tenants: AllTenants = False, db: DbOpt = None,
    fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """List tasks, newest first."""
    from memcli.operations.ledger_ops import query_tasks

    with errors():
        req = _request(TasksQuery, given, "tasks query")
        with open_memory(db, with_embedder=False, must_exist=True) as memory:
            rows = query_tasks(memory, req, all_tenants=all_tenants)
        emit(rows, resolve_format(fmt, as_json), _task_text)


@request_options(CheckpointSave, legacy=OLD)
def checkpoint_save(
    source: Annotated[
        str | None, typer.Argument(help="A JSON file, or `-` for stdin.", show_default=False)
    ] = None,
    *, given: dict[str, Any],
    data: Annotated[str | None, typer.Option("--data", help="The state as JSON text.")] = None,
    db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Save an agent's state (any JSON) for (user, thread), replacing the previous one."""
    import json

    from memcli.core.inputs import check_text
    from memcli.operations.ledger_ops import save_checkpoint

    with errors():
        req = _request(CheckpointSave, given, "checkpoint")
        if (source is None) == (data is None):
            raise UsageError("give the state once", "a file, `-` for stdin, or --data")
        if data is None:
            data = (check_text(read_stdin(), "the state on stdin") if source == "-"
                    else Path(str(source)).read_text(encoding="utf-8"))
        try:
            state = json.loads(data)
        except json.JSONDecodeError as exc:
            raise UsageError(f"checkpoint state is not JSON: {exc.msg}") from exc
        with open_memory(db, with_embedder=False) as memory:
            out = save_checkpoint(memory, state, req)
        warn_redacted(out)
        emit(out, resolve_format(fmt, as_json), lambda r: print(
            f"saved checkpoint v{r['version']} for {r['user_id']}/{r['thread_id']}"))


@request_options(CheckpointLoad, legacy=OLD)
def checkpoint_load(
    *, given: dict[str, Any], db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Print the saved state of (user, thread) with its version and time."""
    from memcli.operations.ledger_ops import load_checkpoint

    with errors():
        req = _request(CheckpointLoad, given, "checkpoint")
        with open_memory(db, with_embedder=False, must_exist=True) as memory:
            emit(load_checkpoint(memory, req), resolve_format(fmt, as_json))


def register(app: typer.Typer) -> None:
    groups = {
        "decision": ("The decision ledger: what was decided, why, and what replaced it.",
                     {"add": decision_add, "supersede": decision_supersede,
                      "list": decision_list}),
        "task": ("Tasks an agent is working on (open, doing, done).",
                 {"add": task_add, "update": task_update, "list": task_list}),
        "checkpoint": ("An agent's saved state per (user, thread), for resuming.",
                       {"save": checkpoint_save, "load": checkpoint_load}),
    }
    for name, (text, commands) in groups.items():
        group = typer.Typer(help=text, no_args_is_help=True)
        for word, command in commands.items():
            group.command(word)(command)
        app.add_typer(group, name=name)
