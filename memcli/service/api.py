"""The service's operations, shared by the HTTP API and the MCP server (no HTTP in here).

Each operation is `op(ctx, scope, request) -> payload`: `ctx` holds an open Memory and the
settings, `scope` is what the server bound for this caller (a token's tenant, a header, a path
segment), `request` the caller's request: its validated model for an operation marked by
`takes` (memcli.service.typed_ops: the HTTP route, MCP tool or Service.run validated it once),
else the caller's JSON object, validated here by the same pydantic models the CLI uses. The
payload is the JSON the CLI prints for the same operation, built by the same function
(memcli.operations, memcli.ledger, ...).

The bound scope only narrows: a request naming another tenant, user, agent or app than the one
bound is refused (NotAllowedError, HTTP 403), never answered from the other scope. Errors are
memcli.errors types with their CLI exit code; `status_for` maps them to HTTP statuses once, for
HTTP and MCP alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memcli.core.inputs import check_value
from memcli.core.locations import is_postgres
from memcli.errors import (
    DatabaseBusyError,
    DiskFullError,
    MemcliError,
    NotAllowedError,
    NotFoundError,
    StorageError,
    UsageError,
    ValidationError,
    validation_line,
)
from memcli.operations import binding, ledger_ops
from memcli.operations.binding import Scope
from memcli.operations.bundle import acb_payload, prepare_acb
from memcli.operations.lifecycle_ops import app_memories as listed
from memcli.operations.lifecycle_ops import delete_app_memories as purged
from memcli.operations.lifecycle_ops import remember as remember_fact
from memcli.operations.lifecycle_requests import AppMemoriesRequest, MemoryRequest, RememberRequest
from memcli.operations.memory import Memory, make_embedder, make_sparse
from memcli.operations.record import record_events_payload
from memcli.operations.requests import HistoryRequest, validated
from memcli.operations.retrieve import hits_payload, run_query
from memcli.service.typed_ops import request_for, takes

if TYPE_CHECKING:
    from pydantic import BaseModel

    from memcli.acb.build import AcbRequest
    from memcli.config import Settings
    from memcli.operations.ledger_ops import DecisionRequest, DecisionsQuery, TaskRequest
    from memcli.operations.requests import QueryRequest
    from memcli.store.owner import Owner


@dataclass
class Context:
    """What an operation runs against: one open Memory (its thread's) and the settings."""

    memory: Memory
    settings: Settings


def _bind(key: str, bound: str | None, requested: str | None) -> str | None:
    return binding.bind(key, bound, requested)


def _tenant(ctx: Context, scope: Scope, requested: str | None) -> str:
    return binding.tenant(ctx.memory, scope, requested)


def _categories(scope: Scope, requested: list[str] | None) -> list[str] | None:
    return binding.categories(scope, requested)


def validate(model: type[BaseModel], data: Any, what: str) -> Any:
    """`data` as a `model`, or a one-line UsageError naming the first problem (HTTP 422)."""

    if not isinstance(data, dict):
        raise UsageError(f"the {what} must be one JSON object")
    check_value(data, f"the {what}")
    return validated(model, data, what)


def invalid(what: str, errors: Any, hint: str | None = None) -> UsageError:
    """Pydantic's validation errors as one line: the first problem, where it is, and how many
    more (HTTP 422, exit code 2), by the one rule (memcli.errors.validation_line)."""
    return UsageError(validation_line(errors, what), hint)


# -- the Agent Memory System PRD: events, bundles, artifacts, decisions, tasks -----------------
def record_events(ctx: Context, scope: Scope, request: Any
                  ) -> dict[str, Any] | list[dict[str, Any]]:
    """The PRD's `record_event`: one record (a JSON object) or a list of them, read as `memcli
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

    out = record_events_payload(ctx.memory, records, defaults=defaults, tenant=scope.tenant)
    return out if isinstance(request, list) else out[0]


def rejected(out: Any) -> bool:
    """Whether an answer holds a rejected record (`record_events`: HTTP 422)."""
    rows = out if isinstance(out, list) else [out]
    return any(isinstance(row, dict) and row.get("rejected") for row in rows)


@takes("memcli.acb.build:AcbRequest", "acb request")
def build_acb(ctx: Context, scope: Scope, req: AcbRequest) -> dict[str, Any]:
    """The Agent Memory System PRD's `build_acb`: the bundle `memcli acb build --json` prints for
    this request."""

    req, note = prepare_acb(req)
    req.tenant_id = _tenant(ctx, scope, req.tenant_id)
    req.user_id = _bind("user_id", scope.user_id, req.user_id)
    req.agent_id = _bind("agent", scope.agent, req.agent_id)
    req.app_id = _bind("app_id", scope.app_id, req.app_id)
    req.categories = _categories(scope, req.categories or None) or []
    return acb_payload(ctx.memory, req, note, settings=ctx.settings, allowed=scope.categories)


def get_artifact(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """The full output kept for a truncated tool result (`memcli artifact ID`), in the caller's
    tenant only. An event of kind `artifact` is found by its event id too."""

    req = validate(ledger_ops.ArtifactRequest, request, "artifact request")
    return ledger_ops.get_artifact(ctx.memory, req, _owner(ctx, scope, req.tenant_id))


@takes("memcli.operations.ledger_ops:DecisionRequest", "decision")
def record_decision(ctx: Context, scope: Scope, req: DecisionRequest) -> dict[str, Any]:
    """`memcli decision add` (or `decision supersede` with `supersedes`): the decision's row;
    the decision it replaces must be the caller's, of the scope named."""

    req = req.model_copy(update=_write_scope(ctx, scope, req, "decisions"))
    return ledger_ops.record_decision(ctx.memory, req, _write_owner(ctx, scope, req))


@takes("memcli.operations.ledger_ops:DecisionsQuery", "decisions query")
def query_decisions(ctx: Context, scope: Scope, req: DecisionsQuery) -> list[dict[str, Any]]:
    """`memcli decision list`: the caller's tenant's decisions, newest first."""

    req = req.model_copy(update={"tenant_id": _tenant(ctx, scope, req.tenant_id),
                                 "user_id": _bind("user_id", scope.user_id, req.user_id),
                                 "app_id": _bind("app_id", scope.app_id, req.app_id)})
    return ledger_ops.query_decisions(ctx.memory, req)


@takes("memcli.operations.ledger_ops:TaskRequest", "task")
def record_task(ctx: Context, scope: Scope, req: TaskRequest) -> dict[str, Any]:
    """`memcli task add`, or `memcli task update` when `task_id` names a task: the task's row;
    the task it changes must be the caller's, of the scope named."""

    req = req.model_copy(update=_write_scope(ctx, scope, req, "tasks"))
    return ledger_ops.record_task(ctx.memory, req, _write_owner(ctx, scope, req))


def _write_owner(ctx: Context, scope: Scope, req: Any) -> Owner:
    """Whose row a write that names one by id may change: the scope its request names."""
    return _owner(ctx, scope, req.tenant_id, req.user_id, req.app_id)


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
    """Whose rows this caller may touch by id (memcli.operations.binding.owner)."""
    return binding.owner(ctx.memory, scope, tenant, user_id, app_id)


# -- the memory system spec: query and history ------------------------------------------------
@takes("memcli.operations.requests:QueryRequest", "query request",
       hint="see `memcli query --help` and the README's JSON request")
def query(ctx: Context, scope: Scope, req: QueryRequest) -> list[dict[str, Any]]:
    """The memory system spec's `memory.query`: the request shape `memcli query -` reads, answered
    with what `memcli query --json` prints (hits, or bullets with `"return": "bullets"`; each hit
    names the scope that answered)."""

    req = req.model_copy(update={
        "tenant_id": _tenant(ctx, scope, req.tenant_id),
        "user_id": _bind("user_id", scope.user_id, req.user_id),
        "agent_id": _bind("agent", scope.agent, req.agent_id),
        "app_id": _bind("app_id", scope.app_id, req.app_id),
        "categories": _categories(scope, req.categories)})
    result, _note = run_query(ctx.memory, req)
    return hits_payload(result, req.return_format)


def memory_history(ctx: Context, scope: Scope, request: dict[str, Any]) -> list[dict[str, Any]]:
    """`memcli history ID`: what happened to a memory, newest first, in the caller's tenant."""

    req = validate(HistoryRequest, request, "history request")
    if req.memory_id is None:
        raise UsageError("bad history request: memory_id: Field required")
    owner = _owner(ctx, scope, req.tenant_id, req.user_id)
    return ctx.memory.history(req.memory_id, owner=owner, limit=req.limit,
                              user_id=owner.user_id, session_id=req.session_id)


# -- remember / forget -------------------------------------------------------------------------
def remember(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """`memcli remember`: store a fact or a procedure (near-duplicates merged)."""

    req = validate(RememberRequest, request, "remember request")
    where = _write_scope(ctx, scope, req, req.target())
    return remember_fact(ctx.memory, ctx.settings.lifecycle, req.model_copy(update=where))


def forget(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """`memcli forget ID`: soft-delete one of the caller's memories."""

    req = validate(MemoryRequest, request, "forget request")
    return ctx.memory.forget(req.memory_id, _owner(ctx, scope, req.tenant_id))


# -- the app-memory design: an app's memories -------------------------------------------------
def _app_request(ctx: Context, scope: Scope, request: dict[str, Any]) -> tuple[Any, Owner]:
    """An app memories request inside the bound scope, and whose rows it may touch."""

    req = validate(AppMemoriesRequest, request, "app memories request")
    req.app_id = _bind("app_id", scope.app_id, req.app_id) or req.app_id
    return req, _owner(ctx, scope, req.tenant_id, req.user_id, req.app_id)


def app_memories(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """The app-memory design's `GET /apps/{app_id}/memories`: the app's active memories, newest
    first."""

    return listed(ctx.memory, *_app_request(ctx, scope, request))


def delete_app_memories(ctx: Context, scope: Scope, request: dict[str, Any]) -> dict[str, Any]:
    """The app-memory design's admin purge (one memory with `memory_id`). Deleted for good."""

    return purged(ctx.memory, *_app_request(ctx, scope, request))


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
        thread's idle connection would hold a server slot for nothing). An operation that
        takes its model gets the request as that model: the caller's if it built it (an HTTP
        route, an MCP tool), else validated here once (memcli.service.typed_ops)."""
        request = request_for(operation, request)
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

        embedder, sparse = self.models()
        with Memory.open(self.settings.db, embedder=embedder, sparse=sparse,
                         settings=self.settings) as memory:
            return operation(Context(memory, self.settings), scope, request)

    def _server(self) -> bool:
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
