"""The MCP tools' arguments: for each tool, the fields of its operation's request model that an
agent may give, so the schema the client sees is generated from the same model as the CLI's
options and the HTTP body (one declaration, one spelling, one rule per field). A tool's
function turns its arguments into the api operation's request (memcli.service.api).

Kept short on purpose (each listed tool costs context on every model call): only what an agent
needs, the scope keys never (the server binds them). Deliberately without `from __future__
import annotations`: the SDK reads these signatures as real types.
"""

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from memcli.operations.requests import model_named

Role = Literal["user", "assistant", "system", "tool", "human", "agent"]

REQUESTS = "memcli.operations.requests"
LEDGER = "memcli.operations.ledger_ops"
LIFE = "memcli.operations.lifecycle_requests"


def _not_none(kind: Any) -> Any:
    """`X | None` as `X` (an argument the tool requires)."""
    import types
    import typing

    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(kind) if a is not type(None)]
        return rest[0] if len(rest) == 1 else kind
    return kind


def arguments(name: str, model: str, fields: tuple[str, ...], *,
              names: dict[str, str] | None = None, defaults: dict[str, Any] | None = None,
              required: tuple[str, ...] = ()) -> Callable[..., dict[str, Any]]:
    """A tool's argument function: one parameter per field of `model` ("module:Name") listed
    in `fields`, typed, bounded and described by the field (an argument is the field's name;
    `names`: a tool's shorter name for one, which the model accepts too). It returns the
    request: the arguments given, by field name. `defaults`: the tool's own default of a
    field; `required`: a field the tool asks for though the model does not."""
    found = model_named(model).model_fields
    renamed = names or {}
    params = []
    for field in fields:
        info = found[field]
        kind = info.annotation
        if field in required or info.is_required():
            default = inspect.Parameter.empty
            kind = _not_none(kind) if field in required else kind
        elif field in (defaults or {}):
            default = (defaults or {})[field]
        elif info.default_factory is not None:  # a list or a dict: none given
            default, kind = None, kind | None
        else:
            default = info.default
            kind = kind | None if default is None else kind
        described = Annotated[kind, *info.metadata, Field(description=info.description)]
        params.append(inspect.Parameter(renamed.get(field, field),
                                        inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=default, annotation=described))
    back = {renamed.get(f, f): f for f in fields}
    signature = inspect.Signature(params)

    def build(*args: Any, **kwargs: Any) -> dict[str, Any]:
        given = signature.bind(*args, **kwargs).arguments
        return {back[k]: v for k, v in given.items() if v is not None}

    build.__signature__ = signature  # type: ignore[attr-defined]
    build.__annotations__ = {p.name: p.annotation for p in params}
    build.__name__ = name
    return build


query = arguments("query", f"{REQUESTS}:QueryRequest", (
    "query", "top_k", "categories", "session_id", "return_format", "budget_tokens", "as_of"))
# The acb request's `query_text` is `query` here (a short name the model accepts too):
# what the evidence is retrieved for; `intent` only labels it.
build_acb = arguments("build_acb", "memcli.acb.build:AcbRequest", (
    "query_text", "intent", "max_tokens", "session_id", "categories", "include_checkpoint",
    "as_of"), names={"query_text": "query"})
get_artifact = arguments("get_artifact", f"{LEDGER}:ArtifactRequest", ("artifact_id",))
query_decisions = arguments("query_decisions", f"{LEDGER}:DecisionsQuery",
                            ("status", "limit"), defaults={"limit": 20})
forget = arguments("forget", f"{LIFE}:MemoryRequest", ("memory_id",))
record_decision = arguments("record_decision", f"{LEDGER}:DecisionRequest", (
    "decision", "rationale", "constraints", "alternatives", "consequences", "refs",
    "supersedes", "reason"), defaults={"reason": None})
record_task = arguments("record_task", f"{LEDGER}:TaskRequest",
                        ("title", "details", "status", "task_id", "refs"))
memory_history = arguments("memory_history", f"{REQUESTS}:HistoryRequest",
                           ("memory_id", "limit"), defaults={"limit": 20},
                           required=("memory_id",))
app_memories = arguments("app_memories", f"{LIFE}:AppMemoriesRequest", ("app_id", "limit"))
delete_app_memories = arguments("delete_app_memories", f"{LIFE}:AppMemoriesRequest",
                                ("app_id", "memory_id"))
_remember = arguments("remember", f"{LIFE}:RememberRequest", (
    "text", "category", "importance", "pinned", "title", "steps"), required=("text",))


def remember(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """A procedure when steps are given (the request's `procedural`)."""
    request = _remember(*args, **kwargs)
    return request | ({"procedural": True} if request.get("steps") else {})


remember.__signature__ = _remember.__signature__  # type: ignore[attr-defined]
remember.__annotations__ = _remember.__annotations__


def _given(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def record_events(text: str, role: Role = "user",
                  kind: Literal["message", "tool_call", "tool_result", "decision",
                                "task_update", "artifact"] = "message",
                  session_id: str | None = None, event_id: str | None = None,
                  tags: list[str] | None = None, category: str | None = None,
                  importance: float | None = None) -> dict[str, Any]:
    # The record's shorthand (memcli.core.records.EventIn): `text` for content.text, `role` for
    # actor.type, which an agent writes more easily than the nested form.
    return _given(text=text, role=role, kind=kind, session_id=session_id, event_id=event_id,
                  tags=tags, category=category, importance=importance)


def bind(arguments: Callable[..., dict[str, Any]],
         call: Callable[[Any, dict[str, Any]], Awaitable[str]]) -> Callable[..., Any]:
    """An async tool function with `arguments`' signature plus the SDK's Context: it builds
    the api request from the arguments and awaits `call(context, request)`."""
    from mcp.server.mcpserver import Context

    signature = inspect.signature(arguments)
    context = inspect.Parameter("context", inspect.Parameter.KEYWORD_ONLY, annotation=Context)
    parameters = [*signature.parameters.values(), context]

    async def tool(**kwargs: Any) -> str:
        ctx = kwargs.pop("context")
        return await call(ctx, arguments(**kwargs))

    tool.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=parameters, return_annotation=str)
    tool.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": str}
    tool.__name__ = arguments.__name__
    tool.__doc__ = None
    return tool
