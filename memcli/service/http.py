"""`memcli serve`'s HTTP API: a Starlette app over memcli.service.api.

Routes (seed 003, seed 000, seed 001), each one operation of memcli.service.api answering with
the JSON the CLI prints for the same request. JSON bodies are validated by the CLI's pydantic
models; the OpenAPI document (`GET /openapi.json`) is generated from the same models and the
same route table, so it cannot list a route the app does not serve.

Every request is scoped: the bearer token's binding (memcli.service.auth), then the
`X-Memcli-Tenant` / `-Agent` / `-User` / `-App` headers, which may only narrow it; the path's
app id likewise. Handlers read the body on the event loop and run the operation on Starlette's
thread pool (SQLite, the models), so a slow bundle never blocks other requests.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute
from starlette.routing import Route as StarletteRoute

from memcli import __version__
from memcli.errors import MemcliError, NotAllowedError
from memcli.service import api, models
from memcli.service.auth import Auth
from memcli.service.limits import MAX_BODY_BYTES, BodyLimit

if TYPE_CHECKING:
    from pydantic import BaseModel

    from memcli.config import Settings

SCOPE_HEADERS = {"x-memcli-tenant": "tenant", "x-memcli-agent": "agent",
                 "x-memcli-user": "user_id", "x-memcli-app": "app_id"}


@dataclass(frozen=True)
class Route:
    """One API route: the operation it runs and the model its input is validated by."""

    method: str
    path: str
    operation: Callable[..., Any]
    model: Callable[[], type[BaseModel]]  # body (POST) or query parameters (GET, DELETE)
    summary: str
    extra: dict[str, Any] | None = None  # fixed request fields (e.g. a route's own flag)
    many: bool = False  # the body may also be an array of the model (events)


def _event_in() -> type[BaseModel]:
    from memcli.models import EventIn

    return EventIn


def _acb_request() -> type[BaseModel]:
    from memcli.acb.build import AcbRequest

    return AcbRequest


def _query_request() -> type[BaseModel]:
    from memcli.query_request import QueryRequest

    return QueryRequest


ROUTES: tuple[Route, ...] = (
    Route("POST", "/api/v1/events", api.record_events, _event_in,
          "Record events (seed 003 record_event): one object or an array", many=True),
    Route("POST", "/api/v1/acb/build", api.build_acb, _acb_request,
          "Build an active context bundle (as `memcli acb build --json`)"),
    Route("GET", "/api/v1/artifacts/{artifact_id}", api.get_artifact,
          lambda: models.ArtifactQuery, "The full output of a truncated tool result"),
    Route("POST", "/api/v1/decisions", api.record_decision, lambda: models.DecisionRequest,
          "Record a decision (or supersede one)"),
    Route("GET", "/api/v1/decisions/query", api.query_decisions,
          lambda: models.DecisionsQuery, "List decisions, newest first"),
    Route("POST", "/api/v1/tasks", api.record_task, lambda: models.TaskRequest,
          "Create a task, or update one (task_id)"),
    Route("POST", "/api/v1/query", api.query, _query_request,
          "Seed 000 memory.query (as `memcli query - --json`)"),
    Route("GET", "/api/v1/memories/{memory_id:int}/history", api.memory_history,
          lambda: models.HistoryQuery, "What happened to a memory, newest first"),
    Route("POST", "/api/v1/memories", api.remember, lambda: models.RememberRequest,
          "Remember a fact or a procedure (as `memcli remember`)"),
    Route("DELETE", "/api/v1/memories/{memory_id:int}", api.forget,
          lambda: models.ForgetRequest, "Forget a memory (soft delete, as `memcli forget`)"),
    Route("GET", "/apps/{app_id}/memories", api.app_memories,
          lambda: models.AppMemoriesQuery, "Seed 001: list an app's memories"),
    Route("DELETE", "/apps/{app_id}/memories", api.delete_app_memories,
          lambda: models.AppMemoriesQuery, "Seed 001: purge every memory of an app"),
    Route("DELETE", "/apps/{app_id}/memories/{memory_id:int}", api.delete_app_memories,
          lambda: models.AppMemoriesQuery, "Seed 001: purge one memory of an app"),
)


def build_app(settings: Settings, auth: Auth, *, service: api.Service | None = None,
              routes: Sequence[BaseRoute] = (),
              lifespans: Sequence[Callable[[Starlette], AbstractAsyncContextManager[Any]]] = ()
              ) -> Starlette:
    """The HTTP API for the database of `settings`, guarded by `auth`.

    `service`: an open Service to share (the daemon's); by default the app opens its own and
    closes it on shutdown. `routes`: more routes behind the same Host check (the MCP server's
    `Mount("/mcp", ...)`); `lifespans`: their start-up/shutdown contexts, entered in order."""
    own = service is None
    svc = service or api.Service(settings)
    table = [StarletteRoute(r.path, _endpoint(r, svc, auth), methods=[r.method])
             for r in ROUTES]
    table.append(StarletteRoute("/healthz", _healthz, methods=["GET"]))
    document = openapi(ROUTES)

    async def openapi_json(_request: Request) -> Response:
        return JSONResponse(document)

    table.append(StarletteRoute("/openapi.json", openapi_json, methods=["GET"]))
    # The MCP server (streamable HTTP) at /mcp, behind the same token and scope headers.
    from memcli.service.mcp import http_routes

    mcp_routes, mcp_lifespan = http_routes(settings, svc, caller=lambda r: _caller(r, auth),
                                           allowed_hosts=tuple(auth.allowed_hosts))
    table.extend(mcp_routes)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with AsyncExitStack() as stack:
                await stack.enter_async_context(mcp_lifespan())
                for enter in lifespans:
                    await stack.enter_async_context(enter(app))
                yield
        finally:
            if own:
                svc.close()

    app = Starlette(
        routes=[*table, *routes],
        middleware=[Middleware(BodyLimit, limit=MAX_BODY_BYTES),
                    Middleware(TrustedHostMiddleware, allowed_hosts=list(auth.allowed_hosts),
                               www_redirect=False)],
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.service = svc
    app.state.auth = auth
    return app


async def _healthz(_request: Request) -> Response:
    return JSONResponse({"status": "ok", "version": __version__})


async def _http_error(_request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method) as JSON like every other error."""
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": exc.detail, "exit_code": 2}, status_code=exc.status_code,
                        headers=exc.headers)


