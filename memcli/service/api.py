"""The service's operations, shared by the HTTP API and the MCP server (no HTTP in here).

Each operation is `op(ctx, scope, request) -> payload`: `ctx` holds an open Memory and the
settings, `scope` is what the server bound for this caller (a token's tenant, a header, a path
segment), `request` the caller's JSON object (a dict, validated here by the same pydantic models
the CLI uses). The payload is the JSON the CLI prints for the same operation, built by the same
function (memcli.operations, memcli.ledger, ...).

The bound scope only narrows: a request naming another tenant, user, agent or app than the one
bound is refused (NotAllowedError, HTTP 403), never answered from the other scope. Errors are
memcli.errors types with their CLI exit code; `status_for` maps them to HTTP statuses once, for
HTTP and MCP alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from memcli.errors import (
    DatabaseBusyError,
    DiskFullError,
    MemcliError,
    NotAllowedError,
    NotFoundError,
    UsageError,
    ValidationError,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from memcli.config import Settings
    from memcli.memory import Memory
    from memcli.store.owner import Owner


@dataclass(frozen=True)
class Scope:
    """What the server bound for a caller. None: not bound (the request may name it; a read that
    names no tenant reads the configured one). `categories`: a category allowlist that narrows
    every read further (None: the agent's own allowlist only)."""

    tenant: str | None = None
    user_id: str | None = None
    agent: str | None = None  # the asking agent: its category allowlist applies (seed 000)
    app_id: str | None = None
    categories: tuple[str, ...] | None = None

    def narrowed(self, **bound: str | None) -> Scope:
        """This scope with more keys bound (a header or path segment); a key bound already
        to another value is refused."""
        values: dict[str, Any] = {k: _bind(k, getattr(self, k), v) for k, v in bound.items()}
        return replace(self, **values)


@dataclass
class Context:
    """What an operation runs against: one open Memory (its thread's) and the settings."""

    memory: Memory
    settings: Settings


_NAMES = {"tenant": "tenant", "user_id": "user", "agent": "agent", "app_id": "app"}


def _bind(key: str, bound: str | None, requested: str | None) -> str | None:
    """The value a request may use for a scope key: the bound one, or the request's own when
    nothing is bound. Naming another value than the bound one is refused."""
    if bound is None:
        return requested
    if requested is not None and requested != bound:
        name = _NAMES.get(key, key)
        raise NotAllowedError(f"this caller is bound to {name} {bound!r}, the request names "
                              f"{requested!r}", f"use {name} {bound!r} or another token")
    return bound


def _tenant(ctx: Context, scope: Scope, requested: str | None) -> str:
    """The one tenant a request reads or writes (never all tenants through the service)."""
    return _bind("tenant", scope.tenant, requested) or ctx.memory.tenant


def _categories(scope: Scope, requested: list[str] | None) -> list[str] | None:
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


def validate(model: type[BaseModel], data: Any, what: str) -> Any:
    """`data` as a `model`, or a one-line UsageError naming the first problem (HTTP 422)."""
    import pydantic

    from memcli.inputs import check_value

    if not isinstance(data, dict):
        raise UsageError(f"the {what} must be one JSON object")
    check_value(data, f"the {what}")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "request"
        message = first["msg"].removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise UsageError(f"bad {what}: {where}: {message}{more}") from None


# -- seed 003: events, bundles, artifacts, decisions, tasks ------------------------------------
def record_events(ctx: Context, scope: Scope, request: Any
                  ) -> dict[str, Any] | list[dict[str, Any]]:
    """Seed 003's `record_event`: one record (a JSON object) or a list of them, read as `memcli
    ingest` reads them (same validation, same redaction). The answer is the Agent Memory System
    PRD's `{event_id, chunk_ids, created_at}` per record, beside that record's ingest report
    (repeats in `skipped`, problems in `rejected`: the caller answers 422 when any was
    rejected); one object for one record, a list for a list. Records default to the bound
    scope; one naming another tenant, user, agent or app is refused whole."""
    records = list(request) if isinstance(request, list) else [request]
    keys = (("tenant_id", "tenant"), ("user_id", "user_id"), ("agent_id", "agent"),
            ("app_id", "app_id"))
    for i, record in enumerate(records):
        if isinstance(record, dict):
            category = record.get("category")
            _categories(scope, [category if isinstance(category, str) else "event"])
            for key, name in keys:
                value = record.get(key)
                bound = _bind(name, getattr(scope, name), None if value is None else str(value))
                if bound is not None and value is None:  # an explicit null cannot escape it
                    records[i] = record = {**record, key: bound}
    defaults = {"tenant_id": scope.tenant, "user_id": scope.user_id, "agent_id": scope.agent,
                "app_id": scope.app_id}
    from memcli.operations import record_events_payload

    out = record_events_payload(ctx.memory, records, defaults=defaults, tenant=scope.tenant)
    return out if isinstance(request, list) else out[0]


def rejected(out: Any) -> bool:
    """Whether an answer holds a rejected record (`record_events`: HTTP 422)."""
    rows = out if isinstance(out, list) else [out]
    return any(isinstance(row, dict) and row.get("rejected") for row in rows)


def build_acb(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """Seed 003's `build_acb`: the bundle `memcli acb build --json` prints for this request."""
    from memcli.inputs import check_value
    from memcli.operations import acb_payload, prepare_acb

    if not isinstance(request, dict):
        raise UsageError("the acb request must be one JSON object")
    req, note = prepare_acb(check_value(dict(request), "the acb request"))
    req.tenant_id = _tenant(ctx, scope, req.tenant_id)
    req.user_id = _bind("user_id", scope.user_id, req.user_id)
    req.agent_id = _bind("agent", scope.agent, req.agent_id)
    req.app_id = _bind("app_id", scope.app_id, req.app_id)
    req.categories = _categories(scope, req.categories or None) or []
    return acb_payload(ctx.memory, req, note, settings=ctx.settings, allowed=scope.categories)


def get_artifact(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """The full output kept for a truncated tool result (`memcli artifact ID`), in the caller's
    tenant only: `{artifact_id, tenant_id, bytes, text}` (text decoded as UTF-8, bad bytes
    replaced). An event of kind `artifact` is found by its event id too."""
    from memcli.operations import artifact_body
    from memcli.service.models import ArtifactQuery

    req = validate(ArtifactQuery, request, "artifact request")
    owner = _owner(ctx, scope, req.tenant_id)
    body = artifact_body(ctx.memory, req.artifact_id, owner)
    return {"artifact_id": req.artifact_id, "tenant_id": owner.tenant_id, "bytes": len(body),
            "text": body.decode("utf-8", errors="replace")}


def record_decision(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """`memcli decision add` (or `decision supersede` with `supersedes`): the decision's row."""
    from memcli import ledger
    from memcli.service.models import DecisionRequest

    req = validate(DecisionRequest, request, "decision")
    lists = {"rationale": req.rationale, "constraints": req.constraints,
             "alternatives": req.alternatives, "consequences": req.consequences,
             "refs": req.refs}
    where = _write_scope(ctx, scope, req, "decisions")
    if req.supersedes is not None:  # the row it replaces: the caller's, of the scope named
        owner = _owner(ctx, scope, where["tenant_id"], where["user_id"], where["app_id"])
        return ledger.supersede_decision(ctx.memory, req.supersedes, req.decision, owner=owner,
                                         reason=req.reason, **lists)
    return ledger.add_decision(
        ctx.memory, req.decision, scope=req.scope, channel=req.channel,
        sensitivity=req.sensitivity, **where, **lists)


def query_decisions(ctx: Context, scope: Scope, request: dict[str, Any]) -> list[dict[str, Any]]:
    """`memcli decision list`: the caller's tenant's decisions, newest first."""
    from memcli import ledger
    from memcli.service.models import DecisionsQuery

    req = validate(DecisionsQuery, request, "decisions query")
    return ledger.list_decisions(
        ctx.memory, status=None if req.status == "all" else req.status,
        tenant_id=_tenant(ctx, scope, req.tenant_id),
        user_id=_bind("user_id", scope.user_id, req.user_id),
        app_id=_bind("app_id", scope.app_id, req.app_id), limit=req.limit)


def record_task(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """`memcli task add`, or `memcli task update` when `task_id` names a task: the task's row."""
    from memcli import ledger
    from memcli.service.models import TaskRequest

    req = validate(TaskRequest, request, "task")
    where = _write_scope(ctx, scope, req, "tasks")
    if req.task_id is not None:  # the task it changes: the caller's, of the scope named
        owner = _owner(ctx, scope, where["tenant_id"], where["user_id"], where["app_id"])
        return ledger.update_task(ctx.memory, req.task_id, status=req.status, title=req.title,
                                  details=req.details, refs=req.refs or None, owner=owner)
    if req.title is None:
        raise UsageError("bad task: title: a new task needs a title",
                         "give task_id to update one")
    return ledger.add_task(
        ctx.memory, req.title, details=req.details or "", status=req.status or "open",
        refs=req.refs, channel=req.channel, sensitivity=req.sensitivity, **where)


def _write_scope(ctx: Context, scope: Scope, req: Any, category: str | None) -> dict[str, Any]:
    """The scope keys of a write: the request's, inside the bound scope (a key naming another
    value than the bound one, or a `category` outside the bound categories: 403)."""
    _categories(scope, None if category is None else [category])
    return {"tenant_id": _tenant(ctx, scope, req.tenant_id),
            "user_id": _bind("user_id", scope.user_id, req.user_id),
            "session_id": req.session_id,
            "agent_id": _bind("agent", scope.agent, req.agent_id),
            "app_id": _bind("app_id", scope.app_id, req.app_id)}


def _owner(ctx: Context, scope: Scope, tenant: str | None = None, user_id: str | None = None,
           app_id: str | None = None) -> Owner:
    """Whose rows this caller may touch by id (memcli.store.owner): the tenant (and user and
    app) the request names inside its binding, in the categories its token and its agent's
    allowlist both allow; any other row is "not found" (404), as an id that does not exist."""
    from memcli.store.owner import Owner

    known = ctx.memory.categories
    allowed = known.allowed(scope.agent)  # None: every category
    categories = scope.categories
    if allowed is not None:
        categories = tuple(c for c in (categories or allowed) if c in allowed)
    hidden = known.hidden(scope.agent) if scope.agent is not None else ()
    return Owner(tenant_id=_tenant(ctx, scope, tenant),
                 user_id=_bind("user_id", scope.user_id, user_id),
                 app_id=_bind("app_id", scope.app_id, app_id),
                 categories=categories, hidden=hidden)


# -- seed 000: query and history ---------------------------------------------------------------
def query(ctx: Context, scope: Scope, request: dict[str, Any]) -> list[dict[str, Any]]:
    """Seed 000's `memory.query`: the request shape `memcli query -` reads, answered with what
    `memcli query --json` prints (hits, or bullets with `"return": "bullets"`; each hit names
    the scope that answered)."""
    from memcli.inputs import check_value
    from memcli.operations import check_query, hits_payload, run_query
    from memcli.query_request import parse_query_request

    if not isinstance(request, dict):
        raise UsageError("the query request must be one JSON object")
    values = parse_query_request(check_value(request, "the query request")).as_flags()
    text, _note = check_query(values.pop("text"))
    values["tenant"] = _tenant(ctx, scope, values["tenant"])
    values["user"] = _bind("user_id", scope.user_id, values["user"])
    values["agent"] = _bind("agent", scope.agent, values["agent"])
    values["app_id"] = _bind("app_id", scope.app_id, values["app_id"])
    values["category"] = _categories(scope, values["category"])
    result = run_query(ctx.memory, text, values)
    return hits_payload(result, values["return_mode"])


def memory_history(ctx: Context, scope: Scope, request: dict[str, Any]) -> list[dict[str, Any]]:
    """`memcli history ID`: what happened to a memory, newest first, in the caller's tenant."""
    from memcli.service.models import HistoryQuery

    req = validate(HistoryQuery, request, "history request")
    return ctx.memory.history(req.memory_id, owner=_owner(ctx, scope, req.tenant_id),
                              limit=req.limit)


# -- remember / forget -------------------------------------------------------------------------
def remember(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """`memcli remember`: store a fact or a procedure (near-duplicates merged)."""
    from memcli.inputs import check_text
    from memcli.lifecycle.remember import remember as remember_fact
    from memcli.service.models import RememberRequest

    req = validate(RememberRequest, request, "remember request")
    if req.text is None and not req.steps:
        raise UsageError("nothing to remember", "give text or steps")
    if req.text is not None:
        check_text(req.text, "the text")
    category = ("procedural" if req.procedural else "profile" if req.field is not None
                else req.category or "knowledge")  # where remember will write it
    where = _write_scope(ctx, scope, req, category)
    return remember_fact(
        ctx.memory, ctx.settings.lifecycle, text=req.text, procedural=req.procedural,
        steps=req.steps or None, field=req.field, tenant_id=where["tenant_id"],
        user_id=where["user_id"], agent_id=where["agent_id"], session_id=req.session_id,
        app_id=where["app_id"], category=req.category, importance=req.importance,
        pinned=req.pinned, title=req.title)


def forget(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """`memcli forget ID`: soft-delete one of the caller's memories."""
    from memcli.service.models import ForgetRequest

    req = validate(ForgetRequest, request, "forget request")
    return ctx.memory.forget(req.memory_id, _owner(ctx, scope, req.tenant_id))


# -- seed 001: an app's memories ---------------------------------------------------------------
def app_memories(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """Seed 001's `GET /apps/{app_id}/memories`: the app's active memories, newest first."""
    from memcli.service.models import AppMemoriesQuery
    from memcli.store.apps import list_app_memories

    req = validate(AppMemoriesQuery, request, "app memories request")
    app_id = _bind("app_id", scope.app_id, req.app_id) or req.app_id
    owner = _owner(ctx, scope, req.tenant_id, req.user_id, app_id)
    rows = list_app_memories(ctx.memory.db, tenant_id=owner.tenant_id, app_id=app_id,
                             user_id=owner.user_id, limit=req.limit,
                             categories=owner.categories, hidden=owner.hidden)
    return {"tenant_id": owner.tenant_id, "app_id": app_id, "memories": rows}


def delete_app_memories(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """Seed 001's admin purge: `memcli purge --app APP` (one memory with `memory_id`: `purge
    --memory ID --app APP`, which takes the event it was cut from with it). Deleted for good."""
    from memcli.operations import check_purged, purge_payload
    from memcli.service.models import AppMemoriesQuery

    req = validate(AppMemoriesQuery, request, "app memories request")
    app_id = _bind("app_id", scope.app_id, req.app_id) or req.app_id
    tenant = _tenant(ctx, scope, req.tenant_id)
    user = _bind("user_id", scope.user_id, req.user_id)
    owner = _owner(ctx, scope, tenant, user, app_id)
    if req.memory_id is not None:  # the caller's, of this app (and user), or not found
        from memcli.store.owner import memory

        memory(ctx.memory.db, req.memory_id, owner)
    elif owner.categories is not None or owner.hidden:
        raise NotAllowedError("this caller may not see every category, so it may not purge "
                              "a whole app", "purge its memories one by one (memory_id), "
                              "or use a token without categories or agent")
    out = purge_payload(ctx.memory, memory_id=req.memory_id, user=user, tenant=tenant,
                        app_id=app_id)
    check_purged(out)
    return out


# -- running an operation ----------------------------------------------------------------------
@dataclass
class Service:
    """The open database for a server's worker threads: one Memory per thread (apsw
    connections are not shared between threads; on PostgreSQL one per request, on a pooled
    connection) and the models built once and shared. Writes
    queue on the process-wide writer lock `Database.transaction` takes
    (memcli/store/sqlite/writers.py), bounded by the busy timeout (then 503, exit 75), and only
    around the transaction: a write's models run before it, as in the CLI, so one request's
    embedding never holds up another's."""

    settings: Settings
    _local: threading.local = field(default_factory=threading.local)
    _opened: list[Memory] = field(default_factory=list)
    _models: tuple[Any, Any] | None = None
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def models(self) -> tuple[Any, Any]:
        """The embedder and SPLADE encoder, constructed once (they load lazily, thread-safe)."""
        with self._guard:
            if self._models is None:
                from memcli.memory import make_embedder, make_sparse

                self._models = (make_embedder(self.settings), make_sparse(self.settings))
            return self._models

    def memory(self) -> Memory:
        """This thread's Memory, kept open (a SQLite file)."""
        memory = getattr(self._local, "memory", None)
        if memory is None:
            embedder, sparse = self.models()
            # One thread opens at a time: the first open creates the schema and switches the
            # file to WAL, which two connections opening side by side could stall on for the
            # whole busy timeout (two agents' first writes through a fresh daemon).
            with self._guard:
                memory = self._open(embedder, sparse)
                self._opened.append(memory)
            self._local.memory = memory
        memory.db.crypto.refresh()  # kept open: see `high` rows another connection sealed since
        return memory

    def _open(self, embedder: Any, sparse: Any) -> Memory:
        """The database for reading and writing; a write-protected one (the file, or its
        folder, which must hold the -wal and -shm files) for reading only, as a CLI read
        command opens it: reads answer, and a write says the file is read-only."""
        from memcli.errors import StorageError
        from memcli.memory import Memory

        try:
            return Memory.open(self.settings.db, embedder=embedder, sparse=sparse,
                               settings=self.settings)
        except StorageError as exc:
            try:
                return Memory.open(self.settings.db, embedder=embedder, sparse=sparse,
                                   settings=self.settings, must_exist=True)
            except MemcliError:
                raise exc from None

    def run(self, operation: Callable[[Context, Scope, Any], Any], scope: Scope,
            request: Any) -> Any:
        """Run one operation for one caller (on the calling thread). On a PostgreSQL server
        the request borrows a connection from the daemon's pool for its own length (a
        thread's idle connection would hold a server slot for nothing)."""
        if not self._server():
            memory = self.memory()
            try:
                return operation(Context(memory, self.settings), scope, request)
            except Exception as exc:
                # A full disk, a read-only file, an I/O error: named as the CLI names them
                # (its Memory does this on leaving its `with`; this one stays open).
                failure = memory.db.backend.environment_error(memory.db, exc)
                if failure is not None:
                    raise failure from exc
                raise
        from memcli.memory import Memory

        embedder, sparse = self.models()
        with Memory.open(self.settings.db, embedder=embedder, sparse=sparse,
                         settings=self.settings) as memory:
            return operation(Context(memory, self.settings), scope, request)

    def _server(self) -> bool:
        from memcli.store.location import is_postgres

        return is_postgres(self.settings.db)

    def close(self) -> None:
        with self._guard:
            opened, self._opened = self._opened, []
        for memory in opened:
            memory.close()


# -- errors ------------------------------------------------------------------------------------
def status_for(exc: BaseException) -> tuple[int, dict[str, str]]:
    """The HTTP status (and headers) of an error, from its kind and CLI exit code:
    not found 404, outside the caller's scope 403, bad input (exit 2) 422, busy (exit 75) 503
    with Retry-After, a full disk 507 (Insufficient Storage), anything else 500."""
    if isinstance(exc, NotFoundError):
        return 404, {}
    if isinstance(exc, NotAllowedError):
        return 403, {}
    if isinstance(exc, BadRequest):
        return 400, {}
    if isinstance(exc, DatabaseBusyError):
        return 503, {"Retry-After": "1"}
    if isinstance(exc, DiskFullError):
        return 507, {}
    if isinstance(exc, UsageError | ValidationError):
        return 422, {}
    return 500, {}


class BadRequest(UsageError):
    """A request that is not even JSON (HTTP 400; a JSON body that fails its model is 422)."""


def error_payload(exc: BaseException) -> dict[str, Any]:
    """`{"error": <one line>, "exit_code": N}`: the CLI's message and code, never a traceback."""
    if isinstance(exc, MemcliError):
        return {"error": str(exc).splitlines()[0] if str(exc) else "error",
                "exit_code": exc.exit_code}
    text = str(exc).splitlines()[0] if str(exc) else "no message"
    return {"error": f"unexpected error: {text} (a bug in memcli: please report it)",
            "exit_code": 1}
