"""Who calls a page, and whether a form post is theirs.

The pages follow the HTTP API's token rules (memcli.service.http.auth, handed in as `check`): on the
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

Nothing is kept for a browser before it logs in: a session exists only after a successful login,
so no number of anonymous requests can push the operator's session out. Failed logins (a wrong
token, a spent or made-up code) are limited per client address (`LOGIN_LIMIT`, a moving
window from `limits`); past it every login attempt from there is refused with 429 and
`Retry-After`, unchecked, until the window moves on. Sessions already logged in never notice.

Every form post must carry a CSRF token in a hidden field (403 without it), and a post whose
Origin is not this page's own origin is refused (403) whatever it carries. The token needs no
session (the login form has none): it is a signed double-submit token. The browser holds a
random value in a cookie of its own (`CSRF_COOKIE`, HttpOnly, SameSite=Strict); the form's
token is that value and the session it was shown in (a digest of its cookie, or none), signed
with this process's secret (itsdangerous). A post is accepted when the token's signature holds,
it is younger than `SESSION_SECONDS`, and its value and session are the ones the post's cookies
carry: another browser's token, a token of a session since ended, or a cookie planted without
the secret all fail.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from itsdangerous import BadData, URLSafeTimedSerializer
from limits import RateLimitItemPerMinute
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from memcli.errors import NotAllowedError

COOKIE = "memcli_ui"
CSRF_COOKIE = "memcli_csrf"
CODE_SECONDS = 120.0
SESSION_SECONDS = 12 * 3600.0
# Only successful logins make sessions; past this many the oldest is dropped (a browser logs
# in again), so holders of tokens, and only they, bound the memory sessions take.
MAX_SESSIONS = 1000
# Failed logins a client address may make in a moving minute before every attempt from it is
# refused for a while: a person mistyping a token never meets it, a guesser gets 10 a minute.
LOGIN_LIMIT = RateLimitItemPerMinute(10)


class TooManyLogins(NotAllowedError):
    """Past LOGIN_LIMIT failed logins: the page answers 429 with `Retry-After` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__("too many failed logins from this address",
                         f"wait {retry_after} s, then run `memcli ui` for a new link")
        self.retry_after = retry_after


@dataclass
class Session:
    binding: Any  # the token (memcli.service.http.auth.Token) it logged in with
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
    # Forms signed by one serving process are honoured by it alone (as its sessions are).
    _signer: URLSafeTimedSerializer = field(default_factory=lambda: URLSafeTimedSerializer(
        secrets.token_bytes(32), salt="memcli-ui-csrf"))
    _failures: MovingWindowRateLimiter = field(
        default_factory=lambda: MovingWindowRateLimiter(MemoryStorage()))

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

    def new_session(self, binding: Any) -> str:
        """A session for a successful login of `binding`; its id (the cookie's value)."""
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[sid] = Session(binding, expires=self.clock() + SESSION_SECONDS)
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return sid

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

    def use_code(self, request: Any, code: str) -> Any | None:
        """The binding of a live one-time code, which is spent; None for any other (a failed
        login). TooManyLogins past the limit."""
        self._may_try(request)
        with self._lock:
            found = self._codes.pop(code, None)
        if found is None or found[1] <= self.clock():
            self._failed(request)
            return None
        return found[0]

    def login_token(self, request: Any, token: str) -> Any | None:
        """The binding of a pasted token of the token file, or None (a failed login).
        TooManyLogins past the limit, before the token is looked at."""
        self._may_try(request)
        binding = self.check(f"Bearer {token.strip()}", unix_socket=False) \
            if token.strip() else None
        if binding is None:
            self._failed(request)
        return binding

    def _may_try(self, request: Any) -> None:
        who = _client(request)
        if not self._failures.test(LOGIN_LIMIT, who):
            reset = self._failures.get_window_stats(LOGIN_LIMIT, who).reset_time
            raise TooManyLogins(max(1, int(reset - time.time()) + 1))

    def _failed(self, request: Any) -> None:
        self._failures.hit(LOGIN_LIMIT, _client(request))

    # -- CSRF: a signed double-submit token --------------------------------------------------
    def csrf(self, request: Any) -> tuple[str, str | None]:
        """The CSRF token for the forms of a page shown to `request`, and the value of the
        CSRF cookie to set with it (None: the browser has one)."""
        nonce = request.cookies.get(CSRF_COOKIE)
        fresh = None
        if not _looks_like_nonce(nonce):
            nonce = fresh = secrets.token_urlsafe(32)
        return self._signer.dumps([nonce, _digest(request.cookies.get(COOKIE))]), fresh

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

    def check_csrf(self, request: Any, given: str | None) -> None:
        """NotAllowedError (403) unless the form post carries a token this process signed,
        younger than a session, for this browser's CSRF cookie and this very session."""
        self.check_origin(request)
        refused = NotAllowedError("this form is out of date or not from this page (CSRF check)",
                                  "reload the page and try again")
        nonce = request.cookies.get(CSRF_COOKIE)
        if not given or nonce is None or not _looks_like_nonce(nonce):
            raise refused
        try:
            signed = self._signer.loads(given, max_age=int(SESSION_SECONDS))
        except BadData:
            raise refused from None
        if not (isinstance(signed, list) and len(signed) == 2
                and all(isinstance(v, str) for v in signed)):
            raise refused
        if not (hmac.compare_digest(signed[0], nonce)
                and hmac.compare_digest(signed[1], _digest(request.cookies.get(COOKIE)))):
            raise refused


def _digest(sid: str | None) -> str:
    """What a form token says of the session it was shown in: never the session id itself
    (the page's HTML may be read where its HttpOnly cookie may not)."""
    return hashlib.sha256(sid.encode("utf-8", "surrogateescape")).hexdigest()[:32] if sid else ""


def _looks_like_nonce(value: str | None) -> bool:
    return value is not None and 0 < len(value) <= 64 and value.isascii()


def _client(request: Any) -> str:
    """Whom failed logins are counted against: the client's address (a Unix socket's
    callers are one)."""
    client = request.scope.get("client")
    return client[0] if client else "unix"


def _unix_socket(request: Any) -> bool:
    # uvicorn gives a Unix socket's server as (path, None), a TCP one as (host, port).
    server = request.scope.get("server")
    return server is not None and server[1] is None
