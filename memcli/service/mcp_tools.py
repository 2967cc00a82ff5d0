"""The MCP tools' arguments: one function per tool whose signature is the schema the client sees
and whose body turns the arguments into the api operation's request (memcli.service.api).

Kept short on purpose (each listed tool costs context on every model call): only what an agent
needs, the scope keys never (the server binds them). Deliberately without `from __future__
import annotations`: the SDK reads these signatures as real types.
"""

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from memcli.ids import Id

Role = Literal["user", "assistant", "system", "tool", "human", "agent"]


def _given(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def query(query: str, top_k: int = 10, categories: list[str] | None = None,
          session_id: str | None = None, return_format: Literal["full", "bullets"] = "full",
          budget_tokens: int | None = None, as_of: str | None = None) -> dict[str, Any]:
    filters = _given(session_id=session_id)
    return _given(query=query, top_k=top_k, categories=categories, budget_tokens=budget_tokens,
                  filters=filters or None, as_of=as_of) | {"return": return_format}


def build_acb(query: str | None = None, intent: str | None = None,
              max_tokens: int | None = None, session_id: str | None = None,
              categories: list[str] | None = None,
              include_checkpoint: bool = False, as_of: str | None = None) -> dict[str, Any]:
    # seed 003: `query_text` is what the evidence is retrieved for; `intent` only labels it.
    # `as_of` (an ISO date or time): the memory as it was then.
    return _given(query_text=query, intent=intent, max_tokens=max_tokens,
                  session_id=session_id, categories=categories,
                  include_checkpoint=include_checkpoint or None, as_of=as_of)


def record_events(text: str, role: Role = "user",
                  kind: Literal["message", "tool_call", "tool_result", "decision",
                                "task_update", "artifact"] = "message",
                  session_id: str | None = None, event_id: str | None = None,
                  tags: list[str] | None = None, category: str | None = None,
                  importance: float | None = None) -> dict[str, Any]:
    return _given(text=text, role=role, kind=kind, session_id=session_id, event_id=event_id,
                  tags=tags, category=category, importance=importance)


def get_artifact(artifact_id: str) -> dict[str, Any]:
    return {"artifact_id": artifact_id}


def query_decisions(status: Literal["active", "superseded", "all"] = "active",
                    limit: int = 20) -> dict[str, Any]:
    return {"status": status, "limit": limit}


def remember(text: str, category: str | None = None, importance: float | None = None,
             pinned: bool = False, title: str | None = None,
             steps: list[str] | None = None) -> dict[str, Any]:
    return _given(text=text, category=category, importance=importance, pinned=pinned or None,
                  title=title, steps=steps, procedural=True if steps else None)


def forget(memory_id: Id) -> dict[str, Any]:
    return {"memory_id": memory_id}


def record_decision(decision: str, rationale: list[str] | None = None,
                    constraints: list[str] | None = None,
                    alternatives: list[str] | None = None,
                    consequences: list[str] | None = None, refs: list[str] | None = None,
                    supersedes: Id | None = None, reason: str | None = None) -> dict[str, Any]:
    return _given(decision=decision, rationale=rationale, constraints=constraints,
                  alternatives=alternatives, consequences=consequences, refs=refs,
                  supersedes=supersedes, reason=reason)


def record_task(title: str | None = None, details: str | None = None,
                status: Literal["open", "doing", "done"] | None = None,
                task_id: Id | None = None, refs: list[str] | None = None) -> dict[str, Any]:
    return _given(title=title, details=details, status=status, task_id=task_id, refs=refs)


def memory_history(memory_id: Id, limit: int = 20) -> dict[str, Any]:
    return {"memory_id": memory_id, "limit": limit}


def app_memories(app_id: str, limit: int = 100) -> dict[str, Any]:
    return {"app_id": app_id, "limit": limit}


def delete_app_memories(app_id: str, memory_id: Id | None = None) -> dict[str, Any]:
    return _given(app_id=app_id, memory_id=memory_id)


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
