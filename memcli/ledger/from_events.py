"""Ledger rows from events: a `decision` event is a decision, a `task_update` event a task.

The Agent Memory System PRD (7.3) lets an agent record a decision as an event of kind
`decision` instead of calling POST /decisions, and create or change a task with an event of kind
`task_update`. Ingest writes the ledger row in the same transaction as the event itself (on
either engine): the event is the ground truth, the row cites it (the event id is the first of
its refs), and a record whose ledger write fails is rejected whole. A repeated event (same id
or content) writes nothing again.

The fields, read from the event's `content` (redacted with the rest of the event):
- `decision`: `decision` (or `text`), the decision itself; `rationale`, `constraints`,
  `alternatives`, `consequences`: a string or a list of strings each; `scope`: project (the
  default), user or global; `supersedes`: the id of the active decision it replaces.
- `task_update`: `task_id`, the task to change (without it, a new task); `title` (or `text`,
  needed for a new task); `details`; `status`: open (a new task's default), doing or done.
The event's own `refs` follow its id in the row's refs; its tenant, user, session, agent, app,
channel and sensitivity are the row's. A `secret` event writes no row: its content is never
stored. A row of an app is held to the app memory limit as `decision add --app` is (FIFO, in
the record's transaction; `compaction` in the ingest report's `ledger` entry when it acted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memcli.core.records import COMMAND_KIND
from memcli.derived import writer
from memcli.errors import UsageError, ValidationError
from memcli.ledger import entries
from memcli.store import owner

if TYPE_CHECKING:
    from memcli.core.records import EventIn
    from memcli.store.handle import MemoryHandle

LEDGER_KINDS = ("decision", "task_update")
_DECISION_LISTS = ("rationale", "constraints", "alternatives", "consequences")


@dataclass
class LedgerEvent:
    """One event's ledger write: its fields (from `parse`), then prepared before the write
    lock (`prepare`: checked against the stored ledger, encoded), then written (`store`)."""

    kind: str
    event_id: str
    fields: dict[str, Any]
    scope: dict[str, Any]
    memory: MemoryHandle | None = None
    pending: entries.PendingWrite | None = None
    task: dict[str, Any] | None = None  # the task a `task_update` changes
    text: str = ""  # the task text `pending` / `encoded` were computed for
    encoded: tuple[Any, Any] = (None, None)
    written: dict[str, Any] = field(default_factory=dict)  # {"event_id", "decision_id"|"task_id"}


def episode_text(kind: str, content: dict[str, Any]) -> str | None:
    """What the episode of a decision or task event says, when the event has no `text`."""
    if kind == "decision" and isinstance(content.get("decision"), str):
        row = {k: _strings(content.get(k)) for k in _DECISION_LISTS}
        return entries.decision_text({**row, "decision": content["decision"].strip()})
    if kind == "task_update" and isinstance(content.get("title"), str):
        return f"Task [{content.get('status') or 'open'}]: {content['title'].strip()}"
    if kind == "task_update" and content.get("task_id") is not None:
        said = [f"{k} {content[k]}" for k in ("status", "details") if content.get(k)]
        return f"Task {content['task_id']} update: {', '.join(said) or 'refs'}"
    return None


def parse(rec: EventIn, event_id: str, content: dict[str, Any]) -> LedgerEvent | None:
    """The ledger write an event asks for (None: not a ledger event, or a secret one);
    ValidationError when its fields are wrong, so the record is rejected before any write."""
    return _parsed(rec.kind, event_id, content, {
        "tenant_id": rec.tenant_id, "user_id": rec.user_id, "session_id": rec.session_id,
        "agent_id": rec.agent_id, "app_id": rec.app_id, "channel": rec.channel,
        "sensitivity": rec.sensitivity, "refs": rec.refs})


def from_row(event: dict[str, Any]) -> LedgerEvent | None:
    """`parse` of a stored event (its row of the events table), for `memcli rebuild`."""
    refs = json.loads(event["refs"]) if isinstance(event["refs"], str) else event["refs"]
    content = (json.loads(event["content"]) if isinstance(event["content"], str)
               else event["content"])
    scope = {k: event[k] for k in ("tenant_id", "user_id", "session_id", "agent_id", "app_id",
                                   "channel", "sensitivity")}
    if event["kind"] == COMMAND_KIND:
        return _from_command(event["event_id"], content, {**scope, "refs": refs})
    return _parsed(event["kind"], event["event_id"], content, {**scope, "refs": refs})


# The ledger writes of memcli's own commands (memcli.ledger.commands) and the event kind each
# reads as. Their refs are the row's as given (no event id first: the command is not evidence).
_COMMAND_OPS = {"decision.add": "decision", "decision.supersede": "decision",
                "task.add": "task_update", "task.update": "task_update"}


def _from_command(event_id: str, content: dict[str, Any],
                  scope: dict[str, Any]) -> LedgerEvent | None:
    kind = _COMMAND_OPS.get(str(content.get("op")))
    if kind is None or scope["sensitivity"] == "secret":
        return None
    refs = [str(r) for r in scope["refs"] or [] if isinstance(r, str | int)]
    if kind == "task_update":
        return LedgerEvent(kind, event_id, _task_fields(content), {**scope, "refs": refs})
    fields = _decision_fields(content)
    fields["importance"] = content.get("importance", entries.DECISION_IMPORTANCE)
    return LedgerEvent(kind, event_id, fields, {**scope, "refs": refs})


def _parsed(kind: str, event_id: str, content: dict[str, Any],
            scope: dict[str, Any]) -> LedgerEvent | None:
    if kind not in LEDGER_KINDS or scope["sensitivity"] == "secret":
        return None
    refs = scope["refs"] or []
    scope = {**scope, "refs": [event_id, *(str(r) for r in refs if isinstance(r, str | int))]}
    if kind == "decision":
        return LedgerEvent(kind, event_id, _decision_fields(content), scope)
    return LedgerEvent(kind, event_id, _task_fields(content), scope)


def _decision_fields(content: dict[str, Any]) -> dict[str, Any]:
    decision = _text(content, "decision", fallback="text")
    if not decision:
        raise ValidationError("a decision event needs content.decision (or content.text)")
    scope = content.get("scope", "project")
    if scope not in entries.DECISION_SCOPES:
        raise ValidationError(f"content.scope: use project, user or global, not {scope!r}")
    fields: dict[str, Any] = {"decision": decision, "scope": scope,
                              "supersedes": _id(content, "supersedes")}
    for key in _DECISION_LISTS:
        fields[key] = _strings(content.get(key), key)
    return fields


def _task_fields(content: dict[str, Any]) -> dict[str, Any]:
    task_id = _id(content, "task_id")
    # `text` names a new task; an update's text is what was said about it, not a new title.
    title = _text(content, "title", fallback="text" if task_id is None else "title")
    if task_id is None and not title:
        raise ValidationError("a task_update event needs content.task_id or content.title")
    status = content.get("status")
    if status is not None and status not in entries.TASK_STATUSES:
        raise ValidationError(f"content.status: use open, doing or done, not {status!r}")
    details = content.get("details")
    if details is not None and not isinstance(details, str):
        raise ValidationError("content.details must be a string")
    return {"task_id": task_id, "title": title, "details": details, "status": status}


def _text(content: dict[str, Any], key: str, *, fallback: str) -> str | None:
    value = content.get(key, content.get(fallback))
    if value is not None and not isinstance(value, str):
        raise ValidationError(f"content.{key} must be a string")
    return value.strip() if value and value.strip() else None


def _strings(value: Any, key: str = "") -> list[str]:
    if value is None:
        return []
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValidationError(f"content.{key} must be a string or a list of strings")
    return [v.strip() for v in values if v.strip()]


def _id(content: dict[str, Any], key: str) -> int | None:
    value = content.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"content.{key} must be a positive integer (a ledger id)")
    return value


def prepare(memory: MemoryHandle, event: LedgerEvent) -> None:
    """Check the write against the stored ledger and encode its text, before the write lock
    (UsageError / NotFoundError: the record is rejected)."""
    event.memory = memory
    scope = {k: v for k, v in event.scope.items() if k != "channel"}
    actor = event.scope["agent_id"] or "memcli"
    if event.kind == "decision":
        old = event.fields["supersedes"]
        if old is not None:
            _active_decision(memory, old, event.scope["tenant_id"])
        event.pending = entries.prepare_decision(
            memory, channel=event.scope["channel"], actor=actor,
            attributes={"event_id": event.event_id}, **event.fields, **scope)
        return
    fields = event.fields
    if fields["task_id"] is None:
        event.pending = entries.prepare_task(
            memory, fields["title"], details=fields["details"] or "",
            status=fields["status"] or "open", channel=event.scope["channel"], actor=actor,
            attributes={"event_id": event.event_id}, **scope)
        return
    event.task = _task(memory, fields["task_id"], event.scope["tenant_id"])
    changes, _ = _changes(event, event.task)
    event.text = entries.task_text({**event.task, **changes})
    event.encoded = writer.encode_ahead(memory, [event.text])[event.text]


def store(event: LedgerEvent) -> None:
    """Write the prepared row (inside ingest's transaction; an error rolls the record back)."""
    memory = event.memory
    if memory is None:
        raise RuntimeError("a ledger event was not prepared")
    written: dict[str, Any] = {"event_id": event.event_id}
    task: dict[str, Any] = {}
    if event.kind == "decision" and event.pending is not None:
        old = event.fields["supersedes"]
        if old is None:
            written["decision_id"] = entries.store_decision(memory, event.pending)
        else:
            row = _active_decision(memory, old, event.scope["tenant_id"])
            written["decision_id"] = entries.store_superseding(
                memory, event.pending, row, f"event {event.event_id}")
    elif event.pending is not None:
        written["task_id"] = entries.store_task(memory, event.pending)
    else:
        task = _task(memory, event.fields["task_id"], event.scope["tenant_id"])  # under lock
        changes, _ = _changes(event, task)
        text = entries.task_text({**task, **changes})
        encoded = event.encoded if text == event.text else (None, None)  # changed meanwhile
        entries.store_task_update(memory, task, changes, encoded,
                                 reason=f"event {event.event_id}",
                                 actor=event.scope["agent_id"] or "memcli",
                                 extra={"event_id": event.event_id})
        written["task_id"] = task["id"]
    # The app memory limit holds after an event's write as after `decision add --app` (a
    # task update's new version is in the task's scope).
    scope_row = event.pending.row if event.pending is not None else task
    event.written = {**written, **entries.app_limit(memory, scope_row)}


def _changes(event: LedgerEvent, task: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The task's changes; the event's refs always join (an update with nothing else new
    still cites the event that confirmed it)."""
    fields = event.fields
    return entries.task_changes(task, status=fields["status"], title=fields["title"],
                               details=fields["details"], refs=event.scope["refs"])


def _active_decision(memory: MemoryHandle, decision_id: int, tenant_id: str) -> dict[str, Any]:
    row = owner.decision(memory.db, decision_id, memory.owner(tenant_id))
    if row["status"] != "active":
        raise UsageError(
            f"decision {decision_id} is already superseded by {row['superseded_by']}",
            f"supersede decision {row['superseded_by']} instead")
    return row


def _task(memory: MemoryHandle, task_id: int, tenant_id: str) -> dict[str, Any]:
    return owner.task(memory.db, task_id, memory.owner(tenant_id))
