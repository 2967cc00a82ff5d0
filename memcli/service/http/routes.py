"""The routes of `memcli serve`'s HTTP API, each one operation of memcli.service.api answering
with the JSON the CLI prints for the same request.

A route's signature declares its request (the body's model, or its query parameters' model,
and its path's ids) and its decorator the model of its answer (memcli.service.schemas): FastAPI
validates the one and builds /openapi.json from both, and the route class
(memcli.service.http.api_route.ApiRoute) checks the answer against its model before it is sent. An
operation that takes its model (memcli.service.typed_ops) gets the body FastAPI validated,
never validating it again (a route with ids in its path puts them and its query
parameters together as the model: `whole`); the MCP tools build the same model from their
arguments. The bound
scope comes from the caller's token and headers, never from the body (memcli.service.http.auth).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SkipValidation
from starlette.requests import Request

from memcli import __version__
from memcli.core.ids import Id
from memcli.core.records import EventIn, EventReceipt, Hit, QueryResult
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
from memcli.operations.requests import QUERY_HINT, AcbRequest, HistoryRequest, QueryRequest
from memcli.service import api, schemas
from memcli.service.http.api_route import (
    Answer,
    ApiRoute,
    Call,
    built,
    operation,
    query_params,
    whole,
)

# The request models defer their build to their first use (the CLI's start-up pays nothing
# for them). FastAPI makes a TypeAdapter of `Annotated[Model, Body(alias=<parameter>)]` for each
# route, under a guard against pydantic's warning that such an alias has no effect; a deferred
# model defers that adapter too, to the route's first request, outside the guard, and the
# warning (one per route and process) reached every log and test run. A server builds them now.
built(AcbRequest, AppMemoriesRequest, ArtifactRequest, DecisionRequest, DecisionsQuery,
      EventIn, HistoryRequest, MemoryRequest, QueryRequest, RememberRequest, TaskRequest)

BEARER = HTTPBearer(scheme_name="bearer", auto_error=False,
                    description="a token of the server's token file (none on its Unix socket)")


async def _call(request: Request,
                _token: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]
                ) -> Call:
    """The checked call ApiRoute bound before the endpoint runs (the token is declared here
    for the document; ApiRoute has checked it, before the body was read). `async`: FastAPI
    runs it on the event loop, not on a worker thread of its own."""
    return request.state.memcli_call


Caller = Annotated[Call, Depends(_call)]
MemoryId = Annotated[Id, Path(description="a memory's id")]
# The query parameters of a route with ids in its path: its request model's other fields.
HistoryParams = query_params(HistoryRequest, "memory_id")
MemoryParams = query_params(MemoryRequest, "memory_id")
AppMemoriesParams = query_params(AppMemoriesRequest, "app_id")
AppMemoryParams = query_params(AppMemoriesRequest, "app_id", "memory_id", "limit")
ArtifactParams = query_params(ArtifactRequest, "artifact_id")
ArtifactId = Annotated[str, Path(
    min_length=1, description=ArtifactRequest.model_fields["artifact_id"].description)]
AppId = Annotated[str, Path(min_length=1, description="the app's id")]

_ERROR = {"model": schemas.ErrorBody}
router = APIRouter(route_class=ApiRoute, responses={
    400: {**_ERROR, "description": "not JSON, or not the route's shape"},
    401: {**_ERROR, "description": "no or wrong bearer token"},
    403: {**_ERROR, "description": "outside the caller's bound scope"},
    404: {**_ERROR, "description": "not found (or another tenant's)"},
    413: {**_ERROR, "description": "the request body is over the size limit"},
    422: {**_ERROR, "description": "the request fails its model"},
    503: {**_ERROR, "description": "database busy: retry after Retry-After seconds"},
    507: {**_ERROR, "description": "disk full: nothing of the request was written"},
})
public = APIRouter()


@public.get("/healthz", response_model=schemas.Health, summary="Liveness")
@public.head("/healthz", include_in_schema=False)  # probes that ask for headers only
async def healthz() -> dict[str, Any]:
    return {"status": "ok", "version": __version__}


# -- the Agent Memory System PRD: events, bundles, artifacts, decisions, tasks ------------------
@router.post("/api/v1/events", response_model=EventReceipt | list[EventReceipt],
             summary="Record events (the Agent Memory System PRD's record_event): one or an array",
             responses={422: {"model": EventReceipt | list[EventReceipt] | schemas.ErrorBody,
                              "description": "a record was rejected: the receipts, each "
                                             "record's problems in `rejected`"}})
@operation("events", many=True)
def record_events(
        # Each record is validated by itself, as `memcli ingest` does: one rejected record
        # does not refuse the others (SkipValidation keeps the model's schema for the document).
        events: Annotated[SkipValidation[EventIn | list[EventIn]], Body()],
        call: Caller) -> Answer:
    return call.run(api.record_events)


@router.post("/api/v1/acb/build", response_model=schemas.Bundle,
             summary="Build an active context bundle (as `memcli acb build --json`)")
@operation("acb request")
def build_acb(body: AcbRequest, call: Caller) -> Answer:
    return call.run(api.build_acb, body)


@router.get("/api/v1/artifacts/{artifact_id}", response_model=schemas.Artifact,
            summary="The full output of a truncated tool result")
@operation("artifact request")
def get_artifact(artifact_id: ArtifactId, params: Annotated[ArtifactParams, Query()],
                 call: Caller) -> Answer:
    return call.run(api.get_artifact, whole(ArtifactRequest, params, artifact_id=artifact_id))


@router.post("/api/v1/decisions", response_model=schemas.Decision,
             summary="Record a decision (or supersede one)")
@operation("decision")
def record_decision(body: DecisionRequest, call: Caller) -> Answer:
    return call.run(api.record_decision, body)


@router.get("/api/v1/decisions/query", response_model=list[schemas.Decision],
            summary="List decisions, newest first")
@operation("decisions query")
def query_decisions(params: Annotated[DecisionsQuery, Query()], call: Caller) -> Answer:
    return call.run(api.query_decisions, params)


@router.post("/api/v1/tasks", response_model=schemas.Task,
             summary="Create a task, or update one (task_id)")
@operation("task")
def record_task(body: TaskRequest, call: Caller) -> Answer:
    return call.run(api.record_task, body)


# -- the memory system spec: query and history -------------------------------------------------
@router.post("/api/v1/query", response_model=list[Hit] | list[schemas.Bullet] | QueryResult,
             summary="memory.query of the memory system spec (as `memcli query - --json`)")
@operation("query request", hint=QUERY_HINT)
def query(body: QueryRequest, call: Caller) -> Answer:
    return call.run(api.query, body)


@router.get("/api/v1/memories/{memory_id:int}/history", response_model=list[schemas.HistoryEntry],
            summary="What happened to a memory, newest first")
@operation("history request")
def memory_history(memory_id: MemoryId, params: Annotated[HistoryParams, Query()],
                   call: Caller) -> Answer:
    return call.run(api.memory_history, whole(HistoryRequest, params, memory_id=memory_id))


# -- remember / forget -------------------------------------------------------------------------
@router.post("/api/v1/memories", response_model=schemas.Remembered,
             summary="Remember a fact or a procedure (as `memcli remember`)")
@operation("remember request")
def remember(body: RememberRequest, call: Caller) -> Answer:
    return call.run(api.remember, body)


@router.delete("/api/v1/memories/{memory_id:int}", response_model=schemas.Forgotten,
               summary="Forget a memory (soft delete, as `memcli forget`)")
@operation("forget request")
def forget(memory_id: MemoryId, params: Annotated[MemoryParams, Query()],
           call: Caller) -> Answer:
    return call.run(api.forget, whole(MemoryRequest, params, memory_id=memory_id))


# -- the app-memory design: an app's memories --------------------------------------------------
@router.get("/apps/{app_id}/memories", response_model=schemas.AppMemories,
            summary="List an app's memories, newest first (the app-memory design)")
@operation("app memories request")
def app_memories(app_id: AppId, params: Annotated[AppMemoriesParams, Query()],
                 call: Caller) -> Answer:
    return call.run(api.app_memories, whole(AppMemoriesRequest, params, app_id=app_id))


@router.delete("/apps/{app_id}/memories", response_model=schemas.Purged,
               summary="Purge every memory of an app, or one (the app-memory design)")
@operation("app memories request")
def purge_app_memories(app_id: AppId, params: Annotated[AppMemoriesParams, Query()],
                       call: Caller) -> Answer:
    return call.run(api.delete_app_memories, whole(AppMemoriesRequest, params, app_id=app_id))


@router.delete("/apps/{app_id}/memories/{memory_id:int}", response_model=schemas.Purged,
               summary="Purge one memory of an app (the app-memory design)")
@operation("app memories request")
def purge_app_memory(app_id: AppId, memory_id: MemoryId,
                     params: Annotated[AppMemoryParams, Query()], call: Caller) -> Answer:
    return call.run(api.delete_app_memories,
                    whole(AppMemoriesRequest, params, app_id=app_id, memory_id=memory_id))
