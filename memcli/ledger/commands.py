"""Every write is an event: the `command` event a write of memcli's own records first.

`remember`, `correct`, `decision add` / `supersede`, `task add` / `update`, `checkpoint save`,
`forget`, `restore`, `pin`, `unpin`, `confirm` and `proposals accept` / `reject` (and every
route, MCP tool and page that calls them) append one event of kind `command` and derive their
rows from it, in one transaction:
the rows carry the event's time (`memcli.core.records.write_time`), and the memory a command
creates names the event in its ADD history row. `memcli rebuild` derives the same rows from
the same events (memcli/lifecycle/rebuild_commands.py, and the ledger stage for decisions and
tasks), so a database whose memories, ledger and checkpoints are lost comes back whole.

The event: `kind` `command`; `content.op` names the write, the other keys of `content` are its
fields (`OPS`); the scope columns (tenant, user, agent, session, app, run), `channel` and
`sensitivity` are the written row's (a `high` event's content is stored encrypted, like the
row); `refs` are the row's refs (decisions and tasks); `actor_type` is `memcli` and `actor_id`
who asked (the history rows' actor). A command event is never cut into an episode, never counts
in a session's events, and is not a record `ingest` accepts: only memcli writes one. A purge
takes it with its scope (its scope columns), or with the memory it created (`purge --memory`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from memcli.core.records import COMMAND_KIND, utcnow, write_time
from memcli.store import events

if TYPE_CHECKING:
    from memcli.store.connection import Database

# op -> what its content holds besides `op` (the docs' event model lists the same).
OPS: dict[str, str] = {
    "remember": "text, memory_kind (fact or procedural), category, importance, pinned, "
    "decay_rate, attributes; merged_into: the memory it joined, when it merged; field: the "
    "profile field a consent proposal was queued for",
    "correct": "memory_id (the memory corrected), text, memory_kind, category, importance, "
    "pinned, decay_rate, attributes, reason",
    "forget": "memory_id, purge_at, reason",
    "restore": "memory_id",
    "pin": "memory_id",
    "unpin": "memory_id",
    "confirm": "memory_id",
    "decision.add": "decision, rationale, constraints, alternatives, consequences, scope, "
    "importance (refs: the event's refs)",
    "decision.supersede": "decision.add's fields, supersedes (the decision replaced), reason",
    "task.add": "title, details, status (refs: the event's refs)",
    "task.update": "task_id, status, title, details, reason (refs: the event's refs)",
    "checkpoint.save": "thread_id, data",
    "proposal.accept": "proposal_id, and the profile fact's fields as remember's, with "
    "source_ids and event_time (when the cited turn was said)",
    "proposal.reject": "proposal_id, reason",
}
# The ops that write a decision or a task (the ledger stage of a rebuild replays them).
LEDGER_OPS = ("decision.add", "decision.supersede", "task.add", "task.update")
# The ops whose memory a rebuild derives from the event (remember's first write, correct, an
# accepted profile proposal).
MEMORY_OPS = ("remember", "correct", "proposal.accept")
_DECISION_FIELDS = ("decision", "rationale", "constraints", "alternatives", "consequences", "scope")
# The old_ref of the ADD history row of a memory a command created: with the row's event_id,
# it tells a rebuild which memory id each command event wrote.
ORIGIN = "command"


def record(
    db: Database,
    op: str,
    fields: dict[str, Any],
    *,
    tenant_id: str,
    user_id: str | None = None,
    agent_id: str | None = None,
    session_id: str | None = None,
    app_id: str | None = None,
    run_id: str | None = None,
    channel: str = "private",
    sensitivity: str = "none",
    refs: list[Any] | None = None,
    actor: str = "memcli",
) -> str:
    """Append the command's event (inside the caller's transaction), stamped `utcnow()` (the
    write's time under `recording`); its id."""
    if op not in OPS:
        raise ValueError(f"unknown command {op!r}")
    now = utcnow()
    event_id = f"cmd_{uuid.uuid4().hex}"
    content = {"op": op, **fields}
    events.insert_events(
        db,
        [
            {
                "event_id": event_id,
                "ts": now,
                "recorded_at": now,
                "tenant_id": tenant_id,
                "user_id": user_id,
                "agent_id": agent_id,
                "session_id": session_id,
                "app_id": app_id,
                "run_id": run_id,
                "channel": channel,
                "actor_type": "memcli",
                "actor_id": actor,
                "kind": COMMAND_KIND,
                "sensitivity": sensitivity,
                "tags": [],
                "content": content,
                "refs": list(refs or []),
                # Unique per event (the column is): two identical writes are two events.
                "content_hash": hashlib.sha256(event_id.encode()).hexdigest(),
                "redactions": [],
            }
        ],
    )
    return event_id


@contextmanager
def recording(db: Database, op: str, fields: dict[str, Any], **scope: Any) -> Iterator[str]:
    """Inside the caller's transaction: the command's event first (`record`), then the block,
    every row it writes stamped with the event's time; yields the event id."""
    with write_time(utcnow()):
        yield record(db, op, fields, **scope)


def for_row(
    db: Database,
    op: str,
    fields: dict[str, Any],
    row: dict[str, Any],
    *,
    channel: str,
    sensitivity: str,
) -> AbstractContextManager[str]:
    """`recording` for a decision or task write: the row's scope and refs, its agent (else
    memcli) as the actor."""
    return recording(
        db,
        op,
        fields,
        channel=channel,
        sensitivity=sensitivity,
        refs=list(row.get("refs") or []),
        actor=row.get("agent_id") or "memcli",
        **{k: row.get(k) for k in ("tenant_id", "user_id", "agent_id", "session_id", "app_id")},
    )


@contextmanager
def for_pending(db: Database, op: str, pending: Any, **extra: Any) -> Iterator[str]:
    """`for_row` for a checked, redacted decision or task about to be written
    (`memcli.ledger.entries.PendingWrite`): the event holds its fields, and the memory it
    derives names the event (its attributes, so its ADD history row does)."""
    row = pending.row
    decision = op.startswith("decision.")
    keys = _DECISION_FIELDS if decision else ("title", "details", "status")
    fields = {**{k: row[k] for k in keys}, **extra}
    if decision:
        fields["importance"] = pending.importance
    with for_row(
        db, op, fields, row, channel=pending.channel, sensitivity=row["sensitivity"]
    ) as event_id:
        pending.attributes = {"event_id": event_id, **pending.attributes}
        yield event_id


def changed(
    db: Database, op: str, row: dict[str, Any], actor: str, **fields: Any
) -> AbstractContextManager[str]:
    """`recording` for a change to memory `row` (forget, restore, pin, unpin, confirm), in the
    memory's scope."""
    return recording(
        db,
        op,
        {"memory_id": row["id"], **fields},
        actor=actor,
        **{k: row[k] for k in ("tenant_id", "user_id", "agent_id", "session_id", "app_id")},
    )


def memory_fields(row: dict[str, Any]) -> dict[str, Any]:
    """What a remember or correct event holds of the memory it writes (`row`: the arguments of
    `write_memory`), so the memory can be derived from the event alone."""
    return {
        "text": row["content"],
        "memory_kind": row["kind"],
        "category": row["category"],
        "importance": row["importance"],
        "pinned": bool(row["pinned"]),
        "decay_rate": row["decay_rate"],
        "attributes": row["attributes"],
    }
