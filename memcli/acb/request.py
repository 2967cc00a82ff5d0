"""The `acb build` request model, apart from the bundle's code: the CLI builds its flags from
it and the HTTP and MCP schemas come from it, so every command's start imports it, and this
module imports nothing but pydantic and the shared request base. memcli.acb.build, which
builds the bundle, imports retrieval and the store: a command that builds no bundle must not
pay for them (docs/design/daemon.md, "Where a forwarded query's time goes").
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, field_validator

from memcli.config import check_bundle_budget
from memcli.core.records import Channel
from memcli.core.request_base import QueryText, Scope, Time, old_spellings

__all__ = ["AcbRequest"]


class AcbRequest(QueryText, Scope):
    """One `acb build` request: `memcli acb build` (flags or a JSON object on stdin), `POST
    /api/v1/acb/build`, the MCP `memory_build_acb` tool. Built on the shared scope; it spells
    what it shares with a query as a query does (`query`, `agent_id`, `budget_tokens`)."""

    # Old spellings, read until 0.2.0: the PRD's `query_text` and `max_tokens`, `agent`, and
    # the short scope names of the first command line.
    OLD = {"query": "query_text", "budget_tokens": "max_tokens", "agent_id": "agent",
           "tenant_id": "tenant", "user_id": "user", "session_id": "session", "app_id": "app"}
    model_config = ConfigDict(alias_generator=old_spellings(OLD))

    agent_id: str | None = Field(  # the asking agent: its allowlist applies; the delta caller
        default=None, description="The asking agent: its category allowlist applies.")
    channel: Channel = Field(
        default="private",
        description="private (default), team, public or agent: decides which sensitivities load.")
    intent: str | None = Field(default=None, description="What the turn means to do (a label).")
    query: str | None = Field(
        default=None, description="What the next turn is about (retrieval runs only with it).")
    budget_tokens: int | None = Field(
        default=None, ge=1,
        description="Token budget of the whole bundle (default and most: 65000).")
    caps: dict[str, int] = Field(default_factory=dict,
                                 description="Per-section cap overrides: SECTION: TOKENS.")
    categories: list[str] = Field(default_factory=list,
                                  description="Only these categories as retrieved evidence.")
    since: int | dict[str, int] | None = Field(  # a revision, or {thread: revision}
        default=None, description="Delta header base revision (default: the last one you saw).")
    track: bool = Field(default=True, description="Remember this revision as seen (the base of "
                                                  "the next delta).")
    handoff: list[str] = Field(default_factory=list,
                               description="Text for the handoff packet (repeatable).")
    include_checkpoint: bool = Field(
        default=False, description="Add the saved checkpoint of (user, session) to the handoff.")
    # Time travel: the bundle as it would have been then (facts valid at that time, events up
    # to it, ranked on that clock). Default: now, ranked on the newest memory update.
    as_of: Time = Field(
        default=None, description="Read the memory as it was then: facts valid at that time, "
                                  "events up to it (ISO date or time, e.g. 2026-03-01).")
    min_relevance: float | None = Field(
        default=None, ge=0, le=1,
        description="Leave out retrieved evidence whose relevance (0-1) is under this. "
                    "Default: keep it all, unless none reaches retrieval.min_relevance (0.01): "
                    "then no evidence, and `no_relevant: true`.")

    @field_validator("budget_tokens")
    @classmethod
    def _budget(cls, value: int | None) -> int | None:
        return check_bundle_budget(value)

    @field_validator("handoff", mode="before")
    @classmethod
    def _one_handoff(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value
