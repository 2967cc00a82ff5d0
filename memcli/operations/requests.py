"""The request models: one pydantic model per operation, the single source of its fields.

A field is declared here once and keeps its name everywhere: the CLI's flag is the field's name
in kebab case (`user_id` -> `--user-id`, built by memcli.cli.options), the HTTP body and the
MCP tool's input schema are generated from the model, and the operations take the validated
model. The shared scope (`Scope`: tenant, user, session, app) is one base class; a query and a
bundle spell what they share alike (`query`, `agent_id`, `budget_tokens`).

The query request is the memory system spec's `memory.query`, read by `memcli query -`, `POST
/api/v1/query` and the MCP `memory_query` tool:

    {"agent_id": "planner", "query": "deployment plan context", "categories": ["tasks"],
     "filters": {"user_id": "priya", "role": "assistant", "pinned": false,
                 "importance_min": 0.5, "updated_after": "2025-07-01"},
     "top_k": 3, "return": "bullets", "budget_tokens": 512, "threshold": 0.65,
     "as_of": "2026-03-01"}

`filters` takes the spec's section 6.1 keys (user_id, run_id, actor_id, role, category,
pinned, importance_min/max, updated_after/before) plus memcli's own scope keys
(tenant_id, session_id, app_id, kinds, channels); each may also be given at the top level, as
the CLI's flags give them (the top level wins). Unknown keys are refused: a misspelt filter
must not silently widen a read. `agent_id` names the asking agent, on every read as in `acb
build`: its category allowlist is enforced by `Memory.filters`. The spec's `filters.agent_id`
(the writing agent) is `written_by` here: one name, one meaning, so `filters.agent_id` is
refused. Importance is memcli's 0-1 scale: a bound outside it is refused (the spec's 1-5 is
not mapped). `as_of` (an ISO date or time) reads the memory as it was then: facts valid at
that time (valid_from <= t < valid_to), events up to it.

Old spellings (a model's `OLD`: the spec's `agent` here, the bundle's `query_text`,
`max_tokens` and short scope names in memcli.acb.build) are still read, as pydantic
validation aliases, until 0.2.0 (memcli.core.request_base); the schemas and the JSON answers
use the one spelling.

Nothing here imports Typer, HTTP or the store: a model is data and its rules.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RootModel,
    create_model,
    field_validator,
    model_validator,
)

from memcli.acb.request import AcbRequest
from memcli.core.ids import Id
from memcli.core.request_base import (
    QueryText,
    Request,
    Scope,
    SessionScope,
    TenantScope,
    Time,
    UserScope,
    old_spellings,
)
from memcli.errors import UsageError, validation_line

LEGS = ("lexical", "sparse", "dense", "entity", "trigram")
SENSITIVITIES = ("none", "low", "high")


def _importance(value: float | None) -> float | None:
    # The memory system spec rates importance 1-5; memcli stores 0-1. A 1-5 bound is refused,
    # not mapped: `importance_min: 3` read as 0.6 would silently change what a caller meant,
    # and `1` would then match everything (or, unmapped, nothing).
    if value is not None and not 0.0 <= value <= 1.0:
        raise ValueError(f"importance is on memcli's 0-1 scale, not {value:g} (the memory "
                         "system spec's 1-5 scale is not used: 5 is 1.0, 3 is 0.5)")
    return value


# An importance bound, 0-1.
Importance = Annotated[float | None, AfterValidator(_importance)]


class QueryConditions(Scope):
    """The conditions of a read, named as `memcli.store.filters.Filters` names them."""

    written_by: str | None = Field(
        default=None, description="Only memories written by this agent (the agent id their "
                                  "event or write carried).")
    run_id: str | None = Field(default=None, description="Only memories of this run.")
    actor_id: str | None = Field(default=None, description="Actor id.")
    role: str | None = Field(default=None, description=(
        "Who said it: human, agent, tool or system (user and assistant are accepted for "
        "human and agent)."))
    kinds: list[str] | None = Field(default=None, description="Only these event kinds.")
    channels: list[str] | None = Field(default=None, description="Only these channels.")
    pinned: bool | None = Field(default=None, description="Only pinned (or unpinned) memories.")
    importance_min: Importance = Field(default=None, description="Least importance (0-1).")
    importance_max: Importance = Field(default=None, description="Most importance (0-1).")
    updated_after: Time = Field(default=None, description="Updated after this ISO time.")
    updated_before: Time = Field(default=None, description="Updated before this ISO time.")


# The spec's nested `filters` object: the same fields (declared once, above), plus its
# singular `category`, which says what the request's `categories` says.
QueryFilters = create_model(  # type: ignore[call-overload]
    "QueryFilters", __base__=Request,
    **{name: (info.annotation, info) for name, info in QueryConditions.model_fields.items()},
    category=(str | list[str] | None, None),
)


def _legs(value: Any) -> Any:
    """`lexical,dense` (the CLI's comma form) as two legs; an unknown leg named."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return value
    legs = [p.strip() for item in value for p in (item.split(",") if isinstance(item, str)
                                                  else [item]) if p != ""]
    unknown = [leg for leg in legs if leg not in LEGS]
    if unknown:
        raise ValueError(f"unknown leg {unknown[0]!r} (use {', '.join(LEGS)})")
    return list(dict.fromkeys(legs)) or None


class QueryRequest(QueryConditions, QueryText):
    """`memcli query`, `POST /api/v1/query`, the MCP `memory_query` tool."""

    OLD = {"agent_id": "agent"}  # the memory system spec's name, read until 0.2.0
    model_config = ConfigDict(alias_generator=old_spellings(OLD))

    query: str = Field(min_length=1, description="What to look for.")
    agent_id: str | None = Field(
        default=None, description="The asking agent: its category allowlist applies.")
    categories: list[str] | None = Field(default=None, description="Only these categories.")
    filters: QueryFilters | None = Field(  # type: ignore[valid-type]
        default=None, description="The spec's filters object (each key also at the top level).")
    top_k: int = Field(default=10, ge=1, le=1000, description="How many hits (default 10).")
    return_format: Literal["bullets", "full"] = Field(
        default="full", alias="return",
        description="full: whole hits; bullets: {id, category, text, scope} (default full).")
    budget_tokens: int | None = Field(
        default=None, ge=1, description="Stop adding hits before this many tokens.")
    threshold: float | None = Field(
        default=None, ge=0, le=1,
        description="Drop hits whose relevance (0-1, the calibrated probability that a hit "
                    "is evidence, comparable across queries) is below this.")
    as_of: Time = Field(
        default=None, description="Read the memory as it was then: facts valid at that time, "
                                  "events up to it (ISO date or time, e.g. 2026-03-01).")
    all_tenants: bool = Field(
        default=False, description="Read every tenant (an operator's search; not with "
                                   "tenant_id; refused to a caller bound to a tenant).")
    sensitivity: list[Literal[SENSITIVITIES]] | None = Field(  # type: ignore[valid-type]
        default=None, description="Only memories of these sensitivities: none, low or high "
                                  "(repeatable; default all).")
    legs: Annotated[list[str] | None, BeforeValidator(_legs)] = Field(
        default=None, description="Only these search legs: lexical, sparse, dense, entity, "
                                  "trigram (comma-separated or repeated); no recency fallback.")
    widen: bool = Field(
        default=True, description="Widen a session query to its user when the session holds "
                                  "too little (--no-widen: never).")
    explain: bool = Field(
        default=False, description="Answer with the whole account: the scope and path that "
                                   "answered, each leg's count, the hits with their legs' ranks "
                                   "and scores and their boosts.")

    @field_validator("query", mode="before")
    @classmethod
    def _not_blank(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("the query is empty (an empty query finds nothing)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _asking_agent(cls, data: Any) -> Any:
        # A filter's `agent_id` meant the writing agent in earlier builds: refused, not reread
        # as the asker, so an old request never silently reads something else.
        if not isinstance(data, dict):
            return data
        filters = data.get("filters")
        if isinstance(filters, dict) and "agent_id" in filters:
            raise UsageError("bad query request: filters.agent_id: agent_id names the asking "
                             "agent, not a filter",
                             "filter by the writing agent with written_by; the asking "
                             "agent is the top-level agent_id")
        return data

    @model_validator(mode="after")
    def _checked(self) -> QueryRequest:
        if self.filters is not None:
            self._lift(self.filters)
        if self.all_tenants and self.tenant_id is not None:
            raise UsageError("a tenant and all tenants exclude each other",
                             "give --tenant-id or --all-tenants, not both")
        return self

    def _lift(self, filters: Any) -> None:
        """The nested filters moved to the top level, where a key given there wins."""
        given = filters.model_fields_set
        category = filters.category
        if "category" in given and category is not None:
            wanted = [category] if isinstance(category, str) else list(category)
            if self.categories is not None and sorted(set(self.categories)) != sorted(set(wanted)):
                raise UsageError("bad query request: categories and filters.category differ",
                                 "give the categories once")
            self.categories = wanted
        for name in given - {"category"}:
            if name not in self.model_fields_set:
                setattr(self, name, getattr(filters, name))
                self.model_fields_set.add(name)
        self.filters = None

    def conditions(self) -> dict[str, Any]:
        """The read's conditions as `Memory.filters` takes them (Filters' names)."""
        return {name: getattr(self, name) for name in QueryConditions.model_fields}


class EventBatch(RootModel[list[Any] | dict[str, Any]]):
    """`POST /api/v1/events`, the MCP `memory_record_event` tool: one record or a list of
    them, each read as `memcli ingest` reads it (memcli.core.records.EventIn, validated record
    by record there: a rejected record is reported, and does not refuse the others)."""

    model_config = ConfigDict(defer_build=True)

    @property
    def many(self) -> bool:
        return isinstance(self.root, list)

    def records(self) -> list[Any]:
        return list(self.root) if isinstance(self.root, list) else [self.root]


class IngestRequest(Scope):
    """`memcli ingest`: how the records are written, and the scope, agent, run, channel and
    category a record that names none gets."""

    agent_id: str | None = Field(default=None, description="Default agent id.")
    run_id: str | None = Field(default=None, description="Default run id.")
    channel: str | None = Field(
        default=None, description="Default channel: private, public, team or agent.")
    category: str | None = Field(default=None, description="Default category.")
    strict: bool = Field(default=False,
                         description="All or nothing: one bad record rejects the batch.")
    defer_embed: bool = Field(
        default=False, description="Store without vectors now; `memcli embed` adds them.")
    wait: bool = Field(
        default=False, description="Through `memcli serve`, which writes vectors in the "
        "background: return once these records' vectors are written too.")

    def defaults(self) -> dict[str, Any]:
        """What a record that names none of these gets (None: nothing)."""
        return self.model_dump(exclude={"strict", "defer_embed", "wait"})


class HistoryRequest(SessionScope, UserScope, TenantScope):
    """`memcli history`: what happened to a memory, or in a scope, newest first."""

    memory_id: Id | None = Field(default=None, description="A memory id.")
    limit: int = Field(default=100, ge=1, le=10_000, description="How many rows at most.")


class PurgeRequest(Scope):
    """`memcli purge` and the app admin's purge: a scope deleted for good."""

    memory_id: Id | None = Field(default=None, description="One memory id.")
    dry_run: bool = Field(default=False, description="Print the plan only.")

    def where(self) -> dict[str, Any]:
        """The scope as the purge plan takes it."""
        return self.model_dump(exclude={"dry_run"})


def validated(model: type[BaseModel], data: Any, what: str, hint: str | None = None) -> Any:
    """`data` (one JSON object; a root model's value) as a `model`, or a one-line UsageError
    naming the first problem (exit 2, HTTP 422)."""
    if not isinstance(data, dict) and not issubclass(model, RootModel):
        raise UsageError(f"the {what} must be one JSON object")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise UsageError(validation_line(exc, what), hint) from None


QUERY_HINT = "see `memcli query --help` and the README's JSON request"


def parse_query_request(data: Any) -> QueryRequest:
    """A validated query request, or a one-line UsageError naming the first problem."""
    return validated(QueryRequest, data, "query request", QUERY_HINT)


def parse_acb_request(data: Any) -> AcbRequest:
    """A validated acb request, or a one-line UsageError naming the first problem."""
    return validated(AcbRequest, data, "acb request")
