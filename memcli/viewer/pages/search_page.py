"""The search page: the hybrid query of `memcli query` (memcli.operations.retrieve.run_query on
the QueryRequest model, bound to the caller's scope as `POST /api/v1/query` binds it), each hit
with what `--explain` shows: the legs that found it (rank and score) and its boosts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.operations.binding import bound
from memcli.operations.requests import QueryRequest, validated
from memcli.operations.retrieve import run_query
from memcli.viewer.pages.timeline import filled

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from memcli.viewer.site import Pages

# The form's fields: the request's own names (a field left empty is not sent).
FIELDS = ("query", "tenant_id", "user_id", "session_id", "app_id", "agent_id", "top_k", "as_of")


def search(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    """The query's answer as `memcli query --explain` has it: scope, path and hits."""
    given = {k: v for k, v in filled(params).items() if k in FIELDS or k == "agent"}
    req = bound(ctx.memory, scope, validated(QueryRequest, given, "query request"))
    out = run_query(ctx.memory, req).model_dump()
    return {"result": out, "note": req.truncation(), "tenant_id": req.tenant_id}


def register(site: Pages) -> None:
    async def show(request: Request, scope: Any) -> Response:
        params = dict(request.query_params)
        data: dict[str, Any] = {}
        if params.get("query", "").strip():
            data = await site.run(search, scope, params)
        return site.render(request, "search.html", scope, title="Search",
                           form={k: params.get(k, "") for k in FIELDS}, **data)

    site.get("/search", show, name="search")
