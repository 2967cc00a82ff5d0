"""The edge of `memcli serve`'s HTTP API: what every API route does before and after its
operation, as a FastAPI route class (memcli.service.http.routes declares the routes with it).

Before: the caller is checked (Origin, bearer token, scope headers: memcli.service.http.auth)
before a byte of the body is read, so a caller without a token learns nothing from its body;
then the body must be JSON (which also keeps a browser's cross-site form post out: it needs a
preflight then) of the route's shape, and FastAPI validates it against the route's request
model. Every refusal is the CLI's one-line error, `{"error": ..., "exit_code": N}`, with the
status of its kind (memcli.service.api.status_for): 400 for what is not JSON, 422 for JSON
that fails its model (the route's label names the request, as the CLI's message does).

After: the operation's answer, the dict the CLI prints, is checked against the route's
response model and sent unchanged (its keys in the CLI's order), so /openapi.json describes
what a client gets.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, create_model
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memcli.errors import MemcliError, UsageError
from memcli.service import api
from memcli.service.http.auth import caller_scope

_UNREAD = object()


def operation(what: str, *, many: bool = False, hint: str | None = None
              ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Label a route's endpoint: `what` its request is called in errors ("bad <what>: ...",
    as the CLI says it), `many` when its body may be an array of its model, `hint` for its
    validation errors."""
    def label(endpoint: Callable[..., Any]) -> Callable[..., Any]:
        endpoint.what, endpoint.many, endpoint.hint = what, many, hint  # type: ignore[attr-defined]
        return endpoint

    return label


@dataclass(frozen=True)
class Call:
    """One checked call: the service, the caller's bound scope, the operation's request (the
    JSON body, or the query parameters, with the path's parameters) and the route's answer
    model."""

    service: api.Service
    scope: api.Binding
    request: Any
    answer: TypeAdapter[Any] | None

    def run(self, op: Callable[[api.Context, api.Binding, Any], Any], request: Any = None
            ) -> Answer:
        """The operation's answer, checked against the route's model (on the calling thread:
        FastAPI runs a plain `def` endpoint on its thread pool, so a slow bundle never blocks
        other requests). `request`: the model as FastAPI validated it (memcli.service.
        typed_ops); None: the JSON as sent, validated once by the operation's model (a batch
        of events, each record by ingest's rules). An answer its model refuses is a bug of
        memcli's: 500."""
        payload = self.service.run(op, self.scope, self.request if request is None else request)
        if self.answer is not None:
            self.answer.validate_python(payload)
        return Answer(payload)


class Answer(JSONResponse):
    """An operation's answer as sent. A batch of events with rejected records is answered 422
    with the whole report (what was stored and what was not), as the CLI exits 2 after
    printing it."""

    def __init__(self, payload: Any) -> None:
        super().__init__(payload, status_code=422 if api.rejected(payload) else 200)


class ApiRequest(Request):
    """A request whose JSON body is read by memcli's rules: an empty body is `{}`, and a body
    that is not JSON, not UTF-8 or nested too deeply is a one-line 400."""

    async def body(self) -> bytes:
        raw = await super().body()  # at most MAX_BODY_BYTES: BodyLimit refuses more unread
        return raw if raw.strip() else b"{}"

    async def json(self) -> Any:
        parsed = getattr(self, "_memcli_json", _UNREAD)
        if parsed is _UNREAD:
            parsed = self._memcli_json = parse_json(await self.body())
        return parsed


