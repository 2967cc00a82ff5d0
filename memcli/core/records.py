"""Pydantic models for what goes in (event records) and what comes out (hits, reports)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict

from memcli.core.roles import canonical_role

Channel = Literal["private", "public", "team", "agent"]
EventKind = Literal["message", "tool_call", "tool_result", "decision", "task_update", "artifact"]
# The kind of the events memcli's own writes record (remember, correct, decision add, task
# update, checkpoint save, forget ...): stored and exported like any event, never ingested (a
# record cannot claim it) and never cut into an episode (memcli.ledger.commands).
COMMAND_KIND = "command"
Sensitivity = Literal["none", "low", "high", "secret"]


# The time of the write in progress (`write_time`): every row a write derives from its event
# carries the event's time, so `memcli rebuild` can derive the same rows from the event again.
_WRITE_TIME: ContextVar[str | None] = ContextVar("memcli_write_time", default=None)


def utcnow() -> str:
    """Now, in the stored format; inside `write_time(ts)`, `ts`."""
    pinned = _WRITE_TIME.get()
    return pinned if pinned is not None else format_ts(datetime.now(UTC))


@contextmanager
def write_time(ts: str) -> Iterator[str]:
    """One write, one time: every `utcnow()` inside the block (rows, history, edges, change
    log) is `ts`, the time of the event the write derives its rows from. A context variable,
    so each thread and task of the daemon has its own."""
    token = _WRITE_TIME.set(ts)
    try:
        yield ts
    finally:
        _WRITE_TIME.reset(token)


def format_ts(dt: datetime) -> str:
    """One timestamp format everywhere, so ISO strings sort as times."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_ts(value: str | datetime) -> str:
    if isinstance(value, datetime):
        return format_ts(value)
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        return format_ts(datetime.fromisoformat(text))
    except ValueError as exc:
        raise ValueError(f"not an ISO 8601 time: {value!r}") from exc
    except OverflowError as exc:  # e.g. 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise ValueError(f"time out of range: {value!r}") from exc


def parse_clock(value: str) -> datetime:
    """A stored timestamp (or any ISO 8601 time) as an aware datetime."""
    return datetime.fromisoformat(parse_ts(value).replace("Z", "+00:00"))


class Actor(BaseModel):
    """Who the event is from."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    type: str = Field(default="human", description="human, agent, tool or system (default human).")
    id: str | None = Field(default=None, description="The actor's own id, e.g. a user name.")

    @field_validator("type")
    @classmethod
    def _one_vocabulary(cls, value: str) -> str:
        return canonical_role(value)


# A positive ledger id: strict, so `true` is not the decision 1.
_LedgerId = Annotated[int, Field(ge=1, strict=True)]


@with_config(ConfigDict(extra="allow"))
class EventContent(TypedDict, total=False):
    """What the event says. `text` for a message; a tool call's `name`/`tool` and `args`; a tool
    result's `tool`, `path`, `line_range` and output (`text`, `output` or `excerpt_text`, cut at
    64 KB, the rest kept as an artifact); a decision's `decision`, `rationale`, `supersedes`; a
    task update's `title` or `task_id`, `status`, `details`. Other keys are kept as given."""

    text: Annotated[str, Field(description="The message, or a tool result's output.")]
    tool: Annotated[str, Field(description="tool_call/tool_result: the tool, e.g. fs.read_file.")]
    name: Annotated[str, Field(description="tool_call: the tool called (as `tool`).")]
    args: Annotated[Any, Field(description="tool_call: the arguments it was called with.")]
    path: Annotated[str, Field(description="tool_result: the file it read or wrote.")]
    line_range: Annotated[list[int], Field(
        min_length=2, max_length=2, description="tool_result: the first and last line read.")]
    output: Annotated[Any, Field(description="tool_result: its output (as `text`).")]
    excerpt_text: Annotated[str, Field(description="tool_result: its output (as `text`).")]
    decision: Annotated[str, Field(description="decision: what was decided.")]
    rationale: Annotated[str | list[str], Field(description="decision: why.")]
    constraints: Annotated[str | list[str], Field(description="decision: what it must respect.")]
    alternatives: Annotated[str | list[str], Field(description="decision: what was not chosen.")]
    consequences: Annotated[str | list[str], Field(description="decision: what follows from it.")]
    scope: Annotated[str, Field(description="decision: project (default), user or global.")]
    supersedes: Annotated[_LedgerId, Field(description="decision: the decision id it replaces.")]
    task_id: Annotated[_LedgerId, Field(description="task_update: the task to change.")]
    title: Annotated[str, Field(description="task_update: a new task's title.")]
    details: Annotated[str, Field(description="task_update: more about the task.")]
    status: Annotated[str, Field(description="task_update: open, doing or done.")]


