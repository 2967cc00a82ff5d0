"""Request models of the HTTP routes and MCP tools the CLI reads from flags rather than JSON.

The records of `POST /api/v1/events` (memcli.core.records.EventIn), the acb request
(memcli.acb.build.AcbRequest), the memory system spec's query request
(memcli.operations.requests.QueryRequest) and the ledger's requests
(memcli.operations.ledger_ops) are the CLI's own models; the ones here give remember/forget,
history and the app admin routes a JSON shape with the CLI's field names and rules
(`extra="forbid"`: a misspelt field is refused, never ignored). A route with ids in its path
takes its query parameters as the `...Params` model and the operation validates the whole
request (path and parameters) as the model that extends it. What the routes answer is in
memcli.service.schemas.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from memcli.core.ids import Id


class _Scoped(BaseModel):
    """The scope keys a write may name; a key the server bound must agree with its binding."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: str | None = Field(default=None, min_length=1)
    user_id: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    app_id: str | None = None


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


class TenantParams(BaseModel):
    """The query parameters of `DELETE /api/v1/memories/{id}` and `GET /api/v1/artifacts/{id}`:
    the tenant the id is looked up in (the caller's by default)."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: str | None = Field(default=None, min_length=1)


class ForgetRequest(TenantParams):
    """`memcli forget ID`: soft-delete (restorable for 30 days)."""

    memory_id: Id


class HistoryParams(TenantParams):
    """The query parameters of `GET /api/v1/memories/{id}/history`."""

    limit: int = Field(default=100, ge=1, le=10_000)


class HistoryQuery(HistoryParams):
    """`GET /api/v1/memories/{id}/history`: `memcli history ID`."""

    memory_id: Id


class AppMemoryParams(TenantParams):
    """The query parameters of `DELETE /apps/{app_id}/memories/{memory_id}`."""

    user_id: str | None = None


class AppMemoriesParams(AppMemoryParams):
    """The query parameters of the app-memory design's admin routes on a whole app
    (`memory_id`: one memory of it)."""

    memory_id: Id | None = None
    limit: int = Field(default=100, ge=1, le=10_000)


class AppMemoriesQuery(AppMemoriesParams):
    """The app-memory design's admin routes: list, delete all, or delete one memory of an app."""

    app_id: str = Field(min_length=1)
