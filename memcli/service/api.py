"""The service's operations, shared by the HTTP API and the MCP server (no HTTP in here).

Each operation is `op(ctx, binding, request) -> payload`: `ctx` holds an open Memory and the
settings, `binding` is what the server bound for this caller (a token's tenant, a header, a
path segment), `request` the caller's request as its model, validated once where it came in
(memcli.service.typed_ops: the HTTP route, the MCP tool or `Service.run`). The payload is the
JSON the CLI prints for the same operation, built by the same function (memcli.operations,
memcli.ledger, ...).

The binding only narrows (memcli.operations.binding.bound): a request naming another tenant,
user, agent or app than the one bound is refused (NotAllowedError, HTTP 403), never answered
from the other scope. Errors are memcli.errors types with their CLI exit code; `status_for`
maps them to HTTP statuses once, for HTTP and MCP alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
from memcli.operations import ledger_ops, lifecycle_ops
from memcli.operations.binding import Binding, bind, bound, categories, owner
from memcli.operations.bundle import acb_payload
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
from memcli.operations.memory import Memory, make_embedder, make_sparse
from memcli.operations.record import record_events_payload
from memcli.operations.requests import (
    QUERY_HINT,
    AcbRequest,
    EventBatch,
    HistoryRequest,
    QueryRequest,
)
from memcli.operations.retrieve import hits_payload, run_query
from memcli.service.typed_ops import request_for, takes

if TYPE_CHECKING:
    from memcli.config import Settings
    from memcli.operations.memory import Memory
    from memcli.store.owner import Owner

@dataclass
class Context:
    """What an operation runs against: one open Memory (its thread's) and the settings."""

    memory: Memory
    settings: Settings


def invalid(what: str, errors: Any, hint: str | None = None) -> UsageError:
    """Pydantic's validation errors as one line: the first problem, where it is, and how many
    more (HTTP 422, exit code 2), by the one rule (memcli.errors.validation_line)."""
    return UsageError(validation_line(errors, what), hint)


# -- the Agent Memory System PRD: events, bundles, artifacts, decisions, tasks -----------------
@takes(EventBatch, "events")
def record_events(ctx: Context, binding: Binding, batch: EventBatch
                  ) -> dict[str, Any] | list[dict[str, Any]]:
    """The PRD's `record_event`: one record (a JSON object) or a list of them, read as `memcli
    ingest` reads them (same validation, same redaction). The answer is the Agent Memory System
    PRD's `{event_id, chunk_ids, created_at}` per record, beside that record's ingest report
    (repeats in `skipped`, problems in `rejected`: the caller answers 422 when any was
    rejected); one object for one record, a list for a list. Records default to the bound
    scope; one naming another tenant, user, agent or app is refused whole."""
    records = batch.records()
    keys = (("tenant_id", "tenant"), ("user_id", "user_id"), ("agent_id", "agent"),
            ("app_id", "app_id"))
    for i, record in enumerate(records):
        if isinstance(record, dict):
            category = record.get("category")
            categories(binding, [category if isinstance(category, str) else "event"])
            for key, name in keys:
                value = record.get(key)
                kept = bind(name, getattr(binding, name), None if value is None else str(value))
                if kept is not None and value is None:  # an explicit null cannot escape it
                    records[i] = record = {**record, key: kept}
    defaults = {"tenant_id": binding.tenant, "user_id": binding.user_id,
                "agent_id": binding.agent, "app_id": binding.app_id}
    out = record_events_payload(ctx.memory, records, defaults=defaults, tenant=binding.tenant)
    return out if batch.many else out[0]


def rejected(out: Any) -> bool:
    """Whether an answer holds a rejected record (`record_events`: HTTP 422)."""
    rows = out if isinstance(out, list) else [out]
    return any(isinstance(row, dict) and row.get("rejected") for row in rows)


@takes(AcbRequest, "acb request")
def build_acb(ctx: Context, binding: Binding, req: AcbRequest) -> dict[str, Any]:
    """The Agent Memory System PRD's `build_acb`: the bundle `memcli acb build --json` prints for
    this request."""
    return acb_payload(ctx.memory, bound(ctx.memory, binding, req), settings=ctx.settings,
                       allowed=binding.categories)


@takes(ArtifactRequest, "artifact request")
def get_artifact(ctx: Context, binding: Binding, req: ArtifactRequest) -> dict[str, Any]:
    """The full output kept for a truncated tool result (`memcli artifact ID`), in the caller's
    tenant only. An event of kind `artifact` is found by its event id too."""
    return ledger_ops.get_artifact(ctx.memory, req, owner(ctx.memory, binding, req.tenant_id))


@takes(DecisionRequest, "decision")
def record_decision(ctx: Context, binding: Binding, req: DecisionRequest) -> dict[str, Any]:
    """`memcli decision add` (or `decision supersede` with `supersedes`): the decision's row;
    the decision it replaces must be the caller's, of the scope named."""
    req = bound(ctx.memory, binding, req, "decisions")
    return ledger_ops.record_decision(ctx.memory, req, _write_owner(ctx, binding, req))


@takes(DecisionsQuery, "decisions query")
def query_decisions(ctx: Context, binding: Binding, req: DecisionsQuery
                    ) -> list[dict[str, Any]]:
    """`memcli decision list`: the caller's tenant's decisions, newest first."""
    return ledger_ops.query_decisions(ctx.memory, bound(ctx.memory, binding, req))


@takes(TaskRequest, "task")
def record_task(ctx: Context, binding: Binding, req: TaskRequest) -> dict[str, Any]:
    """`memcli task add`, or `memcli task update` when `task_id` names a task: the task's row;
    the task it changes must be the caller's, of the scope named."""
    req = bound(ctx.memory, binding, req, "tasks")
    return ledger_ops.record_task(ctx.memory, req, _write_owner(ctx, binding, req))


def _write_owner(ctx: Context, binding: Binding, req: Any) -> Owner:
    """Whose row a write that names one by id may change: the scope its request names."""
    return owner(ctx.memory, binding, req.tenant_id, req.user_id, req.app_id)


# -- the memory system spec: query and history ------------------------------------------------
@takes(QueryRequest, "query request", hint=QUERY_HINT)
def query(ctx: Context, binding: Binding, req: QueryRequest) -> Any:
    """The memory system spec's `memory.query`: the request shape `memcli query -` reads, answered
    with what `memcli query --json` prints (hits, or bullets with `"return": "bullets"`, or the
    whole account with `explain`; each hit names the scope that answered)."""
    req = bound(ctx.memory, binding, req)
    return hits_payload(run_query(ctx.memory, req), req)


@takes(HistoryRequest, "history request")
def memory_history(ctx: Context, binding: Binding, req: HistoryRequest
                   ) -> list[dict[str, Any]]:
    """`memcli history ID`: what happened to a memory, newest first, in the caller's tenant."""
    if req.memory_id is None:
        raise UsageError("bad history request: memory_id: Field required")
    rows = owner(ctx.memory, binding, req.tenant_id, req.user_id)
    return ctx.memory.history(req.memory_id, owner=rows, limit=req.limit,
                              user_id=rows.user_id, session_id=req.session_id)


# -- remember / forget -------------------------------------------------------------------------
@takes(RememberRequest, "remember request")
def remember(ctx: Context, binding: Binding, req: RememberRequest) -> dict[str, Any]:
    """`memcli remember`: store a fact or a procedure (near-duplicates merged)."""
    req = bound(ctx.memory, binding, req, req.target())
    return lifecycle_ops.remember(ctx.memory, ctx.settings.lifecycle, req)


@takes(MemoryRequest, "forget request")
def forget(ctx: Context, binding: Binding, req: MemoryRequest) -> dict[str, Any]:
    """`memcli forget ID`: soft-delete one of the caller's memories."""
    return ctx.memory.forget(req.memory_id, owner(ctx.memory, binding, req.tenant_id))


# -- the app-memory design: an app's memories -------------------------------------------------
@takes(AppMemoriesRequest, "app memories request")
def app_memories(ctx: Context, binding: Binding, req: AppMemoriesRequest) -> dict[str, Any]:
    """The app-memory design's `GET /apps/{app_id}/memories`: the app's active memories, newest
    first."""
    req = bound(ctx.memory, binding, req)
    return lifecycle_ops.app_memories(ctx.memory, req, _write_owner(ctx, binding, req))


@takes(AppMemoriesRequest, "app memories request")
def delete_app_memories(ctx: Context, binding: Binding, req: AppMemoriesRequest
                        ) -> dict[str, Any]:
    """The app-memory design's admin purge (one memory with `memory_id`). Deleted for good."""
    req = bound(ctx.memory, binding, req)
    return lifecycle_ops.delete_app_memories(ctx.memory, req, _write_owner(ctx, binding, req))


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

    def run(self, operation: Callable[[Context, Binding, Any], Any], scope: Binding,
            request: Any) -> Any:
        """Run one operation for one caller (on the calling thread). On a PostgreSQL server
        the request borrows a connection from the daemon's pool for its own length (a
        thread's idle connection would hold a server slot for nothing). The operation
        gets the request as its model: the caller's if it built it (an HTTP route, an MCP
        tool), else validated here once (memcli.service.typed_ops)."""
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
