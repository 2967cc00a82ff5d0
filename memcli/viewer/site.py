"""The site of the pages under /ui: each GET renders one page from one operation, each POST
runs one action and redirects to the page that shows its result (Post/Redirect/Get).

`Pages` holds what the routes share, and the login routes; memcli.viewer.mount builds the
site for `memcli serve`'s app. A page's data comes
from a function `op(ctx, scope, params)` run by the service as an API operation is
(`Service.run`: the caller's bound scope, one Memory per thread), so the pages and the API
answer from the same rules. Other page modules add theirs with `Pages.get` / `Pages.post`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from memcli.errors import MemcliError, NotAllowedError, UsageError
from memcli.viewer.access import CODE_SECONDS, COOKIE, Access, TooManyLogins
from memcli.viewer.html import page, set_session_cookie

STATIC = Path(__file__).parent / "static"
PageOp = Callable[[Any, Any, dict[str, str]], dict[str, Any]]
Handler = Callable[[Request, Any], Awaitable[Response]]


class Pages:
    """What every page route shares: the service that runs operations, the access rules, the
    HTTP status of an error (the API's), and the daemon's TCP address for login links."""

    def __init__(self, service: Any, access: Access, *, status_for: Callable[..., Any],
                 tcp_url: str | None = None) -> None:
        self.service = service
        self.access = access
        self.status_for = status_for
        self.tcp_url = tcp_url
        self.routes: list[BaseRoute] = []

    # -- running a page or an action ---------------------------------------------------------
    async def run(self, op: PageOp, scope: Any, params: dict[str, str]) -> dict[str, Any]:
        """`op` run by the service for the caller, on a worker thread (a slow page never
        holds up the others)."""
        return await run_in_threadpool(self.service.run, op, scope, params)

    def render(self, request: Request, template: str, scope: Any = None, status: int = 200,
               **values: Any) -> Response:
        """`template` for the caller; the header names the tenant shown: the caller's bound
        one, else the page's `tenant_id`, else the configured one (as the operations pick)."""
        values.setdefault("tenant_id", request.query_params.get("tenant_id") or None)
        return page(request, self.access, template, scope=scope, status=status,
                    default_tenant=self.service.settings.tenant, **values)

    def failure(self, request: Request, exc: BaseException, scope: Any = None) -> Response:
        """An error as a page: its one line, and the status the API gives it (bad input is
        4xx, never 500)."""
        if isinstance(exc, MemcliError):
            status, _headers = self.status_for(exc)
            text = str(exc).splitlines()[0] if str(exc) else "error"
            what, _, hint = text.partition(" (")
            return self.render(request, "error.html", scope, status=status,
                               title="Error", message=what, hint=hint.rstrip(")") or None)
        logging.getLogger(__name__).exception("%s failed", request.url.path)
        line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return self.render(request, "error.html", scope, status=500, title="Error",
                           message=f"unexpected error: {line}")

    def get(self, path: str, handler: Handler, name: str | None = None) -> None:
        """A page: `handler(request, scope)` for a caller who may read; to the login page
        otherwise."""
        async def endpoint(request: Request) -> Response:
            scope = None
            try:
                binding = self.access.caller(request)
                if binding is None:
                    return RedirectResponse("/ui/login", status_code=303)
                scope = binding.scope()
                return await handler(request, scope)
            except Exception as exc:  # noqa: BLE001 - every failure is a page, never a trace
                return self.failure(request, exc, scope)

        self.routes.append(Route(path, endpoint, methods=["GET", "HEAD"], name=name))

    def post(self, path: str, handler: Callable[[Request, Any, dict[str, str]],
                                                Awaitable[Response]],
             name: str | None = None) -> None:
        """An action: the form's CSRF token and Origin checked first (403), then the caller
        (401 without one), then `handler(request, scope, form)`, which answers a redirect."""
        async def endpoint(request: Request) -> Response:
            scope = None
            try:
                form = await read_form(request)
                self.access.check_csrf(request, form.get("csrf"))
                binding = self.access.caller(request)
                if binding is None:
                    return self.render(request, "login.html", status=401, title="Log in",
                                       message="log in first")
                scope = binding.scope()
                return await handler(request, scope, form)
            except Exception as exc:  # noqa: BLE001 - every failure is a page, never a trace
                return self.failure(request, exc, scope)

        self.routes.append(Route(path, endpoint, methods=["POST"], name=name))

    # -- logging in --------------------------------------------------------------------------
    async def login_page(self, request: Request) -> Response:
        code = request.query_params.get("code")
        if code is None:
            return self.render(request, "login.html", title="Log in")
        try:
            binding = self.access.use_code(request, code)
        except TooManyLogins as exc:
            return self.too_many(request, exc)
        if binding is None:
            return self.render(request, "login.html", status=401, title="Log in",
                               message="this login link is used up or expired: run "
                                       "`memcli ui` for a new one")
        return self._logged_in(request, binding)

    async def login(self, request: Request) -> Response:
        try:
            form = await read_form(request)
            self.access.check_csrf(request, form.get("csrf"))
            binding = self.access.login_token(request, form.get("token", ""))
        except TooManyLogins as exc:
            return self.too_many(request, exc)
        except MemcliError as exc:
            return self.failure(request, exc)
        if binding is None:
            return self.render(request, "login.html", status=401, title="Log in",
                               message="that token is not in the daemon's token file")
        return self._logged_in(request, binding)

    def too_many(self, request: Request, exc: TooManyLogins) -> Response:
        """429 with Retry-After: failed logins past the limit (memcli.viewer.access)."""
        response = self.render(request, "login.html", status=429, title="Log in",
                               message=f"{exc.message}: {exc.hint}")
        response.headers["Retry-After"] = str(exc.retry_after)
        return response

    def _logged_in(self, request: Request, binding: Any) -> Response:
        """A new session for `binding` (the old one, if any, ends: no fixation)."""
        old = request.cookies.get(COOKIE)
        if old:
            self.access.end_session(old)
        sid = self.access.new_session(binding)
        response = RedirectResponse("/ui/", status_code=303)
        set_session_cookie(response, sid)
        return response

    async def logout(self, request: Request) -> Response:
        try:
            form = await read_form(request)
            self.access.check_csrf(request, form.get("csrf"))
        except MemcliError as exc:
            return self.failure(request, exc)
        sid = request.cookies.get(COOKIE)
        if sid:
            self.access.end_session(sid)
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(COOKIE, path="/ui")
        return response

    async def login_link(self, request: Request) -> Response:
        """`memcli ui`'s request: a one-time login link for the caller, who proves itself as
        to the API (the Unix socket, or a bearer token), never by a cookie. JSON."""
        try:
            self.access.check_origin(request)
        except NotAllowedError as exc:
            return JSONResponse({"error": str(exc), "exit_code": 2}, status_code=403)
        unix = request.scope.get("server") is not None and request.scope["server"][1] is None
        binding = self.access.check(request.headers.get("authorization"), unix_socket=unix)
        if binding is None:
            return JSONResponse({"error": "a bearer token is required (Authorization: Bearer "
                                          "<token>)", "exit_code": 2}, status_code=401)
        base = self.tcp_url if unix else str(request.base_url).rstrip("/")
        if not base:
            return JSONResponse({"error": "the daemon serves no TCP port, and a browser "
                                          "cannot open its Unix socket (restart it with "
                                          "`memcli serve --port 8765`)", "exit_code": 1},
                                status_code=409)
        if not self.access.token_required:  # nothing to log in with: the plain address
            return JSONResponse({"url": f"{base}/ui/", "expires_in": None})
        code = self.access.new_code(binding)
        return JSONResponse({"url": f"{base}/ui/login?code={code}",
                             "expires_in": int(CODE_SECONDS)})

    def build(self) -> list[BaseRoute]:
        own = [Route("/login", self.login_page, methods=["GET", "HEAD"]),
               Route("/login", self.login, methods=["POST"]),
               Route("/logout", self.logout, methods=["POST"]),
               Route("/login-link", self.login_link, methods=["POST"]),
               Mount("/static", app=StaticFiles(directory=STATIC), name="static")]
        # `/` leads to the pages, and browsers find the icon they ask every site for.
        return [Mount("/ui", routes=[*own, *self.routes]),
                Route("/", to_pages, methods=["GET", "HEAD"]),
                Route("/favicon.ico", favicon, methods=["GET", "HEAD"])]


async def to_pages(_request: Request) -> Response:
    return RedirectResponse("/ui/", status_code=307)


async def favicon(_request: Request) -> Response:
    return FileResponse(STATIC / "favicon.ico", media_type="image/x-icon",
                        headers={"Cache-Control": "public, max-age=86400"})


async def read_form(request: Request) -> dict[str, str]:
    """A form post's fields (application/x-www-form-urlencoded; the last of a repeated name).
    Any other body has no fields, so the CSRF check refuses it (403)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return {}
    body = await request.body()
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except (UnicodeDecodeError, ValueError):
        raise UsageError("the form is not UTF-8 text") from None


def see_other(path: str, **params: Any) -> Response:
    """The redirect after an action (303: the browser GETs the page that shows the result)."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return RedirectResponse(path + (f"?{query}" if query else ""), status_code=303)
