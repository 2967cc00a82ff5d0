"""Finding one row by its id for a caller: the one lookup per kind of row that a command acting
on an id goes through (`forget 6`, `task update 3`, `DELETE /api/v1/memories/6`, MCP
`memory.get_artifact`).

The caller's `Owner` says whose rows it may touch: one tenant always, and, for a caller a
server bound further (a token's user, app, agent or categories), only rows of that user and
app in the categories it may read. A row outside it is "not found" with the same message as an
id that does not exist, so an id tells a caller nothing about rows it may not see; the CLI,
the HTTP API and MCP all look rows up here, so none of them can skip the check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memcli.errors import NotFoundError
from memcli.store import events, ledger_sql, memories, proposals_sql
from memcli.store.history import list_history

if TYPE_CHECKING:
    from memcli.store.connection import Database

# The category of a ledger row and a proposal (their memories are written in these), and of
# an event no memory was cut from (an artifact's tool result, an `artifact` event).
DECISION_CATEGORY = "decisions"
TASK_CATEGORY = "tasks"
PROPOSAL_CATEGORY = "profile"
EVENT_CATEGORY = "event"


@dataclass(frozen=True)
class Owner:
    """Whose rows a caller may read or write by id. `categories`: the categories it may see
    (None: every one); `hidden`: restricted ones it may not, whatever `categories` says."""

    tenant_id: str
    user_id: str | None = None
    app_id: str | None = None
    categories: tuple[str, ...] | None = None
    hidden: tuple[str, ...] = ()

    def holds(self, row: dict[str, Any], categories: tuple[str | None, ...]) -> bool:
        """Whether `row` (with its tenant_id, user_id, app_id) is this caller's, its content
        being of `categories` (a row of several, an event with many memories: any will do)."""
        if row.get("tenant_id") != self.tenant_id:
            return False
        if self.user_id is not None and row.get("user_id") != self.user_id:
            return False
        if self.app_id is not None and row.get("app_id") != self.app_id:
            return False
        visible = [c for c in categories if c not in self.hidden]
        if self.categories is not None:
            visible = [c for c in visible if c in self.categories]
        return bool(visible)


def memory(db: Database, memory_id: int, owner: Owner) -> dict[str, Any]:
    """The memory `memory_id` (every column), or NotFoundError."""
    row = memories.get_memories(db, [memory_id]).get(memory_id)
    if row is None or not owner.holds(row, (row["category"],)):
        raise NotFoundError(f"no memory with id {memory_id}")
    return row


def check_trail(db: Database, memory_id: int, owner: Owner) -> None:
    """NotFoundError unless memory `memory_id` is the owner's, or (a memory purged since) has
    history rows in the owner's tenant and user: its audit trail is the owner's to read. An
    owner bound to an app or categories sees only trails of memories it can still see."""
    row = memories.get_memories(db, [memory_id]).get(memory_id)
    if row is not None and owner.holds(row, (row["category"],)):
        return
    narrower = owner.app_id is not None or owner.categories is not None or owner.hidden
    if row is None and not narrower and list_history(
            db, memory_id=memory_id, tenant_id=owner.tenant_id, user_id=owner.user_id, limit=1):
        return
    raise NotFoundError(f"no memory with id {memory_id}")


def decision(db: Database, decision_id: int, owner: Owner) -> dict[str, Any]:
    return _held(ledger_sql.get_decision(db, decision_id), owner, DECISION_CATEGORY,
                 f"no decision with id {decision_id}")


def task(db: Database, task_id: int, owner: Owner) -> dict[str, Any]:
    return _held(
        ledger_sql.get_task(db, task_id), owner, TASK_CATEGORY, f"no task with id {task_id}"
    )


def proposal(db: Database, proposal_id: int, owner: Owner) -> dict[str, Any]:
    return _held(proposals_sql.get_proposal(db, proposal_id), owner, PROPOSAL_CATEGORY,
                 f"no proposal with id {proposal_id}")


def _held(row: dict[str, Any] | None, owner: Owner, category: str,
          missing: str) -> dict[str, Any]:
    """The ledger row when the owner may see its category; else NotFoundError(`missing`),
    the same answer as for an id that does not exist."""
    if row is None or not owner.holds(row, (category,)):
        raise NotFoundError(missing)
    return row


def artifact(db: Database, artifact_id: str, owner: Owner) -> tuple[dict[str, Any] | None,
                                                                    dict[str, Any]]:
    """(the kept output of a truncated tool result, its event), or (None, the event) for an
    event of kind `artifact` named by its event id; NotFoundError otherwise. Its categories
    are those of the memories cut from its event."""
    kept = events.get_artifact(db, artifact_id)
    found = events.get_events(db, [kept["event_id"] if kept is not None else artifact_id])
    event = found[0] if found else None
    if event is not None and (kept is not None or event["kind"] == "artifact"):
        cut = db.query("SELECT DISTINCT category FROM memories WHERE event_id = ?",
                       (event["event_id"],))
        categories = tuple(r["category"] for r in cut) or (EVENT_CATEGORY,)
        if owner.holds(event, categories):
            return kept, event
    raise NotFoundError(f"no artifact {artifact_id}")
