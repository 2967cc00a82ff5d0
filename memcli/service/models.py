"""Request models of the service operations the CLI reads from flags rather than JSON.

The records of `POST /api/v1/events` (memcli.models.EventIn), the acb request
(memcli.acb.build.AcbRequest) and seed 000's query request (memcli.query_request.QueryRequest)
are the CLI's own models; the ones here give the ledger, remember/forget, history and the app
admin routes a JSON shape with the CLI's field names and rules (`extra="forbid"`: a misspelt
field is refused, never ignored). The OpenAPI document is generated from all of them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memcli.ids import Id

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


class RememberRequest(_Scoped):
    """`memcli remember`: a fact, or a procedure (`procedural`, `steps`)."""

    text: str | None = None
    procedural: bool = False
    steps: list[str] = Field(default_factory=list)
    title: str | None = None
    field: str | None = None
    category: str | None = None
    importance: float | None = Field(default=None, ge=0, le=1)
    pinned: bool = False


class ForgetRequest(BaseModel):
    """`memcli forget ID`: soft-delete (restorable for 30 days)."""

    model_config = ConfigDict(extra="forbid")

    memory_id: Id
    tenant_id: str | None = Field(default=None, min_length=1)


class HistoryQuery(BaseModel):
    """`GET /api/v1/memories/{id}/history`: `memcli history ID`."""

    model_config = ConfigDict(extra="forbid")

    memory_id: Id
    tenant_id: str | None = Field(default=None, min_length=1)
    limit: int = Field(default=100, ge=1, le=10_000)


class AppMemoriesQuery(BaseModel):
    """Seed 001's admin routes: list, delete all, or delete one memory of an app."""

    model_config = ConfigDict(extra="forbid")

    app_id: str = Field(min_length=1)
    tenant_id: str | None = Field(default=None, min_length=1)
    user_id: str | None = None
    memory_id: Id | None = None
    limit: int = Field(default=100, ge=1, le=10_000)


class ArtifactQuery(BaseModel):
    """`GET /api/v1/artifacts/{id}`: `memcli artifact ID`."""

    model_config = ConfigDict(extra="forbid")

    artifact_id: str = Field(min_length=1)
    tenant_id: str | None = Field(default=None, min_length=1)


# -- answers -----------------------------------------------------------------------------------
# What `POST /api/v1/events` and `POST /api/v1/acb/build` answer, for the OpenAPI document: the
# Agent Memory System PRD's fields (its section 7), and memcli's own beside them
# (`extra="allow"`: a bundle carries more than is listed here). The answers themselves are
# built by memcli.operations (memcli.models.EventReceipt) and memcli.acb (a bundle is a dict);
# tests/test_prd_contract.py validates real answers against these models.
class BundleItem(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str
    refs: list[str]
    decision_id: int | None = None  # decision items: the ledger's id


class BundleSection(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    items: list[BundleItem]
    token_est: int  # the section's tokens (tiktoken's count, exact)
    tokens: int  # the same, memcli's earlier name
    cap: int
    priority: int


class Omission(BaseModel):
    model_config = ConfigDict(extra="allow")

    reason: str  # section_cap | budget | truncated | truncated_tool_output
    candidates: list[str]  # refs of what was left out (at most 20)
    refs: list[str]  # the same, memcli's earlier name
    section: str
    count: int
    artifact_id: str | None = None  # truncated_tool_output: the full output's artifact


class Scoring(BaseModel):
    alpha: float  # semantic relevance
    beta: float  # recency
    gamma: float  # importance


class Provenance(BaseModel):
    model_config = ConfigDict(extra="allow")

    intent: str | None
    query_terms: list[str]
    candidate_pool_size: int
    filters: dict[str, Any]  # sensitivity_allowed, and the scope the bundle read
    scoring: Scoring
    weights: dict[str, Any]  # alpha, beta, gamma, fusion, legs, half_life_days, w_rel


class Bundle(BaseModel):
    """An active context bundle (`memcli acb build --json`)."""

    model_config = ConfigDict(extra="allow")

    acb_id: str
    budget_tokens: int
    token_used_est: int  # the rendered bundle's tokens (tiktoken's count, exact)
    token_used: int  # the same, memcli's earlier name
    reserve_tokens: int
    sections: list[BundleSection]
    omissions: list[Omission]
    provenance: Provenance


def _event_receipt() -> type[BaseModel]:
    from memcli.models import EventReceipt

    return EventReceipt


# Route path -> (the answer's model, whether a list of them may come back instead).
RESPONSES: dict[str, tuple[Any, bool]] = {
    "/api/v1/events": (_event_receipt, True),
    "/api/v1/acb/build": (lambda: Bundle, False),
}