def _error(exc: BaseException) -> Response:
    status, headers = api.status_for(exc)
    return JSONResponse(api.error_payload(exc), status_code=status, headers=headers)


def _endpoint(route: Route, svc: api.Service, auth: Auth) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        try:
            scope = _caller(request, auth)
            if scope is None:
                return JSONResponse({"error": "a bearer token is required (Authorization: "
                                     "Bearer <token>)", "exit_code": 2}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
            payload = await _input(request, route)
            out = await run_in_threadpool(svc.run, route.operation, scope, payload)
            # A batch of events with rejected records is answered 422 with the whole report
            # (what was stored and what was not), as the CLI exits 2 after printing it.
            status = 422 if api.rejected(out) else 200
            return JSONResponse(out, status_code=status)
        except (MemcliError, RecursionError) as exc:
            return _error(exc if isinstance(exc, MemcliError)
                          else api.BadRequest("the request is nested too deeply"))
        except Exception as exc:  # a bug: one line and 500 to the client, the trace to the log
            logging.getLogger(__name__).exception("%s failed", route.path)
            return _error(exc)

    endpoint.__name__ = route.operation.__name__
    return endpoint


def _caller(request: Request, auth: Auth) -> api.Scope | None:
    """The caller's scope: its token's binding narrowed by the scope headers (None: refused)."""
    origin = request.headers.get("origin")
    if origin is not None and _origin_host(origin) not in auth.allowed_hosts:
        # A browser page of another site: refused even with a valid token (CSRF).
        raise NotAllowedError(f"requests from origin {origin} are refused")
    # uvicorn gives a Unix socket's server as (path, None), a TCP one as (host, port).
    server = request.scope.get("server")
    unix_socket = bool(server) and server[1] is None
    token = auth.check(request.headers.get("authorization"), unix_socket=unix_socket)
    if token is None:
        return None
    bound = {name: request.headers[h] for h, name in SCOPE_HEADERS.items()
             if h in request.headers}
    for name, value in bound.items():
        if not value.strip():
            raise api.BadRequest(f"an empty {name} header", "leave the header out instead")
    return token.scope().narrowed(**bound)


def _origin_host(origin: str) -> str:
    from urllib.parse import urlsplit

    try:
        return (urlsplit(origin).hostname or "").lower()
    except ValueError:
        return ""


async def _input(request: Request, route: Route) -> Any:
    """The operation's request: the JSON body (POST), or the query parameters (GET, DELETE),
    with the path's parameters; a path parameter may not be contradicted by the body."""
    path = dict(request.path_params)
    if route.method != "POST":
        data: dict[str, Any] = dict(request.query_params)
        if len(request.query_params.multi_items()) != len(data):
            raise api.BadRequest("a query parameter is given twice")
        return {**data, **path, **(route.extra or {})}
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        # Also what keeps a browser's cross-site form post out (it needs a preflight then).
        raise api.BadRequest("the request body must be JSON (Content-Type: application/json)")
    body = await request.body()  # at most MAX_BODY_BYTES: BodyLimit refuses more unread
    data = _json(body)
    if route.many and isinstance(data, list):
        return data
    if not isinstance(data, dict):
        raise api.BadRequest("the request body must be one JSON object"
                             + (" or an array of them" if route.many else ""))
    return {**data, **path}


def _json(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8")) if body.strip() else {}
    except UnicodeDecodeError:
        raise api.BadRequest("the request body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise api.BadRequest(f"the request body is not JSON: {exc.msg} at line {exc.lineno}"
                             ) from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise api.BadRequest(f"the request body is not usable JSON: {exc}".splitlines()[0]
                             ) from None


# -- OpenAPI -----------------------------------------------------------------------------------
def openapi(routes: tuple[Route, ...]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of `routes`: request schemas from the pydantic models."""
    schemas: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    ref = "#/components/schemas/{model}"
    for route in routes:
        model = route.model()
        schema = model.model_json_schema(ref_template=ref)
        schemas.update(schema.pop("$defs", {}))
        path = route.path.replace(":int}", "}")
        names = [p.strip("{}") for p in path.split("/") if p.startswith("{")]
        op: dict[str, Any] = {
            "summary": route.summary, "operationId": route.operation.__name__,
            "parameters": [{"name": n, "in": "path", "required": True,
                            "schema": {"type": "integer" if n == "memory_id" else "string"}}
                           for n in names],
            "responses": {
                "200": {"description": "the JSON the CLI prints for the same request"},
                "401": {"description": "no or wrong bearer token"},
                "403": {"description": "outside the caller's bound scope"},
                "404": {"description": "not found (or another tenant's)"},
                "422": {"description": "invalid request: {error, exit_code}"},
                "413": {"description": "the request body is over the size limit"},
                "503": {"description": "database busy: retry after Retry-After seconds"},
                "507": {"description": "disk full: nothing of the request was written"},
            },
            "security": [{"bearer": []}],
        }
        answer = models.RESPONSES.get(route.path)
        if answer is not None:  # the answer's shape, where a model describes it
            out = answer[0]()
            out_schema = out.model_json_schema(ref_template=ref, mode="serialization")
            schemas.update(out_schema.pop("$defs", {}))
            schemas[out.__name__] = out_schema
            returned: dict[str, Any] = {"$ref": ref.format(model=out.__name__)}
            if answer[1]:
                returned = {"oneOf": [returned, {"type": "array", "items": returned}]}
            op["responses"]["200"] = {"description": (out.__doc__ or "").split("\n\n")[0],
                                      "content": {"application/json": {"schema": returned}}}
        if route.method == "POST":
            schemas[model.__name__] = schema
            body: dict[str, Any] = {"$ref": ref.format(model=model.__name__)}
            if route.many:
                body = {"oneOf": [body, {"type": "array", "items": body}]}
            op["requestBody"] = {"required": True,
                                 "content": {"application/json": {"schema": body}}}
        else:
            for name, prop in schema.get("properties", {}).items():
                if name not in names:
                    op["parameters"].append({"name": name, "in": "query", "required": False,
                                             "schema": prop})
        paths.setdefault(path, {})[route.method.lower()] = op
    paths["/healthz"] = {"get": {"summary": "Liveness", "operationId": "healthz",
                                 "responses": {"200": {"description": "ok"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "memcli", "version": __version__,
                 "description": "Long-term memory for AI agents: `memcli serve`'s HTTP API."},
        "paths": paths,
        "components": {"schemas": schemas,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
