"""The timeline: a scope's memories by time, newest first, grouped by session, with filters and
keyset paging (a page of 50 below the last id shown: never the whole table)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from memcli.core.request_base import Request as RequestModel
from memcli.operations import binding
from memcli.operations.requests import validated
from memcli.store.timeline_sql import memories_page, session_events

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from memcli.viewer.site import Pages

KINDS = ("episode", "fact", "summary", "insight", "reflection", "procedural", "decision", "task")
CHANNELS = ("private", "public", "team", "agent")
SENSITIVITIES = ("none", "low", "high")  # `secret` is never stored, never shown
STATES = ("active", "soft_deleted", "superseded")
PAGE = 50
SESSION_EVENTS = 200  # a session's events shown above its memories (its first ones)


class TimelineRequest(RequestModel):
    """The timeline's query parameters (an empty one is no filter)."""

    tenant_id: str | None = Field(default=None, min_length=1)
    user_id: str | None = None
    app_id: str | None = None
    session_id: str | None = None
    kind: Literal[KINDS] | None = None  # type: ignore[valid-type]
    category: str | None = None
    channel: Literal[CHANNELS] | None = None  # type: ignore[valid-type]
    sensitivity: Literal[SENSITIVITIES] | None = None  # type: ignore[valid-type]
    state: Literal[STATES] | None = None  # type: ignore[valid-type]
    before: int | None = Field(default=None, ge=1, description="the page below this id")
    limit: int = Field(default=PAGE, ge=1, le=500)


def filled(params: dict[str, str]) -> dict[str, str]:
    """The parameters given a value (a form's empty field is no filter)."""
    return {k: v for k, v in params.items() if v.strip()}


def timeline(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    """One page of the caller's memories, the filters as given, and the next page's cursor."""

    req = validated(TimelineRequest, filled(params), "timeline request")
    owner = binding.owner(ctx.memory, scope, req.tenant_id, req.user_id, req.app_id)
    rows = memories_page(ctx.memory.db, owner, before=req.before, limit=req.limit + 1,
                         equal={"kind": req.kind, "category": req.category,
                                "channel": req.channel, "sensitivity": req.sensitivity,
                                "state": req.state, "session_id": req.session_id})
    more = len(rows) > req.limit
    rows = rows[:req.limit]
    events = (session_events(ctx.memory.db, owner, req.session_id, SESSION_EVENTS)
              if req.session_id is not None and req.before is None else [])
    return {"tenant_id": owner.tenant_id, "groups": by_session(rows), "events": events,
            "next": rows[-1]["id"] if more and rows else None, "count": len(rows),
            "filters": req.model_dump(exclude={"before", "limit"}, exclude_none=True)}


def by_session(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive rows of one session as one group (rows are newest first)."""
    groups: list[dict[str, Any]] = []
    for row in rows:
        if not groups or groups[-1]["session_id"] != row["session_id"]:
            groups.append({"session_id": row["session_id"], "user_id": row["user_id"],
                           "rows": []})
        groups[-1]["rows"].append(row)
    return groups


def register(site: Pages) -> None:
    async def show(request: Request, scope: Any) -> Response:
        params = dict(request.query_params)
        data = await site.run(timeline, scope, params)
        query = {k: v for k, v in filled(params).items() if k != "before"}
        return site.render(request, "timeline.html", scope, title="Timeline",
                           choices={"kind": KINDS, "channel": CHANNELS,
                                    "sensitivity": SENSITIVITIES, "state": STATES},
                           query=query, paged="before" in params, **data)

    site.get("/", show, name="timeline")
