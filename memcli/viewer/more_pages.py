"""The bundle, ledger and dashboard pages of the web viewer: one route per page, each calling
one operation through the daemon's Service for the caller the viewer checked (memcli.viewer's
auth), rendered server-side from its template; the proposal decision is a form POST guarded
by the viewer's CSRF check, answered by a redirect back to the ledger (post/redirect/get).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from memcli.service import api
from memcli.viewer import bundle_view as bv
from memcli.viewer import kit as core
from memcli.viewer.dashboard_view import DashboardPage, dashboard
from memcli.viewer.ledger_view import LedgerPage, ProposalDecision, decide, ledger

router = APIRouter()


def _form(request: Request, names: tuple[str, ...]) -> dict[str, str]:
    return {name: request.query_params.get(name, "") for name in names}


@router.get("/bundle", name="ui_bundle")
def bundle_page(request: Request) -> Response:
    """The exact `acb build` result for the form's user, session and question."""
    scope = core.caller(request)
    form = _form(request, bv.FORM_FIELDS)
    form["channel"] = form["channel"] or "private"
    asked = bv.acb_request(form)
    bundle = None
    if asked is not None:
        bundle = bv.bundle_view(core.run(request, api.build_acb, scope, asked))
    return core.render(request, "bundle.html", {"form": form, "bundle": bundle,
                                                "channels": bv.CHANNELS})


@router.get("/ledger", name="ui_ledger")
def ledger_page(request: Request) -> Response:
    """Decisions, tasks by status and consent proposals of one tenant (one user)."""
    scope = core.caller(request)
    form = _form(request, ("tenant", "user"))
    req = core.model(LedgerPage, {k: v for k, v in form.items() if v}, "ledger request")
    data = core.run(request, ledger, scope, req)
    return core.render(request, "ledger.html", {"form": form, "ledger": data,
                                                "message": request.query_params.get("done")})


@router.post("/proposals/{proposal_id}", name="ui_proposal")
async def proposal_decision(request: Request, proposal_id: int) -> Response:
    """Accept or reject a proposal (`memcli proposals accept|reject`), then back to the
    ledger with what happened."""
    scope = core.caller(request)
    form = await core.checked_form(request)
    req = core.model(ProposalDecision, {
        "proposal_id": proposal_id, "action": form.get("action", ""),
        "tenant": form.get("tenant") or None, "reason": form.get("reason") or None},
        "proposal decision")
    out = await core.run_async(request, decide, scope, req)
    done = (f"proposal {proposal_id} accepted: memory {out['memory_id']}"
            if req.action == "accept" else f"proposal {proposal_id} rejected")
    query = urlencode({"tenant": req.tenant or "", "done": done})
    return RedirectResponse(f"{core.prefix(request)}/ledger?{query}", status_code=303)


@router.get("/dashboard", name="ui_dashboard")
def dashboard_page(request: Request) -> Response:
    """`doctor`'s findings and `stats --requests` with the p95 latency chart."""
    scope = core.caller(request)
    since = request.query_params.get("since", "7d")
    req = core.model(DashboardPage, {"since": since,
                                     "fresh": request.query_params.get("fresh") == "1"},
                     "dashboard request")
    data = core.run(request, dashboard, scope, req)
    return core.render(request, "dashboard.html", {"data": data, "pct": _pct, "ms": _ms})


def _pct(value: Any) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def _ms(value: Any) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"
