"""What `memcli serve`'s HTTP routes answer: one pydantic model per answer, for /openapi.json.

The answers are built by the same functions as the CLI's JSON (memcli.operations, memcli.ledger,
memcli.lifecycle, memcli.acb) as dicts; the HTTP app checks each answer against its route's
model before sending it, unchanged (memcli.service.http.fastapi_app), so the published schema is
what a client gets. Models list the fields every answer carries; `extra="allow"` where an answer may
carry more than is listed (a bundle's items, an ingest report's ledger rows), so a field added
to an answer is documented by adding it here, never lost on the way out.

The bundle models follow the Agent Memory System PRD's fields (its section 7) and memcli's own
beside them; tests/service/test_prd_contract.py validates real answers against them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    """An answer that may carry more fields than the model lists."""

    model_config = ConfigDict(extra="allow")


class ErrorBody(BaseModel):
    """An error: the CLI's one-line message and its exit code (2 bad input, 75 busy, 1 other)."""

    error: str
    exit_code: int


class Health(BaseModel):
    """`GET /healthz`: the server answers."""

    status: str
    version: str


# -- the active context bundle -----------------------------------------------------------------
class RelatedMemory(BaseModel):
    """A memory linked to a retrieved one, shown with it as a bullet."""

    id: int = Field(description="The related memory's id.")
    strength: float = Field(description="How strongly the two are linked (0..1).")


class BundleItem(_Open):
    """One item of a section. Every item has `type`, `text`, `refs` and `tokens`; the other
    fields appear only on the items they apply to."""

    type: str = Field(
        description="What the item is: view (identity, rules), profile, reflection, "
        "app_memory, task, decision, text (a handoff given in the request), checkpoint, "
        "memory (retrieved evidence) or turn (the recent window)."
    )
    text: str = Field(description="The item as the rendered bundle shows it.")
    refs: list[str] = Field(
        description="What it cites: `mem:N`, `event:E`, `decision:N`, `task:N`, `view:NAME`, "
        "`checkpoint:USER/SESSION`, `request:handoff`. A summary cites the turns it "
        "summarises; an item that absorbed duplicates cites theirs too."
    )
    tokens: int | None = Field(None, description="The item's rendered line in tokens.")
    memory_id: int | None = Field(
        None,
        description="The memory shown (`memcli history ID`); every item but a view, "
        "a handoff text and a checkpoint.",
    )
    decision_id: int | None = Field(None, description="Decision items: the ledger's id.")
    task_id: int | None = Field(None, description="Task items: the ledger's id.")
    status: str | None = Field(None, description="Task items: open, doing or done.")
    score: float | None = Field(
        None,
        description="Retrieved evidence: its ranking score after every stage. A "
        "summary never shows more than the best of its own turns.",
    )
    relevance: float | None = Field(
        None,
        description="Retrieved evidence: the calibrated probability (0-1) that it is "
        "evidence for the query, comparable across queries (a summary: at most its turns').",
    )
    boosts: dict[str, float] | None = Field(
        None, description="Retrieved evidence: what each ranking stage added to the score."
    )
    rerank_score: float | None = Field(
        None,
        description="Retrieved evidence in the configured reranker's top N: the reranker's "
        "own score (docs/guides/reranking.md); the order follows it.",
    )
    derived: bool | None = Field(
        None, description="Retrieved evidence: a summary (its `refs` are its source turns)."
    )
    related: list[RelatedMemory] | None = Field(
        None, description="Retrieved evidence: linked memories shown with it (also in refs)."
    )
    superseded_by: str | None = Field(
        None,
        description="Retrieved evidence of a decision a newer one replaced: the "
        'active decision, `decision:N` (the text says "(superseded by DN)"); such items '
        "rank after every unmarked one.",
    )
    conflicts_with: list[str] | None = Field(
        None,
        description="A summary whose numbers or dates are not its turns': the refs of "
        "the turns it disagrees with (what was said ranks first).",
    )
    duplicates: list[int] | None = Field(
        None,
        description="Memory ids folded into this item: the same sentence said again, "
        "or a decision's own turn and summary (their refs are cited here).",
    )
    artifact_id: str | None = Field(
        None,
        description="A truncated tool output: its full output (`memcli artifact ID`, "
        "`GET /api/v1/artifacts/{artifact_id}`).",
    )
    truncated: bool | None = Field(None, description="The text was cut to fit the budget.")


class BundleSection(_Open):
    name: str
    items: list[BundleItem]
    token_est: int  # the section's tokens (tiktoken's count, exact)
    tokens: int  # the same, memcli's earlier name
    cap: int
    priority: int


