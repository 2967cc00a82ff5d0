"""The memory system spec's `memory.query` request: one JSON object, validated here, for `query -`.

    {"agent": "planner", "query": "deployment plan context", "categories": ["tasks"],
     "filters": {"user_id": "priya", "role": "assistant", "pinned": false,
                 "importance_min": 0.5, "updated_after": "2025-07-01"},
     "top_k": 3, "return": "bullets", "budget_tokens": 512, "threshold": 0.65,
     "as_of": "2026-03-01"}

`filters` takes the keys of section 6.1 of the memory system spec (user_id, agent_id, run_id,
actor_id, role, category, pinned, importance_min/max, updated_after/before) plus memcli's own scope
keys (tenant_id, session_id, app_id, kinds, channels). Unknown keys are refused: a misspelt filter
must not silently widen a read. The agent's category allowlist is enforced by `Memory.filters`, the
same check as `--agent`. Importance is memcli's 0-1 scale. `as_of` (memcli's, an ISO date or time)
reads the memory as it was then: facts valid at that time (valid_from <= t < valid_to), events up to
it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memcli.core.records import parse_ts
from memcli.errors import UsageError


class QueryFilters(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    tenant_id: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    app_id: str | None = None
    run_id: str | None = None
    actor_id: str | None = None
    role: str | None = None
    category: str | list[str] | None = None  # the spec's 6.1 key; `categories` says the same
    kinds: list[str] | None = None
    channels: list[str] | None = None
    pinned: bool | None = None
    importance_min: float | None = None
    importance_max: float | None = None
    updated_after: str | None = None
    updated_before: str | None = None

    @field_validator("updated_after", "updated_before")
    @classmethod
    def _ts(cls, value: str | None) -> str | None:
        return None if value is None else parse_ts(value)


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    agent: str | None = None
    query: str = Field(min_length=1)
    categories: list[str] | None = None
    filters: QueryFilters = Field(default_factory=QueryFilters)
    top_k: int = Field(default=10, ge=1, le=1000)
    return_format: Literal["bullets", "full"] = Field(default="full", alias="return")
    budget_tokens: int | None = Field(default=None, ge=1)
    threshold: float | None = None
    # Time travel: what was current then (facts valid at that time, events up to it).
    as_of: str | None = None

    @field_validator("as_of")
    @classmethod
    def _as_of(cls, value: str | None) -> str | None:
        return None if value is None else parse_ts(value)

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the query is empty")
        return value

    def categories_wanted(self) -> list[str] | None:
        """`categories`, or the spec's `filters.category` (6.1); both given must agree."""
        category = self.filters.category
        from_filter = [category] if isinstance(category, str) else category
        if self.categories is not None and from_filter is not None and (
                sorted(set(self.categories)) != sorted(set(from_filter))):
            raise UsageError("bad query request: categories and filters.category differ",
                             "give the categories once")
        return self.categories if self.categories is not None else from_filter

    def as_flags(self) -> dict[str, Any]:
        """The request as the keyword arguments of the `query` command's body (its flag names),
        None for what it leaves out."""
        f = self.filters
        return {
            "text": self.query, "agent": self.agent, "category": self.categories_wanted(),
            "tenant": f.tenant_id, "user": f.user_id, "agent_id": f.agent_id,
            "session": f.session_id, "app_id": f.app_id, "run": f.run_id, "actor": f.actor_id,
            "role": f.role, "kind": f.kinds, "channel": f.channels, "pinned": f.pinned,
            "importance_min": f.importance_min, "importance_max": f.importance_max,
            "updated_after": f.updated_after, "updated_before": f.updated_before,
            "top_k": self.top_k, "return_mode": self.return_format,
            "budget_tokens": self.budget_tokens, "threshold": self.threshold,
            "as_of": self.as_of,
        }


def parse_query_request(data: Any) -> QueryRequest:
    """A validated request, or a one-line UsageError naming the first problem."""
    if not isinstance(data, dict):
        raise UsageError("the query request must be one JSON object")
    try:
        return QueryRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "request"
        message = first["msg"].removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise UsageError(f"bad query request: {where}: {message}{more}",
                         "see `memcli query --help` and the README's JSON request") from None
