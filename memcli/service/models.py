"""Request models of the HTTP routes and MCP tools the CLI reads from flags rather than JSON.

The records of `POST /api/v1/events` (memcli.core.records.EventIn), the acb request
(memcli.acb.build.AcbRequest), the memory system spec's query request
(memcli.operations.requests.QueryRequest) and the memory's life (remember, forget, history, an
app's memories: memcli.operations.lifecycle_requests) are the CLI's own models; the ones here
give the ledger routes a JSON shape with the CLI's field names and rules (`extra="forbid"`: a
misspelt field is refused, never ignored). A route with ids in its path takes its query
parameters as the `...Params` model and the operation validates the whole request (path and
parameters) as the model that extends it. What the routes answer is in
memcli.service.schemas.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from memcli.core.ids import Id

Channel = Literal["private", "public", "team", "agent"]
Sensitivity = Literal["none", "low", "high"]


class _Scoped(BaseModel):
    """The scope keys a write may name; a key the server bound must agree with its binding."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: str | None = Field(default=None, min_length=1)
    user_id: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    app_id: str | None = None


class DecisionRequest(_Scoped):
    """`POST /api/v1/decisions`: `memcli decision add` (or `supersede` with `supersedes`)."""

    decision: str = Field(min_length=1)
    rationale: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    alternatives: list[str] = Field(default_factory=list)
    consequences: list[str] = Field(default_factory=list)
    refs: list[str] = Field(default_factory=list)
    scope: str = "project"
    channel: Channel = "private"
    sensitivity: Sensitivity = "none"
    supersedes: Id | None = None
    reason: str = ""  # why it changed (with `supersedes`)


class DecisionsQuery(BaseModel):
    """`GET /api/v1/decisions/query`: `memcli decision list`."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["active", "superseded", "all"] = "active"
    tenant_id: str | None = Field(default=None, min_length=1)
    user_id: str | None = None
    app_id: str | None = None
    limit: int = Field(default=100, ge=1, le=10_000)


class TaskRequest(_Scoped):
    """`POST /api/v1/tasks`: `memcli task add`, or `task update` when `task_id` is given."""

    task_id: Id | None = None
    title: str | None = Field(default=None, min_length=1)
    details: str | None = None
    status: Literal["open", "doing", "done"] | None = None
    refs: list[str] = Field(default_factory=list)
    channel: Channel = "private"
    sensitivity: Sensitivity = "none"


class TenantParams(BaseModel):
    """The query parameters of `DELETE /api/v1/memories/{id}` and `GET /api/v1/artifacts/{id}`:
    the tenant the id is looked up in (the caller's by default)."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: str | None = Field(default=None, min_length=1)


class ArtifactQuery(TenantParams):
    """`GET /api/v1/artifacts/{id}`: `memcli artifact ID`."""

    artifact_id: str = Field(min_length=1)
