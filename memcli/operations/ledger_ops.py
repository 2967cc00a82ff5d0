"""The ledger's requests and operations: decisions, tasks, checkpoints and artifacts.

One pydantic model per operation, read by the CLI (`memcli decision|task|checkpoint ...`, its
options built from the model), the HTTP routes (the body or query parameters) and the MCP tools
(their arguments), and one function per operation taking the validated model. The service only
binds the caller's scope (its tenant, user, agent and app) before it calls these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, Field

from memcli.core.ids import Id
from memcli.core.request_base import AppScope, Scope, TenantScope, UserScope
from memcli.errors import UsageError
from memcli.ledger import entries
from memcli.operations.record import artifact_body

if TYPE_CHECKING:
    from memcli.operations.memory import Memory
    from memcli.store.owner import Owner

SENSITIVITIES = ("none", "low", "high")
TaskStatus = Literal["open", "doing", "done"]


def _sensitivity(value: str) -> str:
    if value == "secret":
        raise ValueError("secret content is never stored (leave the secret out)")
    if value not in SENSITIVITIES:
        raise ValueError("use none, low or high")
    return value


# A str checked by the rule above (not a choice), so `secret` is answered with why.
Sensitivity = Annotated[str, AfterValidator(_sensitivity)]


def _sensitivity_field() -> Any:
    return Field(default="none", json_schema_extra={"enum": list(SENSITIVITIES)},
                 description="none, low or high (secret is never stored).")


def _channel_field() -> Any:
    return Field(default="private", description="private, public, team or agent.")


def _refs_field() -> Any:
    return Field(default_factory=list,
                 description="Evidence: an event id or mem:ID (repeatable).")


def _limit_field() -> Any:
    return Field(default=100, ge=1, le=10_000, description="How many rows at most.")


class LedgerWrite(Scope):
    """The scope keys of a ledger write; a key the server bound must agree with its binding."""

    agent_id: str | None = Field(default=None, description="Agent that recorded it.")


class DecisionRequest(LedgerWrite):
    """`memcli decision add`, `decision supersede` (`supersedes`), `POST /api/v1/decisions`,
    the MCP `memory_record_decision` tool."""

    decision: str = Field(min_length=1, description="What was decided.")
    rationale: list[str] = Field(default_factory=list, description="Why (repeatable).")
    constraints: list[str] = Field(default_factory=list,
                                   description="A constraint it honours (repeatable).")
    alternatives: list[str] = Field(default_factory=list,
                                    description="An alternative considered (repeatable).")
    consequences: list[str] = Field(default_factory=list,
                                    description="A consequence expected (repeatable).")
    refs: list[str] = _refs_field()
    scope: Literal["project", "user", "global"] = Field(
        default="project", description="project, user or global.")
    channel: Literal["private", "public", "team", "agent"] = _channel_field()
    sensitivity: Sensitivity = _sensitivity_field()
    supersedes: Id | None = Field(default=None, description="The decision it replaces.")
    reason: str = Field(default="", description="Why it changed (with supersedes).")


class LedgerListing(AppScope, UserScope, TenantScope):
    """What a ledger listing reads: one tenant's rows (the user's, the app's), newest first."""

    limit: int = _limit_field()


class DecisionsQuery(LedgerListing):
    """`memcli decision list`, `GET /api/v1/decisions/query`, the MCP `memory_query_decisions`
    tool."""

    status: Literal["active", "superseded", "all"] = Field(
        default="active", description="active, superseded or all (with their links).")


class TaskRequest(LedgerWrite):
    """`memcli task add`, `task update` (`task_id`), `POST /api/v1/tasks`, the MCP
    `memory_record_task` and `memory_update_task` tools."""

    task_id: Id | None = Field(default=None, description="The task to change (none: a new one).")
    title: str | None = Field(default=None, min_length=1, description="What to do.")
    details: str | None = Field(default=None, description="More about it.")
    status: TaskStatus | None = Field(default=None, description="open, doing or done.")
    refs: list[str] = _refs_field()
    channel: Literal["private", "public", "team", "agent"] = _channel_field()
    sensitivity: Sensitivity = _sensitivity_field()


class TasksQuery(LedgerListing):
    """`memcli task list`."""

    status: list[TaskStatus] | None = Field(
        default=None, description="open, doing or done (repeatable; default all).")


class CheckpointScope(TenantScope):
    """Whose saved state: one (user, thread) of a tenant."""

    user_id: str = Field(default="", description="User id.")
    thread_id: str = Field(default="", description="Thread (session) id.")


