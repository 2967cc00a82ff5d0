"""The ledger's request models: decisions, tasks, checkpoints and artifacts.

One pydantic model per operation, read by the CLI (`memcli decision|task|checkpoint ...`, its
options built from the model), the HTTP routes (the body or query parameters) and the MCP tools
(their arguments); the operations taking them are in memcli.operations.ledger_ops. Apart from
them because every command's start imports the models (the CLI builds its flags from them),
and the operations import the ledger, ingest and the store, which a command that writes no
ledger row must not pay for. Nothing here imports more than pydantic and the request base.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from memcli.core.ids import Id
from memcli.core.request_base import AppScope, Scope, TenantScope, UserScope

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