class EventIn(BaseModel):
    """One event: the `record_event` request, plus `ts` and the `{"text": ...}` shorthand."""

    # Built on first use (ingest), not at import: `query` never validates a record.
    model_config = ConfigDict(extra="forbid", defer_build=True)

    event_id: str | None = Field(
        default=None, min_length=1, max_length=200,
        description="Your id for the event: a repeat of it is skipped (default: from its content).")
    ts: str | None = Field(default=None, description="When it happened (ISO time; default now).")
    tenant_id: str = Field(default="default", description="Tenant.")
    user_id: str | None = Field(default=None, description="User id.")
    agent_id: str | None = Field(default=None, description="Agent id.")
    session_id: str | None = Field(default=None, description="Session (conversation) id.")
    app_id: str | None = Field(default=None, description="App id.")
    run_id: str | None = Field(default=None, description="Run id (one task's run).")
    channel: Channel = Field(
        default="private", description="Who may see it: private (default), team, agent, public.")
    actor: Actor = Field(default_factory=Actor, description="Who it is from (default a human).")
    kind: EventKind = Field(
        default="message", description="message (default), tool_call, tool_result, decision "
        "(writes a ledger decision), task_update (a ledger task) or artifact.")
    sensitivity: Sensitivity = Field(
        default="none", description="none (default), low, high, or secret (never stored).")
    tags: list[str] = Field(default_factory=list, description="Labels, e.g. topic:billing.")
    content: EventContent = Field(
        default_factory=EventContent,
        description="What the event says: {\"text\": ...} for a message, tool and decision "
                    "fields for the other kinds.")
    refs: list[Any] = Field(default_factory=list,
                            description="What it refers to: event ids, memory ids, URLs.")
    # Optional hints for the derived memory.
    category: str | None = Field(default=None, description="Category of its memory.")
    importance: float | None = Field(default=None, ge=0.0, le=1.0,
                                     description="Importance of its memory (0-1).")
    pinned: bool = Field(default=False, description="Pin its memory (never decays).")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        # {"text": "..."} is short for {"content": {"text": "..."}}; "role" for actor.type.
        if isinstance(data, dict):
            data = dict(data)
            if "text" in data and isinstance(data.get("content"), dict | None):
                text = data.pop("text")
                content = dict(data.get("content") or {})
                content.setdefault("text", text)
                data["content"] = content
            if "role" in data and "actor" not in data:
                data["actor"] = {"type": data.pop("role")}
        return data

    @field_validator("ts")
    @classmethod
    def _ts(cls, value: str | None) -> str | None:
        return None if value is None else parse_ts(value)

    @model_validator(mode="after")
    def _has_content(self) -> EventIn:
        if not self.content:
            raise ValueError("content is empty (give content.text or text)")
        return self


class ChannelScore(BaseModel):
    rank: int
    score: float


