"""The MCP tools: their names, what they take and what they answer, from the request and answer
models the HTTP API uses (one declaration, one spelling, one rule per field).

Each tool's input is a model built from its operation's request model (`arguments`): the fields
an agent may give, typed, bounded and described as the model declares them, the scope keys
never (the server binds them). An argument the tool does not take is refused, never dropped
(`extra="forbid"`). `memory_record_event` takes the event model of `POST /api/v1/events`
(memcli.core.records.EventIn), content object, refs, channel, sensitivity and all. Its output
is `{"scope", "result"}`, `result` the answer model of the matching HTTP route
(memcli.service.schemas), published as the tool's `outputSchema` and sent as
`structuredContent` beside the same JSON as text (for clients before MCP 2025-06-18).

Names match `^[a-zA-Z0-9_-]{1,64}$`, the rule Claude Desktop and claude.ai hold every tool name
to (one bad name withholds the whole server) and OpenAI-backed clients' `^[a-zA-Z0-9_-]+$`.
The dotted names of 0.1.0's development (`memory.query`) are accepted by `--tools` until 0.2.0.
Descriptions say when an agent should call the tool, and show one call (`ToolSpec.example`,
which the conformance test makes).
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from memcli.core.records import EventIn, EventReceipt, Hit, QueryResult
from memcli.errors import UsageError, validation_line
from memcli.operations.ledger_ops import (
    ArtifactRequest,
    DecisionRequest,
    DecisionsQuery,
    TaskRequest,
)
from memcli.operations.lifecycle_requests import (
    AppMemoriesRequest,
    MemoryRequest,
    RememberRequest,
)
from memcli.operations.requests import AcbRequest, HistoryRequest, QueryRequest
from memcli.service import api, schemas

# `--tools` names before 0.2.0 may be the dotted ones; they go then.
DOTTED_UNTIL = "0.2.0"


class ToolArguments(ArgModelBase):
    """A tool's arguments (the SDK's argument model): one it does not take is refused."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class ToolScope(BaseModel):
    """The scope that answered: the server's binding, never a tool argument."""

    tenant: str = Field(description="The tenant.")
    user: str | None = Field(description="The bound user (null: not bound).")
    agent: str | None = Field(description="The bound agent (null: not bound).")
    app: str | None = Field(description="The bound app (null: not bound).")


def _not_none(kind: Any) -> Any:
    """`X | None` as `X` (an argument the tool requires)."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(kind) if a is not type(None)]
        return rest[0] if len(rest) == 1 else kind
    return kind


def arguments(name: str, model: type[BaseModel], fields: tuple[str, ...], *,
              defaults: dict[str, Any] | None = None,
              required: tuple[str, ...] = ()) -> type[ToolArguments]:
    """A tool's input model: the fields of `model` listed in `fields`, typed, bounded and
    described by the model (`defaults`: the tool's own default of a field; `required`: a
    field the tool asks for though the model does not)."""
    found = model.model_fields
    specs: dict[str, Any] = {}
    for field_name in fields:
        info = found[field_name]
        kind: Any = info.annotation
        if field_name in required or info.is_required():
            default: Any = ...
            kind = _not_none(kind) if field_name in required else kind
        elif field_name in (defaults or {}):
            default = (defaults or {})[field_name]
        elif info.default_factory is not None:  # a list, a dict, a model: none given
            default, kind = None, kind | None
        else:
            default = info.default
            kind = kind | None if default is None else kind
        described = Annotated[kind, *info.metadata, Field(description=info.description)]
        specs[field_name] = (described, default)
    title = "".join(part.title() for part in name.split("_")) + "Arguments"
    # No description of its own: the tool's says what it is for (each word costs context).
    return create_model(title, __base__=ToolArguments, **specs)


def inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with every `$ref` to its `$defs` replaced by the definition (the models are
    not recursive) and `$defs` dropped: Codex reads a `$ref` property as a string (openai/codex
    #3152) and other clients drop such tools, so a tool's schemas are self-contained."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return walk({**defs[ref.removeprefix("#/$defs/")], **rest})
        return {k: walk(v) for k, v in node.items() if k != "$defs"}

    return walk(schema)


def answer(name: str, result: Any, what: str) -> type[BaseModel]:
    """A tool's output model: the scope that answered and the operation's answer."""
    title = "".join(part.title() for part in name.split("_")) + "Result"
    return create_model(
        title, __doc__=f"The scope that answered and {what}.",
        scope=(ToolScope, Field(description="The scope that answered.")),
        result=(result, Field(description=what[0].upper() + what[1:] + ".")))


@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool: the operation it calls, its input and output models, what it is for (when
    to call it) and one example call, its hints and the aliases it forgives."""

    op: Callable[..., Any]  # the memcli.service.api operation
    summary: str  # when an agent calls it, and what comes back
    example: dict[str, Any]
    input: type[ToolArguments]
    output: type[BaseModel]
    read_only: bool
    destructive: bool = False
    default: bool = True
    aliases: tuple[tuple[str, str], ...] = ()  # (alias, canonical argument name)
    lists: tuple[str, ...] = ()  # arguments that are lists: a bare string becomes [string]
    finish: Callable[[dict[str, Any]], dict[str, Any]] | None = None  # the request, completed
    shorthand: str = ""  # forgiven forms `aliases` cannot say, for the docs

    @property
    def description(self) -> str:
        return f"{self.summary} Example: {json.dumps(self.example, ensure_ascii=False)}"

    def request(self, given: dict[str, Any]) -> dict[str, Any]:
        """The operation's request (a JSON object) for the validated arguments `given`."""
        out = {k: v.model_dump(exclude_none=True) if isinstance(v, BaseModel) else v
               for k, v in given.items() if v is not None}
        return self.finish(out) if self.finish else out


