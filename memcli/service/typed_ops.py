"""Operations that take their request model, validated once where the request comes in.

An HTTP route's body is validated by FastAPI against the operation's model, an MCP tool's
arguments are built into the model by the tool (memcli.service.mcp_server), any other caller's
JSON object by `Service.run`: the operation receives the model and never validates it again.
`takes` marks such an operation with its model; `request_for` is the one place a JSON object
becomes that model (one readable line when it does not fit). An operation not marked takes
the JSON object as sent and validates it itself (switching one over is its `takes` line).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from memcli.core.inputs import check_value
from memcli.operations import requests
from memcli.operations.requests import model_named


def takes(model: str, what: str, hint: str | None = None
          ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark `op(ctx, scope, request)` as taking a validated `model` ("module:Name"; `what`
    names the request in errors, as the CLI says it). Anything else reaching it is a bug of
    the caller's: the request would otherwise go unvalidated, or be validated twice."""
    def mark(op: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(op)
        def checked(ctx: Any, scope: Any, request: Any) -> Any:
            kind = model_named(model)
            if not isinstance(request, kind):
                raise TypeError(f"{op.__name__} takes a {kind.__name__}, not "
                                f"{type(request).__name__}: build it with request_for")
            # Text a JSON string escape can carry but no store can hold (a lone surrogate, a
            # NUL): a check of the values, not a second validation.
            check_value(request.model_dump(), f"the {what}")
            return op(ctx, scope, request)

        checked.request_model = (model, what, hint)  # type: ignore[attr-defined]
        return checked

    return mark


def request_for(op: Callable[..., Any], data: Any) -> Any:
    """What `op` takes for the JSON object `data`: its validated model if it is marked by
    `takes` (or a one-line UsageError naming the first problem), else `data` unchanged. A
    model already built (by FastAPI, by a tool) is handed on as it is, not validated again."""
    spec = getattr(op, "request_model", None)
    if spec is None:
        return data

    model, what, hint = spec
    kind = requests.model_named(model)
    return data if isinstance(data, kind) else requests.validated(kind, data, what, hint)