class CheckpointSave(CheckpointScope):
    """`memcli checkpoint save` (the state itself is the command's file, stdin or --data)."""

    sensitivity: Sensitivity = _sensitivity_field()


class CheckpointLoad(CheckpointScope):
    """`memcli checkpoint load`."""

    version: int | None = Field(default=None, ge=1, description="An older save (1 = the "
                                                                "first); default: the latest.")


class ArtifactRequest(TenantScope):
    """`GET /api/v1/artifacts/{id}`, the MCP `memory_get_artifact` tool."""

    artifact_id: str = Field(min_length=1, description="An artifact id from a tool result, or "
                                                       "the event id of an `artifact` event.")


# -- the operations ----------------------------------------------------------------------------
def _scope(req: LedgerWrite) -> dict[str, Any]:
    return req.model_dump(include={"tenant_id", "user_id", "session_id", "agent_id", "app_id"})


def record_decision(memory: Memory, req: DecisionRequest, owner: Owner | None = None
                    ) -> dict[str, Any]:
    """A new decision, or (`supersedes`) the one replacing an `owner`'s decision: its row."""

    lists = {"rationale": req.rationale, "constraints": req.constraints,
             "alternatives": req.alternatives, "consequences": req.consequences,
             "refs": req.refs}
    if req.supersedes is not None:
        return entries.supersede_decision(memory, req.supersedes, req.decision, owner=owner,
                                         reason=req.reason, **lists)
    return entries.add_decision(memory, req.decision, scope=req.scope, channel=req.channel,
                               sensitivity=req.sensitivity, **_scope(req), **lists)


def query_decisions(memory: Memory, req: DecisionsQuery, *, all_tenants: bool = False
                    ) -> list[dict[str, Any]]:
    """Decisions, newest first (`all` includes the superseded ones and their links)."""

    return entries.list_decisions(
        memory, status=None if req.status == "all" else req.status, tenant_id=req.tenant_id,
        all_tenants=all_tenants, user_id=req.user_id, app_id=req.app_id, limit=req.limit)


def record_task(memory: Memory, req: TaskRequest, owner: Owner | None = None) -> dict[str, Any]:
    """A new task, or (`task_id`) an `owner`'s task changed: its row."""

    if req.task_id is not None:
        return entries.update_task(memory, req.task_id, status=req.status, title=req.title,
                                  details=req.details, refs=req.refs or None, owner=owner)
    if req.title is None:
        raise UsageError("bad task: title: a new task needs a title", "give task_id to update one")
    return entries.add_task(memory, req.title, details=req.details or "",
                           status=req.status or "open", refs=req.refs, channel=req.channel,
                           sensitivity=req.sensitivity, **_scope(req))


def query_tasks(memory: Memory, req: TasksQuery, *, all_tenants: bool = False
                ) -> list[dict[str, Any]]:
    """Tasks, newest first."""

    return entries.list_tasks(memory, statuses=tuple(req.status or ()), tenant_id=req.tenant_id,
                             all_tenants=all_tenants, user_id=req.user_id, app_id=req.app_id,
                             limit=req.limit)


def save_checkpoint(memory: Memory, state: Any, req: CheckpointSave) -> dict[str, Any]:
    """`state` saved for (user, thread), replacing the previous save: its row, without the state."""

    row = entries.save_checkpoint(memory, state, user_id=req.user_id, thread_id=req.thread_id,
                                 tenant_id=req.tenant_id, sensitivity=req.sensitivity)
    return {k: v for k, v in row.items() if k != "data"}


def load_checkpoint(memory: Memory, req: CheckpointLoad) -> dict[str, Any]:
    """The saved state of (user, thread), with its version and time."""

    return entries.load_checkpoint(memory, user_id=req.user_id, thread_id=req.thread_id,
                                  tenant_id=req.tenant_id, version=req.version)


def get_artifact(memory: Memory, req: ArtifactRequest, owner: Owner) -> dict[str, Any]:
    """The full output kept for a truncated tool result, `owner`'s only: `{artifact_id,
    tenant_id, bytes, text}` (text decoded as UTF-8, bad bytes replaced)."""

    body = artifact_body(memory, req.artifact_id, owner)
    return {"artifact_id": req.artifact_id, "tenant_id": owner.tenant_id, "bytes": len(body),
            "text": body.decode("utf-8", errors="replace")}
