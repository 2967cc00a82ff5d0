"""The MCP server: memcli's memory as tools, with the official `mcp` SDK (stdio or HTTP).

`build_mcp(settings, scope, tools)` returns an `MCPServer` whose tools call the service
operations (memcli.service.api), so MCP, HTTP and the CLI answer with the same payloads and
the same errors. Decisions, from the issue and from what users of other memory servers
report:

- A small default tool set (`DEFAULT_TOOLS`) with short descriptions (when to call the tool,
  one example): every tool listed costs context on every model call. The rest only with
  `--tools all` or a list. The tools themselves, their input and output models, are
  memcli.service.mcp_tools.
- Identity is the server's: the scope (tenant, user, agent, app) comes from flags, env, or for
  HTTP a token/header bound by memcli.service.http.fastapi_app, never from tool arguments. An
  argument naming another scope is refused (isError), never answered from the other scope; every
  result carries `scope`, the scope that answered.
- Errors are tool errors (`isError: true` with the CLI's one-line message), never a success
  holding an error text. An argument a tool does not take is such an error, naming it.
- Forgiving arguments (`normalise`): common aliases (`text`/`q` for `query`, `k`/`limit` for
  `top_k`, ...) and a bare string where a list is expected are accepted before the SDK
  validates them against the schema the client sees.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from memcli import __version__
from memcli.retrieval.search import preload_models
from memcli.service import api
from memcli.service.api import Binding, Service
from memcli.service.holder import PoolHolder, is_server
from memcli.service.mcp_tools import (
    DEFAULT_TOOLS,
    TOOLS,
    ToolSpec,
    argument_problem,
    inlined,
    normalise,
    select_tools,
)
from memcli.service.typed_ops import request_for

if TYPE_CHECKING:
    from mcp.server import MCPServer
    from mcp_types import CallToolResult

    from memcli.config import Settings
    from memcli.service.api import Binding, Service


# Scope keys a tool argument may name; each must agree with the server's binding.
_IDENTITY = {"tenant": "tenant", "tenant_id": "tenant", "user": "user_id", "user_id": "user_id",
             "agent": "agent", "agent_id": "agent", "app": "app_id", "app_id": "app_id"}
# Tools whose own arguments use these names for something else than the caller's scope.
_OWN_ARGUMENTS = {"memory_app_memories": {"app", "app_id"}, "memory_purge_app": {"app", "app_id"}}


def split_identity(tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The arguments without scope keys, and the scope keys they named ({api key: value})."""
    own = _OWN_ARGUMENTS.get(tool, set())
    rest, named = {}, {}
    for key, value in arguments.items():
        if key in _IDENTITY and key not in own:
            if value is not None:
                named[_IDENTITY[key]] = str(value)
        else:
            rest[key] = value
    return rest, named


def scope_payload(scope: Binding, tenant: str) -> dict[str, Any]:
    """The scope that answered, as every tool result states it."""
    return {"tenant": scope.tenant or tenant, "user": scope.user_id, "agent": scope.agent,
            "app": scope.app_id}


def build_mcp(settings: Settings, scope: Binding, tools: tuple[str, ...] | None = None, *,
              service: Service | None = None,
              request_scope: Callable[[Any, Binding], Binding] | None = None,
              selectable: bool = False) -> MCPServer:
    """The MCP server over `settings.db`, answering for `scope` with the tools `tools`
    (default: DEFAULT_TOOLS).

    `service`: the process's open service (the daemon shares its one writer with HTTP); None
    opens one for this server. `request_scope(request, scope)`: for HTTP, the scope narrowed by
    the request (its token, headers); the default reads the `X-Memcli-*` headers.
    `selectable`: every tool is registered and a request's `X-Memcli-Tools` header (as
    `--tools`) picks the ones it sees, `tools` when it has none (one daemon serves agents
    configured with different tool sets)."""


    if service is None:
        service = Service(settings)
    narrow = request_scope or headers_scope
    enabled = tools or DEFAULT_TOOLS
    server = MCPServer(
        "memcli", version=__version__, log_level="WARNING", instructions=INSTRUCTIONS,
        tools=[_tool(name, TOOLS[name], service, scope, narrow)
               for name in (TOOLS if selectable else enabled)])
    server.middleware.append(_Forgiving(service, scope, narrow, enabled))
    return server