class Omission(_Open):
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


class RerankSummary(BaseModel):
    """What the configured reranker did for a bundle's retrieval."""

    model: str = Field(description="The model named in the settings, else the endpoint.")
    candidates: int = Field(description="How many of the fused top were sent.")
    reranked: bool = Field(description="The top was put in the reranker's order.")
    skipped: str | None = Field(
        description="Why it was not (down, timeout, a bad answer): the fused order stands."
    )
    latency_ms: float = Field(description="The round trip, the server's own time included.")


class Provenance(_Open):
    intent: str | None
    query_terms: list[str]
    candidate_pool_size: int
    filters: dict[str, Any]  # sensitivity_allowed, and the scope the bundle read
    scoring: Scoring
    weights: dict[str, Any]  # alpha, beta, gamma, fusion, legs, half_life_days, w_rel
    rerank: RerankSummary | None = Field(
        None, description="What the configured reranker did; null: none is configured."
    )


class Bundle(_Open):
    """An active context bundle (`memcli acb build --json`)."""

    acb_id: str
    budget_tokens: int
    token_used_est: int  # the rendered bundle's tokens (tiktoken's count, exact)
    token_used: int  # the same, memcli's earlier name
    reserve_tokens: int
    sections: list[BundleSection]
    omissions: list[Omission]
    provenance: Provenance
    no_relevant: bool = Field(
        False, description="The query found nothing relevant: no candidate reached "
        "`min_relevance` (by default retrieval.min_relevance), so no retrieved evidence is "
        "shown, but for the newest memories that stand in when no leg matched at all "
        "(`provenance.retrieval_path` ending in `>recent`).")


# -- query -------------------------------------------------------------------------------------
class Bullet(BaseModel):
    """A hit as the memory system spec's bullet (`"return": "bullets"`)."""

    id: int
    category: str | None
    text: str
    scope: str | None  # session | user | all: the search that answered


class Artifact(BaseModel):
    """The full output kept for a truncated tool result (`memcli artifact ID`)."""

    artifact_id: str
    tenant_id: str
    bytes: int
    text: str  # decoded as UTF-8, bad bytes replaced


# -- the ledger --------------------------------------------------------------------------------
class _LedgerRow(_Open):
    id: int
    memory_id: int | None
    tenant_id: str
    user_id: str | None
    session_id: str | None
    agent_id: str | None
    app_id: str | None
    status: str
    refs: list[str]
    created_at: str
    updated_at: str


class Decision(_LedgerRow):
    """A decision of the ledger (`memcli decision add/list --json`); a write also names the
    kinds of secret it redacted (`redacted`)."""

    scope: str
    decision: str
    rationale: list[str]
    constraints: list[str]
    alternatives: list[str]
    consequences: list[str]
    supersedes: int | None
    superseded_by: int | None


class Task(_LedgerRow):
    """A task of the ledger (`memcli task add/update --json`)."""

    title: str
    details: str


# -- memories ----------------------------------------------------------------------------------
class HistoryEntry(_Open):
    """One change to a memory (`memcli history ID --json`), newest first."""

    id: int
    memory_id: int | None
    event_id: str | None
    op: str  # ADD | UPDATE | MERGE | DELETE | ...
    old_ref: str | None
    new_ref: str | None
    actor: str | None
    tenant_id: str
    meta: dict[str, Any]
    ts: str


class Remembered(_Open):
    """`memcli remember --json`: the fact or procedure stored (`created`) or merged into
    (`merged`), or for a profile field the proposal made (`proposed`, `unchanged`,
    `already_pending`); `redacted` names the kinds of secret taken out."""

    status: str
    id: int | None = None
    kind: str | None = None
    redacted: list[Any] = []


class Forgotten(_Open):
    """`memcli forget ID --json`: soft-deleted, purged for good at `purge_at`."""

    id: int
    state: str
    purge_at: str


class AppMemory(_Open):
    id: int
    kind: str
    category: str | None
    content: str
    user_id: str | None
    agent_id: str | None
    session_id: str | None
    sensitivity: str
    importance: float
    pinned: bool
    created_at: str
    updated_at: str


class AppMemories(BaseModel):
    """An app's active memories, newest first."""

    tenant_id: str
    app_id: str
    memories: list[AppMemory]


class Purged(_Open):
    """`memcli purge --json`: what was deleted for good, and the scope it was deleted in."""

    scope: dict[str, Any]
    events: int
    memories: int
    artifacts: int
    complete: bool
    dry_run: bool
