"""Rendering a page: one Jinja2 environment over the templates shipped in the package, and
`page()`, which renders a template with what every page shows (the caller's scope, the CSRF
token of its forms, the navigation)."""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.responses import HTMLResponse

from memcli import __version__
from memcli.viewer.access import COOKIE, CSRF_COOKIE, SESSION_SECONDS, Access

# The navigation, in order: (label, path under /ui).
NAV = (("Timeline", "/ui/"), ("Search", "/ui/search"), ("Bundle", "/ui/bundle"),
       ("Ledger", "/ui/ledger"), ("Dashboard", "/ui/dashboard"))


@cache
def environment() -> Environment:
    env = Environment(loader=PackageLoader("memcli.viewer", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.globals.update(nav=NAV, version=__version__)
    return env


def set_session_cookie(response: Any, sid: str) -> None:
    """The session cookie: never readable by the page's scripts, never sent by another site."""
    response.set_cookie(COOKIE, sid, max_age=int(SESSION_SECONDS), path="/ui", httponly=True,
                        samesite="strict")


def page(request: Any, access: Access, template: str, *, scope: Any = None,
         status: int = 200, **values: Any) -> HTMLResponse:
    """`template` rendered for the caller: `scope` (the caller's bound scope, shown in the
    header), `csrf` for its forms, `path` for the navigation, then `values`. Nothing is
    stored for a browser that has not logged in: its forms' token rides on a cookie of its
    own (memcli.viewer.access)."""
    csrf, fresh = access.csrf(request)
    html = environment().get_template(template).render(
        scope=scope, csrf=csrf, path=request.url.path,
        logged_in=access.session(request) is not None, **values)
    response = HTMLResponse(html, status_code=status,
                            headers={"Cache-Control": "no-store",
                                     "Content-Security-Policy": CSP,
                                     "X-Content-Type-Options": "nosniff",
                                     "Referrer-Policy": "same-origin",
                                     "X-Frame-Options": "DENY"})
    if fresh is not None:
        response.set_cookie(CSRF_COOKIE, fresh, max_age=int(SESSION_SECONDS), path="/ui",
                            httponly=True, samesite="strict")
    return response


# Everything from this origin only: no script, style or image of another site can load, and
# no other site may frame the pages.
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