class ApiRoute(APIRoute):
    """An API route: the caller and the body checked first, the answer checked last."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        answer = TypeAdapter(self.response_model) if self.response_model is not None else None
        what = getattr(self.endpoint, "what", "request")
        hint = getattr(self.endpoint, "hint", None)

        async def route(request: Request) -> Response:
            request = ApiRequest(request.scope, request.receive)
            try:
                scope = caller_scope(request, request.app.state.auth)
                if scope is None:
                    return unauthorized()
                data = await self._input(request)
                request.state.memcli_call = Call(request.app.state.service, scope, data, answer)
                return await handler(request)
            except RequestValidationError as exc:
                return error_response(invalid(what, exc.errors(), hint))
            except RecursionError:
                return error_response(api.BadRequest("the request is nested too deeply"))
            except MemcliError as exc:
                return error_response(exc)
            except HTTPException:
                raise  # the app's handler answers it
            except Exception as exc:  # a bug: one line and 500 to the client, the trace to the log
                logging.getLogger(__name__).exception("%s failed", self.path)
                return error_response(exc)

        return route

    async def _input(self, request: ApiRequest) -> Any:
        """The operation's request: the JSON body (POST), or the query parameters (GET,
        DELETE), with the path's parameters; a path parameter may not be contradicted."""
        path = dict(request.path_params)
        if "POST" not in (self.methods or ()):
            data: dict[str, Any] = dict(request.query_params)
            if len(request.query_params.multi_items()) != len(data):
                raise api.BadRequest("a query parameter is given twice")
            return {**data, **path}
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            raise api.BadRequest("the request body must be JSON (Content-Type: application/json)")
        data = await request.json()
        many = getattr(self.endpoint, "many", False)
        if many and isinstance(data, list):
            return data
        if not isinstance(data, dict):
            raise api.BadRequest("the request body must be one JSON object"
                                 + (" or an array of them" if many else ""))
        return {**data, **path}


def parse_json(body: bytes) -> Any:
    """A request body's JSON value, or a one-line BadRequest (400) saying why there is none."""
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise api.BadRequest("the request body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise api.BadRequest(f"the request body is not JSON: {exc.msg} at line {exc.lineno}"
                             ) from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise api.BadRequest(f"the request body is not usable JSON: {exc}".splitlines()[0]
                             ) from None
    except RecursionError:
        raise api.BadRequest("the request is nested too deeply") from None


def invalid(what: str, errors: Any, hint: str | None = None) -> UsageError:
    """FastAPI's validation errors as the CLI's one line (their places past "body", "query"
    or "path", as the operation itself would name them)."""
    return api.invalid(what, [{**e, "loc": tuple(e["loc"])[1:]} for e in errors], hint)


def error_response(exc: BaseException) -> Response:
    status, headers = api.status_for(exc)
    return JSONResponse(api.error_payload(exc), status_code=status, headers=headers)


def unauthorized() -> Response:
    return JSONResponse({"error": "a bearer token is required (Authorization: Bearer <token>)",
                         "exit_code": 2}, status_code=401, headers={"WWW-Authenticate": "Bearer"})


def built(*models: type[BaseModel]) -> None:
    """`models`, and the models query_params makes of them afterwards, no longer defer their
    build: the adapter FastAPI makes of each for a route is built when the route is declared,
    inside FastAPI's own guard, not on the route's first request (memcli.service.http.routes)."""
    for model in models:
        model.model_config["defer_build"] = False


def whole(model: type[BaseModel], params: BaseModel, **path: Any) -> Any:
    """The request of a route with ids in its path, as `model`: the path's values and the
    query parameters, both validated by FastAPI (the parameters as `query_params(model)`, the
    same fields and rules), put together, not validated again."""
    values = {**dict(params), **path}
    return model.model_construct(_fields_set=params.model_fields_set | set(path), **values)


def query_params(model: type[BaseModel], *path: str) -> type[BaseModel]:
    """A request model's query parameters on a route whose path holds the `path` fields: the
    same fields (declared once, in the request model) but those. The operation validates the
    whole request, path and parameters, as `model`."""

    fields = {name: (info.annotation, info) for name, info in model.model_fields.items()
              if name not in path}
    return create_model(f"{model.__name__}Parameters", __config__=model.model_config,
                        **fields)  # type: ignore[call-overload]