class Hit(BaseModel):
    id: int
    kind: str
    category: str | None
    text: str
    score: float
    scores: dict[str, ChannelScore] = Field(default_factory=dict)
    boosts: dict[str, float] = Field(default_factory=dict)
    event_id: str | None
    tenant_id: str
    user_id: str | None
    agent_id: str | None
    session_id: str | None
    app_id: str | None
    run_id: str | None
    channel: str
    sensitivity: str
    actor_type: str | None
    actor_id: str | None
    event_time: str
    importance: float
    pinned: bool
    tokens: int
    source_ids: list[Any] = Field(default_factory=list)
    # The scope of the search that answered (session | user | all), on every hit, so a JSON
    # array says whether a session query widened to its user.
    scope: str | None = None
    # Per query, on every hit as `scope` is (a JSON array has nowhere else to say it).
    rerank_score: float | None = Field(
        default=None, description="The configured reranker's own score for this hit "
        "(docs/guides/reranking.md); null when none is configured, the hit was beyond its "
        "top N, or it was skipped.")
    rerank_skipped: str | None = Field(
        default=None, description="Why the configured reranker was skipped for this query (down, "
        "timeout, a bad answer): the order is then the fused one. Null otherwise.")

    def bullet(self) -> dict[str, Any]:
        """The memory system spec's bullet: `{id, category, text}`, plus the scope every hit
        carries."""
        return {"id": self.id, "category": self.category, "text": self.text,
                "scope": self.scope}


class RecordProblem(BaseModel):
    model_config = ConfigDict(defer_build=True)
    source: str | None = None
    line: int
    reason: str
    event_id: str | None = None


class IngestReport(BaseModel):
    model_config = ConfigDict(defer_build=True)
    created: list[str] = Field(default_factory=list)  # event ids
    memory_ids: list[int] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)
    rejected: list[RecordProblem] = Field(default_factory=list)
    redacted: list[dict[str, Any]] = Field(default_factory=list)  # {event_id, kinds}
    artifacts: list[str] = Field(default_factory=list)
    ledger: list[dict[str, Any]] = Field(default_factory=list)  # {event_id, decision/task_id}
    embedded: int = 0
    deferred_embedding: int = 0

    # The same report for each input record, in input order (memcli.ingest fills it): what
    # `POST /api/v1/events` answers per event. Not part of the CLI's JSON.
    _records: list[IngestReport] = PrivateAttr(default_factory=list)

    _WRITTEN: ClassVar[tuple[str, ...]] = ("created", "memory_ids", "redacted", "artifacts")

    @property
    def records(self) -> list[IngestReport]:
        return self._records

    def marks(self) -> tuple[int, ...]:
        """Where the lists a write appends to end now, for `reset_to` after a rollback."""
        return (*(len(getattr(self, name)) for name in self._WRITTEN), self.embedded)

    def reset_to(self, marks: tuple[int, ...]) -> None:
        """Forget what writes added after `marks` (their savepoint was rolled back)."""
        for name, n in zip(self._WRITTEN, marks, strict=False):
            del getattr(self, name)[n:]
        self.embedded = marks[-1]


class EventReceipt(IngestReport):
    """One record's answer to `POST /api/v1/events` and `memory_record_event`: the Agent Memory
    System PRD's `{event_id, chunk_ids, created_at}` (7.1) beside the ingest report of that
    record (the fields `memcli ingest --json` prints for a batch). A repeat names the stored
    event it repeats; a rejected record has no chunks and no `created_at`."""

    event_id: str | None = None
    chunk_ids: list[int] = Field(default_factory=list)  # its episode memories, in order
    created_at: str | None = None  # when memcli stored the event (its `recorded_at`)

    def payload(self) -> dict[str, Any]:
        """The JSON answer: the document's fields first, then the report's."""
        out = self.model_dump()
        return {k: out.pop(k) for k in ("event_id", "chunk_ids", "created_at")} | out


class RerankReport(BaseModel):
    """What the configured reranker did for one query or bundle (memcli.retrieval.rerank)."""

    model: str  # the model named in the settings, else the endpoint
    candidates: int = 0  # how many of the fused top were sent
    reranked: bool = False
    skipped: str | None = None  # why not, in one line: the fused order stands
    latency_ms: float = 0.0  # the round trip, the server's own time included
    scores: dict[int, float] = Field(default_factory=dict, exclude=True)  # memory id -> score


class QueryResult(BaseModel):
    query: str
    scope: str  # session | user | all: the scope that answered
    path: str = ""  # the scopes searched, e.g. "session>user" when a session query widened
    hits: list[Hit]
    legs: dict[str, int] = Field(default_factory=dict)  # candidates per leg
    fusion: str
    budget_tokens: int | None = None
    tokens_used: int = 0
    latency_ms: float = 0.0
    rerank: RerankReport | None = None  # None: no reranker configured
