"""A memory's page: its text and metadata, its history, its edges and the events it came from,
with the actions a person takes on it: correct, forget, restore, pin/unpin, confirm. Each
action is the CLI's own call (memcli.lifecycle: `memcli correct`, `forget`, `restore`, `pin`,
`unpin`, `confirm`) on the caller's scope, writes its history row, and redirects to the page
that shows the result."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.errors import UsageError
from memcli.lifecycle.correct import correct_fact
from memcli.lifecycle.purge import forget as soft_delete
from memcli.lifecycle.purge import restore as undelete
from memcli.lifecycle.remember import confirm as protect
from memcli.lifecycle.remember import set_pin
from memcli.operations import binding
from memcli.store import owner as own
from memcli.store.acb_sql import edges_with_memories
from memcli.store.events import get_events
from memcli.store.memories import get_memories
from memcli.viewer.site import see_other

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from memcli.store.owner import Owner
    from memcli.viewer.site import Pages

ACTOR = "ui"  # who the history rows of the page's actions name
DONE = {"corrected": "Corrected: this memory supersedes the old one.",
        "forgotten": "Forgotten (soft-deleted): restore it until it is purged.",
        "restored": "Restored.", "pinned": "Pinned.", "unpinned": "Unpinned.",
        "confirmed": "Confirmed: confidence 1, decay never touches it again."}


def _id(params: dict[str, str]) -> int:
    try:
        return int(params["memory_id"])
    except (KeyError, ValueError):
        raise UsageError("a memory id is a whole number") from None


def _owner(ctx: Any, scope: Any, params: dict[str, str]) -> Owner:
    return binding.owner(ctx.memory, scope, params.get("tenant_id") or None)


def memory_page(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    """The memory (the caller's, else not found), its history, edges and source events."""

    db = ctx.memory.db
    memory_id = _id(params)
    owner = _owner(ctx, scope, params)
    row = own.memory(db, memory_id, owner)
    history = ctx.memory.history(memory_id, owner=owner, limit=200)
    edges = edges_with_memories(db, memory_id, owner.tenant_id)
    others = get_memories(db, [e["other_id"] for e in edges],
                          ("id", "tenant_id", "user_id", "app_id", "category"))
    edges = [e for e in edges if (o := others.get(e["other_id"])) is not None
             and owner.holds(o, (o["category"],))]  # never a row the caller may not see
    return {"memory": row, "attributes": _json(row.get("attributes")),
            "source_ids": _json(row.get("source_ids")) or [],
            "history": history, "edges": edges, "events": _events(db, row, owner)}


def _events(db: Any, row: dict[str, Any], owner: Owner) -> list[dict[str, Any]]:
    """The events the memory cites (its own event, then the event ids among its sources), in
    the caller's tenant, user and app; a `secret` event's content is never shown."""

    ids = [row["event_id"]] if row.get("event_id") else []
    ids += [s for s in _json(row.get("source_ids")) or [] if isinstance(s, str) and s not in ids]
    out = []
    for event in get_events(db, ids[:50]):
        if not owner.holds(event, (row["category"],)):
            continue
        if event["sensitivity"] == "secret":
            event = {**event, "content": None, "tags": [], "refs": []}
        out.append(event)
    return out


def _json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


# -- the actions: each the CLI's call, on the caller's scope ---------------------------------
def correct(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    return correct_fact(ctx.memory, _id(params), params.get("text", ""),
                        reason=params.get("reason", ""), owner=_owner(ctx, scope, params),
                        actor=ACTOR)


def forget(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    return soft_delete(ctx.memory.db, _id(params), owner=_owner(ctx, scope, params),
                       actor=ACTOR)


def restore(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    return undelete(ctx.memory.db, _id(params), owner=_owner(ctx, scope, params), actor=ACTOR)


def pin(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    return set_pin(ctx.memory, _id(params), True, owner=_owner(ctx, scope, params), actor=ACTOR)


def unpin(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    return set_pin(ctx.memory, _id(params), False, owner=_owner(ctx, scope, params),
                   actor=ACTOR)


def confirm(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    return protect(ctx.memory, _id(params), owner=_owner(ctx, scope, params), actor=ACTOR)


# (form action, operation, word shown after it)
ACTIONS = (("correct", correct, "corrected"), ("forget", forget, "forgotten"),
           ("restore", restore, "restored"), ("pin", pin, "pinned"),
           ("unpin", unpin, "unpinned"), ("confirm", confirm, "confirmed"))


def register(site: Pages) -> None:
    async def show(request: Request, scope: Any) -> Response:
        params = {**request.query_params, **request.path_params}
        data = await site.run(memory_page, scope, params)
        done = DONE.get(request.query_params.get("done", ""))
        return site.render(request, "memory.html", scope,
                           title=f"Memory {data['memory']['id']}", done=done, **data)

    site.get("/memories/{memory_id}", show, name="memory")

    for action, op, word in ACTIONS:
        def handler(op: Any = op, word: str = word) -> Any:
            async def act(request: Request, scope: Any, form: dict[str, str]) -> Response:
                params = {**form, **request.path_params}
                out = await site.run(op, scope, params)
                # A correction is a new memory: show that one.
                shown = out.get("id", params["memory_id"])
                return see_other(f"/ui/memories/{shown}", tenant_id=params.get("tenant_id"),
                                 done=word)
            return act

        site.post(f"/memories/{{memory_id}}/{action}", handler(), name=f"memory_{action}")