# What the server tells a client about its tools (shown to the model by most clients).
INSTRUCTIONS = (
    "Long-term memory. Call memory_query before answering from what was said or decided "
    "earlier; call memory_build_acb at the start of a task for its rules, decisions, tasks "
    "and relevant memories; store durable facts with memory_remember and what happened with "
    "memory_record_event. Identity (tenant, user, agent, app) is the server's: never pass it.")


def run_stdio(settings: Settings, scope: Binding, tools: tuple[str, ...] | None = None) -> None:
    """`memcli mcp` without a daemon: the MCP server on stdin/stdout until the client leaves.
    On a PostgreSQL server the process holds a connection pool for its life, as `memcli serve`
    does (memcli/service/holder.py): each tool call borrows a connection that stays open
    rather than connecting, authenticating and checking the schema again (one idle
    connection is kept; at most `pool_size`). A SQLite file's Memory is already kept open per
    thread by the Service."""

    holder = PoolHolder(settings, settings.pool_size) if is_server(settings.db) else None
    try:
        build_mcp(settings, scope, tools).run("stdio")
    finally:
        if holder is not None:
            holder.close()


def http_routes(settings: Settings, service: Service, tools: tuple[str, ...] | None = None, *,
                caller: Callable[[Any], Binding | None] | None = None,
                path: str = "/mcp", allowed_hosts: tuple[str, ...] = ()) -> tuple[list[Any], Any]:
    """The MCP endpoint of an HTTP app (memcli.service.http.fastapi_app): `(routes, lifespan)`. Add
    the routes to the app and enter `lifespan()` in the app's lifespan (it runs the SDK's session
    manager). Stateless, JSON responses: every POST is answered in its own response, so a
    stdio bridge (`memcli mcp` forwarding to a daemon) maps one line to one request.

    `caller(request)`: the HTTP app's own check (bearer token, scope headers): the caller's
    Binding, None for "no token" (answered 401), or a MemcliError (answered with its status);
    by default the `X-Memcli-*` headers narrow an unbound scope. `allowed_hosts`: Host names
    accepted besides loopback's (DNS-rebinding protection, as the app's)."""


    server = build_mcp(settings, Binding(), tools or select_tools(settings.mcp_tools),
                       service=service, request_scope=_bound_scope, selectable=True)
    hosts = ("127.0.0.1", "localhost", "[::1]", *allowed_hosts)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*hosts, *(f"{h}:*" for h in hosts)],
        allowed_origins=[f"{scheme}://{h}{port}" for h in hosts for scheme in ("http", "https")
                         for port in ("", ":*")])
    app = server.streamable_http_app(streamable_http_path=path, stateless_http=True,
                                     json_response=True, transport_security=security)
    guard = caller or (lambda request: headers_scope(request, Binding()))
    routes = [_guarded(route, guard) for route in app.routes]
    return routes, server.session_manager.run


def _guarded(route: Any, caller: Callable[[Any], Binding | None]) -> Any:
    """The SDK's /mcp route behind the HTTP app's caller check: the caller's scope is kept in
    the request state, where the tools read it (`_bound_scope`)."""

    return Route(route.path, endpoint=_Guard(route.endpoint, caller), methods=route.methods,
                 name="mcp")


