"""A server's caller binding and its rules, shared by the HTTP API, MCP and the web pages.

A server binds each caller (a `Binding`: a token's tenant, agent, user, app and categories; a
header or a path segment narrows it further), and `bound(memory, binding, request)` puts every
request inside it, the one place a request's scope keys meet the binding. It only narrows: a
request naming another tenant, user, agent or app than the one bound is refused
(NotAllowedError, HTTP 403), never answered from the other scope; rows outside it are "not
found" (memcli.store.owner).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from memcli.errors import NotAllowedError
from memcli.store.owner import Owner

if TYPE_CHECKING:
    from memcli.operations.memory import Memory

R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class Binding:
    """What the server bound for a caller. None: not bound (the request may name it; a read that
    names no tenant reads the configured one). `categories`: a category allowlist that narrows
    every read further (None: the agent's own allowlist only)."""

    tenant: str | None = None
    user_id: str | None = None
    agent: str | None = None  # the asking agent, whose category allowlist applies (memory spec)
    app_id: str | None = None
    categories: tuple[str, ...] | None = None

    def narrowed(self, **bound: str | None) -> Binding:
        """This scope with more keys bound (a header or path segment); a key bound already
        to another value is refused."""
        values: dict[str, Any] = {k: bind(k, getattr(self, k), v) for k, v in bound.items()}
        return replace(self, **values)


_NAMES = {"tenant": "tenant", "user_id": "user", "agent": "agent", "app_id": "app"}


def bind(key: str, bound: str | None, requested: str | None) -> str | None:
    """The value a request may use for a scope key: the bound one, or the request's own when
    nothing is bound. Naming another value than the bound one is refused."""
    if bound is None:
        return requested
    if requested is not None and requested != bound:
        name = _NAMES.get(key, key)
        raise NotAllowedError(f"this caller is bound to {name} {bound!r}, the request names "
                              f"{requested!r}", f"use {name} {bound!r} or another token")
    return bound


def tenant(memory: Memory, scope: Binding, requested: str | None) -> str:
    """The one tenant a request reads or writes."""
    return bind("tenant", scope.tenant, requested) or memory.tenant


def bound(memory: Memory, scope: Binding, request: R, category: str | None = None) -> R:
    """`request` inside the caller's binding: each scope key its model has (tenant, user,
    agent, app, categories) the bound value, or the request's own where nothing is bound; a
    key naming another value than the bound one, or a category outside the bound allowlist
    (`category`: the one a write lands in), is refused (403). `all_tenants` (an operator's
    search) is refused to a caller bound to a tenant, as naming another tenant would be."""
    fields = type(request).model_fields
    if category is not None:
        categories(scope, [category])
    update: dict[str, Any] = {}
    if getattr(request, "all_tenants", False):
        if scope.tenant is not None:
            raise NotAllowedError(f"this caller is bound to tenant {scope.tenant!r}, the "
                                  "request asks for all tenants",
                                  f"read tenant {scope.tenant!r}, or use an operator's token")
    elif "tenant_id" in fields:
        update["tenant_id"] = tenant(memory, scope, request.tenant_id)  # type: ignore[attr-defined]
    for key, name in (("user_id", "user_id"), ("agent_id", "agent"), ("app_id", "app_id")):
        if key in fields:
            update[key] = bind(name, getattr(scope, name), getattr(request, key))
    if "categories" in fields:
        asked = request.categories  # type: ignore[attr-defined]
        # An empty list asks for no category in particular: the bound allowlist still holds.
        wanted = categories(scope, asked or None)
        update["categories"] = asked if wanted is None else wanted
    return request.model_copy(update=update)


def categories(scope: Binding, requested: list[str] | None) -> list[str] | None:
    """The categories a read may see: the request's, inside the bound allowlist."""
    if scope.categories is None:
        return requested
    if requested is None:
        return list(scope.categories)
    outside = sorted(set(requested) - set(scope.categories))
    if outside:
        raise NotAllowedError(f"categories outside this caller's allowlist: {', '.join(outside)}",
                              "ask for " + ", ".join(scope.categories))
    return requested


def owner(memory: Memory, scope: Binding, tenant_id: str | None = None,
          user_id: str | None = None, app_id: str | None = None) -> Owner:
    """Whose rows this caller may touch by id (memcli.store.owner): the tenant (and user and
    app) the request names inside its binding, in the categories its token and its agent's
    allowlist both allow; any other row is "not found" (404), as an id that does not exist."""
    known = memory.categories
    allowed = known.allowed(scope.agent)  # None: every category
    cats = scope.categories
    if allowed is not None:
        cats = tuple(c for c in (cats or allowed) if c in allowed)
    hidden = known.hidden(scope.agent) if scope.agent is not None else ()
    return Owner(tenant_id=tenant(memory, scope, tenant_id),
                 user_id=bind("user_id", scope.user_id, user_id),
                 app_id=bind("app_id", scope.app_id, app_id),
                 categories=cats, hidden=hidden)
