"""`memcli serve`'s HTTP API: a FastAPI app of memcli.service.http.routes, with the MCP server.

The routes, their request and answer models, and so /openapi.json, come from
memcli.service.http.routes; what every API route does around its operation (the caller's check, the
body's rules, the one-line errors, the answer's check) from memcli.service.http.api_route. Here: the
app around them. A body over the limit is refused before it is read (memcli.service.http.limits), a
Host header naming another host is refused (DNS rebinding), and what routing refuses (no such
route, wrong method) answers with the same JSON error as every other refusal.

Every request is scoped: the bearer token's binding (memcli.service.http.auth), then the
`X-Memcli-Tenant` / `-Agent` / `-User` / `-App` headers, which may only narrow it; the path's
app id likewise.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from memcli import __version__
from memcli.service import api
from memcli.service.http import routes as api_routes
from memcli.service.http.api_route import error_response, invalid
from memcli.service.http.auth import Auth, caller_scope
from memcli.service.http.limits import MAX_BODY_BYTES, BodyLimit
from memcli.service.mcp_server import http_routes
from memcli.viewer.mount import viewer_routes

if TYPE_CHECKING:
    from memcli.config import Settings


def build_app(settings: Settings, auth: Auth, *, service: api.Service | None = None,
              routes: Sequence[BaseRoute] = (),
              lifespans: Sequence[Callable[[FastAPI], AbstractAsyncContextManager[Any]]] = (),
              ui_url: str | None = None) -> FastAPI:
    """The HTTP API for the database of `settings`, guarded by `auth`.

    `service`: an open Service to share (the daemon's); by default the app opens its own and
    closes it on shutdown. `routes`: more routes behind the same Host check; `lifespans`:
    their start-up/shutdown contexts, entered in order. `ui_url`: the daemon's TCP address
    (`http://host:port`), where the login links of the pages (/ui, memcli.viewer) point."""

    own = service is None
    svc = service or api.Service(settings)
    # The MCP server (streamable HTTP) at /mcp, behind the same token and scope headers.
    mcp_routes, mcp_lifespan = http_routes(settings, svc, caller=lambda r: caller_scope(r, auth),
                                           allowed_hosts=tuple(auth.allowed_hosts))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with AsyncExitStack() as stack:
                await stack.enter_async_context(mcp_lifespan())
                for enter in lifespans:
                    await stack.enter_async_context(enter(app))
                yield
        finally:
            if own:
                svc.close()

    app = FastAPI(
        title="memcli", version=__version__,
        description="Long-term memory for AI agents: `memcli serve`'s HTTP API.",
        docs_url=None, redoc_url=None, lifespan=lifespan,
        middleware=[Middleware(BodyLimit, limit=MAX_BODY_BYTES),
                    Middleware(TrustedHostMiddleware, allowed_hosts=list(auth.allowed_hosts),
                               www_redirect=False)],
        exception_handlers={HTTPException: _http_error, RequestValidationError: _invalid},
        generate_unique_id_function=_operation_id)
    app.include_router(api_routes.public)
    app.include_router(api_routes.router)
    # The web pages at /ui: the same token rules, not part of /openapi.json.
    pages = viewer_routes(svc, check=auth.check, allowed_hosts=tuple(auth.allowed_hosts),
                          token_required=auth.required, status_for=api.status_for,
                          tcp_url=ui_url)
    app.router.routes.extend([*mcp_routes, *pages, *routes])
    app.state.service = svc
    app.state.auth = auth
    return app


def _operation_id(route: APIRoute) -> str:
    return route.name  # the endpoint's name: record_events, build_acb, query, ...


async def _http_error(_request: Request, exc: Exception) -> Response:
    """Routing's own refusals (no such route, wrong method) as JSON like every other error."""
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": exc.detail, "exit_code": 2}, status_code=exc.status_code,
                        headers=exc.headers)


async def _invalid(_request: Request, exc: Exception) -> Response:
    """A validation error outside an API route (ApiRoute labels its own): one line, 422."""
    assert isinstance(exc, RequestValidationError)
    return error_response(invalid("request", exc.errors()))
