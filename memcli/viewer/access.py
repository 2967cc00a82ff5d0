"""Who calls a page, and whether a form post is theirs.

The pages follow the HTTP API's token rules (memcli.service.auth, handed in as `check`): on the
daemon's 0600 Unix socket, or on a loopback port served with `--no-token`, the caller is the
unbound operator; on `--port` a token is required. A browser cannot send an `Authorization`
header by itself, so a token gets in once, through a login:

- `memcli ui` asks the daemon, over its Unix socket, for a login link (`POST /ui/login-link`):
  a one-time code, valid for `CODE_SECONDS`, carrying the asking caller's binding;
- or the login page takes a token of the token file, pasted into its form.

Either way the browser gets a session cookie (random, HttpOnly, SameSite=Strict, Path=/ui) that
stands for that token's binding until `SESSION_SECONDS` pass, the user logs out, or the daemon
stops (sessions live in the serving process's memory only). A request that carries a bearer
token itself (a script) is that token's caller.

Every form post must carry the session's CSRF token in a hidden field (403 without it), and a
post whose Origin is not this page's own origin is refused (403) whatever it carries.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from memcli.errors import NotAllowedError

COOKIE = "memcli_ui"
CODE_SECONDS = 120.0
SESSION_SECONDS = 12 * 3600.0
MAX_SESSIONS = 1000  # the oldest is dropped past this: a browser logs in again


@dataclass
class Session:
    csrf: str
    binding: Any = None  # the token (memcli.service.auth.Token) it logged in with; None: none
    expires: float = 0.0


@dataclass
class Access:
    """The pages' access rules: `check(authorization, unix_socket)` is the API's token check
    (a binding with `.scope()`, or None when refused)."""

    check: Callable[..., Any]
    allowed_hosts: tuple[str, ...]
    token_required: bool
    clock: Callable[[], float] = time.monotonic
    _sessions: OrderedDict[str, Session] = field(default_factory=OrderedDict)
    _codes: dict[str, tuple[Any, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- sessions and one-time codes ---------------------------------------------------------
    def session(self, request: Any) -> tuple[str, Session] | None:
        """The request's live session (by its cookie), or None."""
        sid = request.cookies.get(COOKIE)
        if not sid:
            return None
        with self._lock:
            found = self._sessions.get(sid)
            if found is None or found.expires <= self.clock():
                self._sessions.pop(sid, None)
                return None
            return sid, found

    def new_session(self, binding: Any = None) -> tuple[str, Session]:
        sid = secrets.token_urlsafe(32)
        session = Session(csrf=secrets.token_urlsafe(32), binding=binding,
                          expires=self.clock() + SESSION_SECONDS)
        with self._lock:
            self._sessions[sid] = session
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return sid, session

    def end_session(self, sid: str) -> None:
        with self._lock:
            self._sessions.pop(sid, None)

    def new_code(self, binding: Any) -> str:
        """A one-time login code for `binding` (the caller asking for the link)."""
        code = secrets.token_urlsafe(32)
        now = self.clock()
        with self._lock:
            for old in [c for c, (_, until) in self._codes.items() if until <= now]:
                del self._codes[old]
            self._codes[code] = (binding, now + CODE_SECONDS)
        return code

    def use_code(self, code: str) -> Any | None:
        """The binding of a live one-time code, which is spent; None for any other."""
        with self._lock:
            found = self._codes.pop(code, None)
        if found is None or found[1] <= self.clock():
            return None
        return found[0]

    def login_token(self, token: str) -> Any | None:
        """The binding of a pasted token of the token file, or None."""
        if not token.strip():
            return None
        return self.check(f"Bearer {token.strip()}", unix_socket=False)

    # -- the caller --------------------------------------------------------------------------
    def caller(self, request: Any) -> Any | None:
        """The calling binding: a bearer header's token, else the session's login, else the
        operator where no token is asked (the Unix socket, `--no-token`); None: log in."""
        self.check_origin(request)
        header = request.headers.get("authorization")
        if header:
            return self.check(header, unix_socket=_unix_socket(request))
        found = self.session(request)
        if found is not None and found[1].binding is not None:
            return found[1].binding
        return self.check(None, unix_socket=_unix_socket(request))

    def check_origin(self, request: Any) -> None:
        """A browser page of another site is refused (403), as by the API; a form post must
        come from this very origin (scheme, host and port), when its browser says."""
        origin = request.headers.get("origin")
        if origin is None:
            return
        if request.method == "POST":
            own = f"{request.url.scheme}://{request.headers.get('host', '')}".lower()
            if origin.lower().rstrip("/") != own:
                raise NotAllowedError(f"a form post from origin {origin} is refused",
                                      "post from the page itself")
            return
        if (urlsplit(origin).hostname or "").lower() not in self.allowed_hosts:
            raise NotAllowedError(f"requests from origin {origin} are refused")

    def check_csrf(self, request: Any, given: str | None) -> Session:
        """The session a form post belongs to; NotAllowedError (403) unless it carries that
        session's CSRF token."""
        self.check_origin(request)
        found = self.session(request)
        if found is None or not given or not hmac.compare_digest(
                found[1].csrf.encode(), given.encode("utf-8", "surrogateescape")):
            raise NotAllowedError("this form is out of date or not from this page (CSRF check)",
                                  "reload the page and try again")
        return found[1]


def _unix_socket(request: Any) -> bool:
    # uvicorn gives a Unix socket's server as (path, None), a TCP one as (host, port).
    server = request.scope.get("server")
    return server is not None and server[1] is None
