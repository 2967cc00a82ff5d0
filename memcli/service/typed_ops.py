"""Operations that take their request model, validated once where the request comes in.

An HTTP route's body is validated by FastAPI against the operation's model, an MCP tool's
arguments are built into the model by the tool (memcli.service.mcp_server), any other caller's
JSON by `Service.run`: the operation receives the model and never validates it again. `takes`
marks an operation with its model; `request_for` is the one place a JSON value becomes that
model (one readable line when it does not fit).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, RootModel

from memcli.core.inputs import check_value
from memcli.operations import requests


def takes(model: type[BaseModel], what: str, hint: str | None = None
          ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark `op(ctx, binding, request)` as taking a validated `model` (`what` names the
    request in errors, as the CLI says it). Anything else reaching it is a bug of the
    caller's: the request would otherwise go unvalidated, or be validated twice."""
    def mark(op: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(op)
        def checked(ctx: Any, binding: Any, request: Any) -> Any:
            if not isinstance(request, model):
                raise TypeError(f"{op.__name__} takes a {model.__name__}, not "
                                f"{type(request).__name__}: build it with request_for")
            # Text a JSON string escape can carry but no store can hold (a lone surrogate, a
            # NUL): a check of the values, not a second validation. A batch of records is
            # checked record by record by ingest (a bad one is rejected, not the batch).
            if not isinstance(request, RootModel):
                check_value(request.model_dump(), f"the {what}")
            return op(ctx, binding, request)

        checked.request_model = (model, what, hint)  # type: ignore[attr-defined]
        return checked

    return mark


def request_for(op: Callable[..., Any], data: Any) -> Any:
    """What `op` takes for the JSON value `data`: its validated model (or a one-line
    UsageError naming the first problem). A model already built (by FastAPI, by a tool) is
    handed on as it is, not validated again. A web page's operation is not marked: it takes
    its form's parameters, which its page model reads (memcli.viewer.pages)."""
    spec = getattr(op, "request_model", None)
    if spec is None:
        return data
    model, what, hint = spec
    return data if isinstance(data, model) else requests.validated(model, data, what, hint)