def _procedure(request: dict[str, Any]) -> dict[str, Any]:
    """A remember request with steps is a procedure (the request's `procedural`)."""
    return request | ({"procedural": True} if request.get("steps") else {})


def _tool(op: Callable[..., Any], name: str, summary: str, example: dict[str, Any],
          model: type[BaseModel], fields: tuple[str, ...], result: Any, what: str, *,
          defaults: dict[str, Any] | None = None, required: tuple[str, ...] = (),
          **flags: Any) -> ToolSpec:
    return ToolSpec(op, summary, example,
                    arguments(name, model, fields, defaults=defaults, required=required),
                    answer(name, result, what), **flags)


_EVENT = ("kind", "content", "refs", "session_id", "run_id", "event_id", "ts", "channel",
          "sensitivity", "actor", "tags", "category", "importance", "pinned")

TOOLS: dict[str, ToolSpec] = {
    "memory_query": _tool(
        api.query, "memory_query",
        "Search long-term memory. Call it before answering anything that depends on what was "
        "said, decided or learned earlier; returns ranked memories, best first.",
        {"query": "deployment plan for the billing service", "top_k": 5}, QueryRequest,
        ("query", "top_k", "categories", "session_id", "return_format", "budget_tokens",
         "as_of", "sensitivity", "legs", "widen", "explain", "all_tenants"),
        list[Hit] | list[schemas.Bullet] | QueryResult, "the hits, best first",
        read_only=True,
        aliases=(("text", "query"), ("q", "query"), ("k", "top_k"), ("limit", "top_k"),
                 ("n", "top_k"), ("category", "categories")),
        lists=("categories", "sensitivity", "legs")),
    "memory_build_acb": _tool(
        api.build_acb, "memory_build_acb",
        "Build a context bundle (rules, decisions, open tasks, relevant memories) under a "
        "token budget. Call it at the start of a task, with what the task is about.",
        {"query": "add retries to the upload client", "budget_tokens": 4000}, AcbRequest,
        ("query", "intent", "budget_tokens", "session_id", "categories",
         "include_checkpoint", "as_of"), schemas.Bundle, "the context bundle",
        read_only=True,
        aliases=(("query_text", "query"), ("text", "query"), ("task", "query"),
                 ("max_tokens", "budget_tokens"), ("budget", "budget_tokens"),
                 ("token_budget", "budget_tokens"), ("category", "categories")),
        lists=("categories",)),
    "memory_record_event": _tool(
        api.record_events, "memory_record_event",
        "Record what happened in the append-only event log: a message, a tool call or "
        "result, a decision or a task update. Call it for anything worth recalling later.",
        {"kind": "message", "content": {"text": "The team ships billing on Tuesdays"},
         "tags": ["topic:billing"]}, EventIn, _EVENT, EventReceipt, "the event's receipt",
        required=("content",), read_only=False,
        aliases=(("type", "kind"), ("tag", "tags")), lists=("tags", "refs"),
        shorthand="`text` or `message` (or a string `content`) for `content.text`, `role` "
                  "for `actor.type`, as `POST /api/v1/events` reads them"),
    "memory_get_artifact": _tool(
        api.get_artifact, "memory_get_artifact",
        "Fetch the full output of a truncated tool result. Call it when a hit or a bundle "
        "names an artifact_id and the excerpt is not enough.",
        {"artifact_id": "art_01J9Z8Q4"}, ArtifactRequest, ("artifact_id",), schemas.Artifact,
        "the artifact", read_only=True,
        aliases=(("id", "artifact_id"), ("artifact", "artifact_id"))),
    "memory_query_decisions": _tool(
        api.query_decisions, "memory_query_decisions",
        "List the decisions of the ledger, newest first (active ones by default). Call it "
        "before changing something an earlier decision may cover.",
        {"status": "active", "limit": 10}, DecisionsQuery, ("status", "limit"),
        list[schemas.Decision], "the decisions, newest first", defaults={"limit": 20},
        read_only=True, aliases=(("k", "limit"), ("top_k", "limit"))),
    "memory_remember": _tool(
        api.remember, "memory_remember",
        "Store a durable fact, preference or procedure (steps) the user wants kept; "
        "near-duplicates are merged. Call it when the user states something to remember.",
        {"text": "Priya prefers tabs over spaces", "category": "preferences"},
        RememberRequest, ("text", "category", "importance", "pinned", "title", "steps"),
        schemas.Remembered, "what was stored or merged", required=("text",),
        read_only=False, finish=_procedure,
        aliases=(("content", "text"), ("fact", "text"), ("memory", "text")),
        lists=("steps",)),
    "memory_forget": _tool(
        api.forget, "memory_forget",
        "Forget one memory by id (restorable for 30 days). Call it when the user asks to "
        "forget something or a memory is wrong.",
        {"memory_id": 42}, MemoryRequest, ("memory_id",), schemas.Forgotten,
        "the memory forgotten", read_only=False, destructive=True,
        aliases=(("id", "memory_id"),)),
    # Offered with --tools all (or by name).
    "memory_record_decision": _tool(
        api.record_decision, "memory_record_decision",
        "Record a decision with its rationale, or one that supersedes an earlier decision. "
        "Call it when a choice is made that later work must follow.",
        {"decision": "Use PostgreSQL for the billing service",
         "rationale": ["row-level security per tenant"]}, DecisionRequest,
        ("decision", "rationale", "constraints", "alternatives", "consequences", "refs",
         "supersedes", "reason"), schemas.Decision, "the decision recorded",
        defaults={"reason": None}, read_only=False, default=False,
        aliases=(("text", "decision"), ("why", "rationale")),
        lists=("rationale", "constraints", "alternatives", "consequences", "refs")),
    "memory_record_task": _tool(
        api.record_task, "memory_record_task",
        "Add a task to the ledger. Call it when work is agreed that is not done yet.",
        {"title": "Add retries to the upload client", "status": "open"}, TaskRequest,
        ("title", "details", "status", "refs"), schemas.Task, "the task added",
        required=("title",), read_only=False, default=False,
        aliases=(("text", "title"),), lists=("refs",)),
    "memory_update_task": _tool(
        api.record_task, "memory_update_task",
        "Change a task of the ledger (its status, title or details). Call it when a task "
        "starts, is done, or changes.",
        {"task_id": 1, "status": "done"}, TaskRequest,
        ("task_id", "status", "title", "details", "refs"), schemas.Task, "the task changed",
        required=("task_id",), read_only=False, default=False,
        aliases=(("id", "task_id"),), lists=("refs",)),
    "memory_history": _tool(
        api.memory_history, "memory_history",
        "What happened to one memory (added, merged, corrected, forgotten), newest first. "
        "Call it to explain where a memory came from.",
        {"memory_id": 42}, HistoryRequest, ("memory_id", "limit"),
        list[schemas.HistoryEntry], "the memory's changes, newest first",
        defaults={"limit": 20}, required=("memory_id",), read_only=True, default=False,
        aliases=(("id", "memory_id"),)),
    "memory_app_memories": _tool(
        api.app_memories, "memory_app_memories",
        "List an app's memories, newest first. Call it to review what an app has stored.",
        {"app_id": "notes-app", "limit": 20}, AppMemoriesRequest, ("app_id", "limit"),
        schemas.AppMemories, "the app's memories, newest first", read_only=True,
        default=False, aliases=(("app", "app_id"),)),
    "memory_purge_app": _tool(
        api.delete_app_memories, "memory_purge_app",
        "Delete an app's memories for good, or one of them (memory_id); cannot be undone. "
        "Call it only when the user asks for the app's memory to be erased.",
        {"app_id": "notes-app", "memory_id": 42}, AppMemoriesRequest,
        ("app_id", "memory_id"), schemas.Purged, "what was deleted", read_only=False,
        destructive=True, default=False, aliases=(("app", "app_id"), ("id", "memory_id"))),
}
DEFAULT_TOOLS = tuple(name for name, spec in TOOLS.items() if spec.default)
# `--tools` words: a tool's name without `memory_`, and 0.1.0's dotted names (until 0.2.0);
# the dotted record_task both added and changed tasks, now two tools.
_WORDS = {name.removeprefix("memory_"): (name,) for name in TOOLS}
_DOTTED = {f"memory.{word}": names for word, names in _WORDS.items()
           if word != "update_task"} | {"memory.record_task": ("memory_record_task",
                                                                "memory_update_task")}


