"""The request models of the memory's life: remembering, forgetting, the cron jobs that
consolidate, decay and reflect, pins and consent proposals, an app's memories, the counts.

One model per operation, as in memcli.operations.requests: `memcli consolidate`'s flags,
`POST /api/v1/memories`' body and the MCP `memory_remember` tool's arguments are built from the same
fields, each declared once with its help. Nothing here imports Typer, HTTP or the store.
"""

from __future__ import annotations

from pydantic import Field

from memcli.core.ids import Id
from memcli.core.request_base import Request, Scope, TenantScope, UserScope

DRY_RUN = "Print the plan; write nothing."


class ConsolidateRequest(UserScope, TenantScope):
    """`memcli consolidate`: finished sessions turned into deduplicated facts and summaries."""

    session_id: str | None = Field(
        default=None, description="Consolidate this session now, even if it is still open.")
    idle_hours: float | None = Field(
        default=None, ge=0, description="Also take a user's latest session once idle this long.")
    no_llm: bool = Field(
        default=False, description="Model-free parts only, even with a model configured.")
    dry_run: bool = Field(default=False, description=DRY_RUN)


class DecayRequest(Request):
    """`memcli decay`: Ebbinghaus decay and the TTL rule."""

    purge_expired: bool = Field(
        default=False, description="Also hard-delete soft-deleted memories past purge_at.")
    threshold: float | None = Field(
        default=None, ge=0, le=1,
        description="Soft-delete below this confidence (default 0.05).")
    dry_run: bool = Field(default=False, description=DRY_RUN)


class ReflectRequest(UserScope, TenantScope):
    """`memcli reflect` and `memcli insights`: one per-user model job, run under a lock."""

    force: bool = Field(default=False, description="Ignore the skip rules.")
    dry_run: bool = Field(default=False, description=DRY_RUN)


class RememberRequest(Scope):
    """`memcli remember`, `POST /api/v1/memories`, the MCP `memory_remember` tool: a fact, or a
    procedure (`procedural`, `steps`)."""

    text: str | None = Field(default=None, description="The fact (or a procedure's steps).")
    procedural: bool = Field(
        default=False, description="Numbered how-to steps (lines, `;` or several steps).")
    steps: list[str] = Field(
        default_factory=list, description="One step of a procedure (repeatable).")
    title: str | None = Field(default=None, description="A procedure's title.")
    field: str | None = Field(
        default=None, description="A sensitive profile field (preferred_name, pronouns, city, "
                                  "language): queued for consent.")
    agent_id: str | None = Field(default=None, description="The writing agent's id.")
    category: str | None = Field(default=None, description="Category (default knowledge).")
    importance: float | None = Field(default=None, ge=0, le=1, description="Importance (0-1).")
    pinned: bool = Field(default=False, description="Pin it.")

    def target(self) -> str:
        """The category the write lands in (what a bound category allowlist must allow)."""
        if self.procedural:
            return "procedural"
        return "profile" if self.field is not None else self.category or "knowledge"


class MemoryRequest(TenantScope):
    """One memory by id, in one tenant: `forget`, `restore`, `confirm`, `pin`, `unpin`,
    `DELETE /api/v1/memories/{id}`, the MCP `memory_forget` tool."""

    memory_id: Id = Field(description="A memory id.")


class ProposalsRequest(UserScope, TenantScope):
    """`memcli proposals list`: proposed changes to a sensitive profile field."""

    status: str = Field(default="pending",
                        description="pending, accepted, rejected, expired or all.")
    limit: int = Field(default=100, ge=1, description="How many rows at most.")


class ProposalRequest(Request):
    """`memcli proposals accept`: one proposal by id."""

    proposal_id: Id = Field(description="A proposal id.")


class RejectRequest(ProposalRequest):
    """`memcli proposals reject`: one proposal refused, and why."""

    reason: str | None = Field(default=None, description="Why it is refused (kept in history).")


class StatsRequest(Request):
    """`memcli stats`: counts, or request metrics, or model usage."""

    requests: bool = Field(
        default=False, description="Query and acb request metrics: hit rate, fallback and "
                                   "truncation shares, p50/p95 latency.")
    since: str | None = Field(
        default=None, description="With --requests: a window like 24h, 7d, 30m, or an ISO "
                                  "time (default: all).")
    usage: bool = Field(default=False,
                        description="LLM calls, tokens and cost per command and per day.")


class AppMemoriesRequest(UserScope, TenantScope):
    """The app-memory design's admin operations on an app: list its memories, delete them
    all, or delete one (`memory_id`)."""

    app_id: str = Field(min_length=1, description="The app's id.")
    memory_id: Id | None = Field(default=None, description="One memory of the app.")
    limit: int = Field(default=100, ge=1, le=10_000, description="How many memories at most.")
