"""The bundle page: "what will my agent see?" for a user, a session and a question.

The bundle is the one `memcli acb build --json` prints for the same request, built by the same
operation (memcli.operations.bundle) inside the caller's bound scope as `POST /api/v1/acb/build`
binds it; this module only adds what a person reads off it at a glance: each section's share of
its cap, each item's references as links, the omissions beside the section they were cut from.
The page never moves the delta header's base (`track` off): looking at a bundle must not change
the next one the agent gets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from memcli.operations.binding import bound
from memcli.operations.bundle import acb_payload
from memcli.operations.requests import AcbRequest, parse_acb_request

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from memcli.viewer.site import Pages

# The form's fields: the request's own names (as the other pages name theirs); the old
# spellings of a link made before 0.2.0 (`max_tokens`) are read too.
FIELDS = ("tenant_id", "user_id", "session_id", "query", "channel", "agent_id", "app_id",
          "budget_tokens")
_READ = frozenset(FIELDS) | frozenset(AcbRequest.OLD.values())
CHANNELS = ("private", "team", "public", "agent")


def acb_request(params: dict[str, str]) -> AcbRequest | None:
    """The acb request for the form's values; None while no user, session or question is
    given (the empty form)."""
    given = {k: v.strip() for k, v in params.items() if k in _READ and v.strip()}
    if not given.keys() & {"user_id", "session_id", "query", "user", "session", "query_text"}:
        return None
    return parse_acb_request({"track": False, **given})


def bundle(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    """`{"bundle": ...}`: the bundle for the form, read for the page (None for the empty
    form)."""
    req = acb_request(params)
    if req is None:
        return {"bundle": None}
    req = bound(ctx.memory, scope, req)
    payload = acb_payload(ctx.memory, req, settings=ctx.settings, allowed=scope.categories)
    return {"bundle": bundle_view(payload, req.tenant_id or ctx.memory.tenant)}


def ref_link(ref: str, tenant: str) -> dict[str, str | None]:
    """A reference as the page shows it: `mem:12` links to the memory's page (in the bundle's
    tenant); the others (`event:ID`, `decision:3`, `view:rules`) are named."""
    kind, _, value = ref.partition(":")
    href = None
    if kind == "mem" and value.isdigit():
        href = f"/ui/memories/{value}?{urlencode({'tenant_id': tenant})}"
    return {"ref": ref, "href": href}


def bundle_view(payload: dict[str, Any], tenant: str) -> dict[str, Any]:
    """`payload` with, per section, its share of its cap and its omissions, and per item its
    references as links; the totals and the delta header as they are."""
    omitted: dict[str, list[dict[str, Any]]] = {}
    for row in payload.get("omissions") or []:
        omitted.setdefault(row.get("section", ""), []).append(row)
    sections = []
    for section in payload.get("sections") or []:
        cap, tokens = section.get("cap") or 0, section.get("tokens") or 0
        items = [{**item, "links": [ref_link(r, tenant) for r in item.get("refs") or []]}
                 for item in section.get("items") or []]
        sections.append({**section, "items": items, "omitted": omitted.get(section["name"], []),
                         "share": round(100 * tokens / cap, 1) if cap else None,
                         "over": bool(cap) and tokens > cap})
    provenance = payload.get("provenance") or {}
    return {"acb_id": payload.get("acb_id"), "budget": payload.get("budget_tokens"),
            "reserve": payload.get("reserve_tokens"), "used": payload.get("token_used"),
            "encoding": payload.get("encoding"), "delta": payload.get("delta"),
            "sections": sections, "omissions": payload.get("omissions") or [],
            "retrieval_path": provenance.get("retrieval_path"),
            "legs": provenance.get("legs") or {},
            "query_truncated": provenance.get("query_truncated")}


def register(site: Pages) -> None:
    async def show(request: Request, scope: Any) -> Response:
        params = dict(request.query_params)
        form = {k: params.get(k, "") for k in FIELDS}
        form["channel"] = form["channel"] or "private"
        built = await site.run(bundle, scope, params)
        return site.render(request, "bundle.html", scope, title="Bundle", form=form,
                           bundle=built["bundle"], channels=CHANNELS)

    site.get("/bundle", show, name="bundle")