def select_tools(spec: str | None) -> tuple[str, ...]:
    """The tool names for `--tools`: None/"default", "all", or a comma-separated list of names
    (`memory_query` or `query`; `memory.query` until 0.2.0). An unknown name is a UsageError."""
    if spec is None or spec.strip() in ("", "default"):
        return DEFAULT_TOOLS
    if spec.strip() == "all":
        return tuple(TOOLS)
    names: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part == "default":
            names.extend(DEFAULT_TOOLS)
        elif part in TOOLS:
            names.append(part)
        elif part in _WORDS or part in _DOTTED:
            names.extend(_WORDS.get(part) or _DOTTED[part])
        else:
            raise UsageError(f"unknown MCP tool: {part}", "choose from " + ", ".join(_WORDS))
    return tuple(dict.fromkeys(names))


def normalise(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool's arguments with aliases renamed and bare strings wrapped into lists; for an
    event, the record's shorthand (`text`, `message`, a string `content`: content.text;
    `role`: actor.type), as `POST /api/v1/events` reads it."""
    spec = TOOLS.get(tool)
    if spec is None:
        return arguments
    out = dict(arguments)
    for alias, canonical in spec.aliases:
        if alias in out and canonical not in out:
            out[canonical] = out.pop(alias)
    for name in spec.lists:
        if isinstance(out.get(name), str):
            out[name] = [out[name]]
    if tool == "memory_record_event":
        if isinstance(out.get("content"), str):
            out["content"] = {"text": out["content"]}
        for key in ("text", "message"):
            if isinstance(out.get(key), str) and isinstance(out.get("content"), dict | None):
                out["content"] = {"text": out.pop(key), **(out.get("content") or {})}
        if isinstance(out.get("role"), str) and "actor" not in out:
            out["actor"] = {"type": out.pop("role")}
    return out


def argument_problem(tool: str, arguments: dict[str, Any]) -> str | None:
    """What is wrong with a call's arguments (after `normalise`, the scope keys taken out), as
    one line, or None: the arguments the tool does not take, by name, else the first problem
    its input model finds (JSON given as a string read first, as the SDK reads it)."""
    spec = TOOLS[tool]
    unknown = sorted(set(arguments) - set(spec.input.model_fields))
    if unknown:
        return (f"{tool} does not take {', '.join(unknown)} (it takes "
                + ", ".join(spec.input.model_fields) + ")")
    try:
        spec.input.model_validate(FuncMetadata(arg_model=spec.input).pre_parse_json(arguments))
    except ValidationError as exc:
        return validation_line(exc, f"{tool} arguments", where="arguments")
    return None
