"""The ledger page: decisions (active and superseded, linked both ways), tasks by status, and
the consent proposals a person accepts or rejects.

The reads are those of `memcli decision list --status all`, `task list` and `proposals list
--status all`, in the caller's bound scope. Accepting and rejecting are the very functions
`memcli proposals accept|reject` call (memcli.lifecycle.proposals), so they write the same
history rows, with `viewer` as who decided; a proposal outside the caller's scope is "not
found", as for an id that does not exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from memcli.core.request_base import Request as RequestModel
from memcli.lifecycle.proposals import accept, list_proposals, reject
from memcli.operations import binding, ledger_ops
from memcli.operations.binding import bound
from memcli.operations.requests import validated
from memcli.viewer.site import see_other

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from memcli.viewer.site import Pages

TASK_STATUSES = ("doing", "open", "done")
ACTOR = "ui"  # who decided, in the history rows (as the memory page's actions say)


class LedgerRequest(RequestModel):
    """What the ledger page reads: one tenant's rows (one user's)."""

    tenant_id: str | None = Field(default=None, min_length=1)
    user_id: str | None = Field(default=None, min_length=1)
    limit: int = Field(default=200, ge=1, le=10_000)


class ProposalDecision(RequestModel):
    """A proposal accepted or rejected on the page."""

    proposal_id: int = Field(ge=1)
    action: Literal["accept", "reject"]
    tenant_id: str | None = Field(default=None, min_length=1)
    reason: str | None = None


def _given(params: dict[str, str], model: type[RequestModel]) -> dict[str, str]:
    """The parameters the model reads, those given a value (an empty field is no filter)."""
    return {k: v for k, v in params.items() if k in model.model_fields and v.strip()}


def ledger(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    """Decisions with their links, tasks by status, proposals (pending; then decided)."""

    req = validated(LedgerRequest, _given(params, LedgerRequest), "ledger request")
    req = bound(ctx.memory, scope, req)
    tenant, user = req.tenant_id, req.user_id
    where = {"tenant_id": tenant, "user_id": user, "app_id": scope.app_id, "limit": req.limit}
    decisions = ledger_ops.query_decisions(
        ctx.memory, ledger_ops.DecisionsQuery(status="all", **where))
    tasks = ledger_ops.query_tasks(ctx.memory, ledger_ops.TasksQuery(**where))
    proposals = list_proposals(ctx.memory.db, status=None, tenant_id=tenant, user_id=user,
                               limit=req.limit)
    by_status: dict[str, list[dict[str, Any]]] = {s: [] for s in TASK_STATUSES}
    for task in tasks:
        by_status.setdefault(task["status"], []).append(task)
    return {"tenant": tenant, "user": user,
            "active": [d for d in decisions if d["status"] == "active"],
            "superseded": [d for d in decisions if d["status"] != "active"],
            "tasks": by_status,
            "pending": [p for p in proposals if p["status"] == "pending"],
            "decided": [p for p in proposals if p["status"] != "pending"]}


def decide(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    """`memcli proposals accept|reject ID` for this caller: what it answers."""

    req = validated(ProposalDecision, _given(params, ProposalDecision), "proposal decision")
    owner = binding.owner(ctx.memory, scope, req.tenant_id)
    if req.action == "accept":
        return accept(ctx.memory, req.proposal_id, owner=owner, by=ACTOR)
    return reject(ctx.memory.db, req.proposal_id, owner=owner, by=ACTOR,
                  reason=req.reason or None)


def register(site: Pages) -> None:

    async def show(request: Request, scope: Any) -> Response:
        params = dict(request.query_params)
        data = await site.run(ledger, scope, params)
        return site.render(request, "ledger.html", scope, title="Ledger",
                           form={k: params.get(k, "") for k in ("tenant_id", "user_id")},
                           ledger=data, done=params.get("done"))

    async def answer(request: Request, scope: Any, form: dict[str, str]) -> Response:
        pid = request.path_params["proposal_id"]
        out = await site.run(decide, scope, {**form, "proposal_id": str(pid)})
        done = (f"proposal {pid} accepted: memory {out['memory_id']}"
                if out["status"] == "accepted" else f"proposal {pid} rejected")
        return see_other("/ui/ledger", tenant_id=form.get("tenant_id") or None,
                         user_id=form.get("user_id") or None, done=done)

    site.get("/ledger", show, name="ledger")
    site.post("/proposals/{proposal_id:int}", answer, name="proposal")
