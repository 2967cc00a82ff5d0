"""What the bundle, ledger and dashboard pages need from the viewer: the caller, running an
operation, rendering a template, a checked form. (Stand-in until the viewer's own.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from memcli.errors import UsageError
from memcli.service import api
from memcli.service.auth import caller_scope

TEMPLATES = Path(__file__).with_name("templates")
_env = None


def prefix(request: Request) -> str:
    return "/ui"


def caller(request: Request) -> api.Scope:
    scope = caller_scope(request, request.app.state.auth)
    if scope is None:
        raise UsageError("no token")
    return scope


def run(request: Request, op: Any, scope: api.Scope, req: Any) -> Any:
    return request.app.state.service.run(op, scope, req)


async def run_async(request: Request, op: Any, scope: api.Scope, req: Any) -> Any:
    return await run_in_threadpool(run, request, op, scope, req)


def model(cls: Any, data: dict[str, Any], what: str) -> Any:
    return api.validate(cls, data, what)


async def checked_form(request: Request) -> dict[str, str]:
    form = await request.form()
    return {k: str(v) for k, v in form.items()}


def render(request: Request, name: str, context: dict[str, Any]) -> Response:
    global _env
    if _env is None:
        from jinja2 import Environment, FileSystemLoader, select_autoescape

        _env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape())
    html = _env.get_template(name).render(prefix=prefix(request), csrf_field="csrf",
                                          csrf_token="", **context)
    return HTMLResponse(html)