class _Guard:
    """ASGI: refuse a caller the HTTP app refuses (401/403, as its API routes answer), else
    bind its scope in the request state and hand over to the SDK."""

    def __init__(self, app: Any, caller: Callable[[Any], Binding | None]) -> None:
        self.app, self.caller = app, caller

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:


        try:
            bound = self.caller(Request(scope))
        except Exception as exc:  # noqa: BLE001 - refused: the same answer as the API's
            status, headers = api.status_for(exc)
            response = JSONResponse(api.error_payload(exc), status_code=status, headers=headers)
            return await response(scope, receive, send)
        if bound is None:
            response = JSONResponse({"error": "a bearer token is required (Authorization: "
                                     "Bearer <token>)", "exit_code": 2}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
            return await response(scope, receive, send)
        scope.setdefault("state", {})["memcli_scope"] = bound
        await self.app(scope, receive, send)


def _bound_scope(request: Any, scope: Binding) -> Binding:
    """For HTTP: the scope the guard bound for this request."""
    state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
    bound = state.get("memcli_scope")
    return bound if bound is not None else scope


def headers_scope(request: Any, scope: Binding) -> Binding:
    """The bound scope narrowed by an HTTP request's `X-Memcli-Tenant/User/Agent/App` headers (a
    header naming another value than one already bound is refused). stdio: no request."""
    headers = getattr(request, "headers", None)
    if headers is None:
        return scope
    bound = {key: headers.get(f"x-memcli-{header}")
             for key, header in (("tenant", "tenant"), ("user_id", "user"), ("agent", "agent"),
                                 ("app_id", "app"))}
    return scope.narrowed(**{k: v for k, v in bound.items() if v})


@functools.cache
def tool_schemas(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A tool's input and output JSON schemas, made once per process: they depend on the tool
    only, never on the database or the caller, and pydantic takes ~2 ms for each; the user's
    daemon builds an MCP server per database it serves (docs/design/daemon.md, "HTTP for every
    database"). Shared by every server: read, never changed."""

    spec = TOOLS[name]
    return (inlined(spec.input.model_json_schema(by_alias=True)),
            inlined(spec.output.model_json_schema()))


def _tool(name: str, spec: ToolSpec, service: Service, scope: Binding,
          narrow: Callable[[Any, Binding], Binding]) -> Any:
    """The SDK's tool for `spec`: its input model (arguments the tool does not take refused)
    and its output model (the result's `structuredContent` checked against it), run by
    `_call`."""

    async def call(context: Any, **arguments: Any) -> CallToolResult:
        return await _call(spec, service, scope, narrow, context, spec.request(arguments))

    parameters, output_schema = tool_schemas(name)
    return Tool(
        fn=call, name=name, title=None, description=spec.description,
        parameters=parameters,
        fn_metadata=FuncMetadata(arg_model=spec.input, output_model=spec.output,
                                 output_schema=output_schema),
        is_async=True, context_kwarg="context",
        annotations=ToolAnnotations(read_only_hint=spec.read_only,
                                    destructive_hint=spec.destructive,
                                    idempotent_hint=spec.read_only, open_world_hint=False))


async def _call(spec: ToolSpec, service: Service, scope: Binding,
                narrow: Callable[[Any, Binding], Binding], ctx: Any,
                request: dict[str, Any]) -> CallToolResult:
    """Run one tool call on a worker thread: `{"scope", "result"}` as structuredContent and,
    for clients before MCP 2025-06-18, as the text block. Any error becomes a tool error
    (isError) with the CLI's one-line message."""


    try:
        bound = narrow(ctx.request_context.request, scope)
        # The tool's arguments as the operation's model, validated here once (its one-line
        # error a tool error); an operation not yet taking a model gets the arguments.
        payload = await anyio.to_thread.run_sync(service.run, spec.op, bound,
                                                 request_for(spec.op, request))
    except Exception as exc:  # noqa: BLE001 - a bug too: its message, never a traceback
        raise ToolError(api.error_payload(exc)["error"]) from None
    rejected = payload.get("rejected") if isinstance(payload, dict) else None
    if rejected:  # HTTP answers 422, the CLI exits 2: a refused record is a failed call
        raise ToolError("record refused: " + "; ".join(str(p.get("reason")) for p in rejected))
    text = json.dumps({"scope": scope_payload(bound, service.settings.tenant), "result": payload},
                      ensure_ascii=False, default=str)
    # The structured result is the text's JSON, so both say the same thing.
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=json.loads(text))


class _Forgiving:
    """SDK middleware, before the SDK validates a call: the tool list narrowed to the enabled
    tools, tool arguments normalised (aliases, bare strings for lists), scope keys in them
    checked against the binding and dropped, and the models warmed once the client has
    initialized (so `initialize` never waits for them)."""

    def __init__(self, service: Service, scope: Binding, narrow: Callable[[Any, Binding], Binding],
                 enabled: tuple[str, ...]) -> None:
        self.service, self.scope, self.narrow, self.enabled = service, scope, narrow, enabled
        self.warmed = False

    def tools_for(self, request: Any) -> tuple[str, ...]:
        headers = getattr(request, "headers", None)
        wanted = headers.get("x-memcli-tools") if headers is not None else None
        return select_tools(wanted) if wanted else self.enabled

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        if ctx.method == "notifications/initialized" and not self.warmed:
            self.warmed = True
            threading.Thread(target=_warm, args=(self.service,), daemon=True).start()
        if ctx.method == "tools/list":
            result = await call_next(ctx)
            enabled = set(self.tools_for(ctx.request))
            if isinstance(result, dict) and isinstance(result.get("tools"), list):
                return {**result, "tools": [t for t in result["tools"]
                                            if isinstance(t, dict) and t.get("name") in enabled]}
            if hasattr(result, "tools"):
                result.tools = [t for t in result.tools if t.name in enabled]
            return result
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, dict):
            return await call_next(ctx)
        name, arguments = params.get("name"), params.get("arguments")
        if isinstance(name, str) and name in TOOLS and name not in self.tools_for(ctx.request):
            return _refusal(f"tool {name} is not enabled on this server "
                            "(memcli mcp --tools all, or --tools with its name)")
        if not (isinstance(name, str) and isinstance(arguments, dict)):
            return await call_next(ctx)
        rest, named = split_identity(name, normalise(name, arguments))
        if named:
            try:
                bound = self.narrow(ctx.request, self.scope)
            except Exception as exc:  # noqa: BLE001 - a header naming another scope
                return _refusal(str(exc))
            mine = scope_payload(bound, self.service.settings.tenant)
            keys = {"tenant": "tenant", "user_id": "user", "agent": "agent", "app_id": "app"}
            others = {k: v for k, v in named.items() if mine[keys[k]] != v}
            if others:
                return _refusal(
                    "identity is bound by the server, not by tool arguments: this server "
                    "answers for " + ", ".join(f"{k} {v!r}" for k, v in mine.items() if v)
                    + "; the call named " + ", ".join(f"{keys[k]} {v!r}" for k, v in
                                                      others.items()))
        problem = argument_problem(name, rest) if name in TOOLS else None
        if problem:  # one line naming it, as the CLI says it (the SDK's is pydantic's report)
            return _refusal(problem)

        return await call_next(replace(ctx, params={**params, "arguments": rest}))


def _refusal(text: str) -> Any:
    """A tool error result (isError), as the SDK returns for a failing tool."""

    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _warm(service: Service) -> None:
    """Construct the models and start loading them in the background, so the first tool call
    does not pay for them. The database is not opened here: a second connection racing the
    first call's on a new file can stall both (one holds the process's writer lock, the other
    SQLite's) until the busy timeout. The session serves many calls, so e5-small's queries go
    through onnxruntime (`warm_queries`). A failure here is reported by the first call
    instead."""
    try:

        embedder, sparse = service.models()
        preload_models(embedder, sparse)
        warm_queries = getattr(embedder, "warm_queries", None)
        if callable(warm_queries):
            warm_queries()
    except Exception:  # noqa: BLE001, S110
        pass
