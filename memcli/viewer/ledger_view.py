"""The ledger page's operations: decisions (active and superseded, linked), tasks by status,
consent proposals, and the proposal decisions the page posts.

Each is `op(ctx, scope, request)` as the HTTP API's operations are (memcli.service.api), run by
the daemon's Service for one caller: the caller's bound scope decides the tenant and user they
read, and a proposal of another scope is "not found", as `memcli proposals accept` says for
an id it does not own. Accepting and rejecting are the very functions `memcli proposals`
calls (memcli.lifecycle.proposals), so the history row they write is the same, with the
viewer named as who decided.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from memcli.operations.ledger_ops import DecisionsQuery, TasksQuery
from memcli.service.api import _bind, _owner, _tenant

if TYPE_CHECKING:
    from memcli.service.api import Context, Scope

TASK_STATUSES = ("doing", "open", "done")
ACTOR = "viewer"  # the history rows' actor for what a person did on the page


class LedgerPage(BaseModel):
    """What the ledger page reads: one tenant's (one user's) rows."""

    tenant: str | None = Field(default=None, min_length=1)
    user: str | None = Field(default=None, min_length=1)
    limit: int = Field(default=200, ge=1, le=10_000)


class ProposalDecision(BaseModel):
    """A proposal accepted or rejected on the page."""

    proposal_id: int = Field(ge=1)
    action: Literal["accept", "reject"]
    tenant: str | None = Field(default=None, min_length=1)
    reason: str | None = None


def ledger(ctx: Context, scope: Scope, req: LedgerPage) -> dict[str, Any]:
    """Decisions with their links both ways, tasks by status, and the proposals (pending
    first, then the decided ones, newest first)."""
    from memcli.lifecycle.proposals import list_proposals
    from memcli.operations import ledger_ops

    tenant = _tenant(ctx, scope, req.tenant)
    user = _bind("user_id", scope.user_id, req.user)
    app = scope.app_id
    decisions = ledger_ops.query_decisions(ctx.memory, DecisionsQuery(
        tenant_id=tenant, user_id=user, app_id=app, status="all", limit=req.limit))
    tasks = ledger_ops.query_tasks(ctx.memory, TasksQuery(
        tenant_id=tenant, user_id=user, app_id=app, limit=req.limit))
    proposals = list_proposals(ctx.memory.db, status=None, tenant_id=tenant, user_id=user,
                               limit=req.limit)
    by_status: dict[str, list[dict[str, Any]]] = {s: [] for s in TASK_STATUSES}
    for task in tasks:
        by_status.setdefault(task["status"], []).append(task)
    pending = [p for p in proposals if p["status"] == "pending"]
    return {"tenant": tenant, "user": user,
            "active": [d for d in decisions if d["status"] == "active"],
            "superseded": [d for d in decisions if d["status"] != "active"],
            "tasks": by_status, "pending": pending,
            "decided": [p for p in proposals if p["status"] != "pending"]}


def decide(ctx: Context, scope: Scope, req: ProposalDecision) -> dict[str, Any]:
    """`memcli proposals accept|reject ID` for this caller: the proposal's row after it."""
    from memcli.lifecycle.proposals import accept, reject

    owner = _owner(ctx, scope, req.tenant)
    if req.action == "accept":
        return accept(ctx.memory, req.proposal_id, owner=owner, by=ACTOR)
    return reject(ctx.memory.db, req.proposal_id, owner=owner, by=ACTOR,
                  reason=req.reason or None)
