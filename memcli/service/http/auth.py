"""Who may call `memcli serve`'s HTTP API: bearer tokens, each optionally bound to a scope.

A token file (mode 0600; a group- or world-readable one is refused) holds one token a line,
optionally followed by its binding:

    # token                          binding (optional)
    3f9c...e1                                                   <- an operator: any tenant
    b7a2...44  tenant=acme agent=planner categories=tasks,notes  <- only acme, as planner

A bound token can never read or write outside its binding, whatever the request or its headers
say (memcli.service.api.Binding only narrows). Without --token-file, serve generates one token,
stores it 0600 in the config dir (`Auth.notice` says where: serve prints it on stderr) and
reuses it next time; a --token-file that does not exist is created the same way.

Binding anything but loopback requires a token; loopback without one takes the explicit
`--no-token`. A request arriving on the daemon's Unix socket (mode 0600: only its user can
connect, as to the CLI socket) needs no token; one that sends a token gets that token's
binding. The Host header must name the bound host or a loopback name, so a DNS-rebinding
page cannot reach the API through a name it controls. Tokens are compared in
constant time, against every token (the time does not say which one nearly matched).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from memcli.config import serve_token_path
from memcli.core import private
from memcli.errors import NotAllowedError, UsageError
from memcli.service.api import BadRequest, Binding

if TYPE_CHECKING:
    from starlette.requests import Request

    from memcli.config import Settings

SCOPE_HEADERS = {"x-memcli-tenant": "tenant", "x-memcli-agent": "agent",
                 "x-memcli-user": "user_id", "x-memcli-app": "app_id"}
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
MIN_TOKEN_CHARS = 16
BINDING_KEYS = {"tenant": "tenant", "agent": "agent", "user": "user_id", "app": "app_id",
                "categories": "categories"}


@dataclass(frozen=True)
class Token:
    secret: str = ""
    tenant: str | None = None
    agent: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    categories: tuple[str, ...] | None = None

    def scope(self) -> Binding:
        """The scope this token binds its caller to."""
        return Binding(tenant=self.tenant, agent=self.agent, user_id=self.user_id,
                     app_id=self.app_id, categories=self.categories)


@dataclass(frozen=True)
class Auth:
    """The HTTP API's access rules, decided once at start-up."""

    tokens: tuple[Token, ...]  # empty: no token asked (loopback with --no-token only)
    allowed_hosts: tuple[str, ...]  # Host header names accepted (DNS-rebinding protection)
    token_file: Path | None = None
    notice: str | None = None  # for serve to print on stderr (where a generated token lives)

    @property
    def required(self) -> bool:
        return bool(self.tokens)

    def check(self, authorization: str | None, *, unix_socket: bool = False) -> Token | None:
        """The token an `Authorization: Bearer ...` header carries, or None (refused). With no
        token required, or on the 0600 Unix socket without a token, the caller is the unbound
        operator."""
        if not self.tokens or (unix_socket and not authorization):
            return Token()
        if not authorization:
            return None
        kind, _, given = authorization.partition(" ")
        if kind.lower() != "bearer" or not given.strip():
            return None
        given_bytes = given.strip().encode("utf-8", "surrogateescape")
        found = None
        for token in self.tokens:  # every token compared: the time does not leak which
            if hmac.compare_digest(token.secret.encode("utf-8"), given_bytes):
                found = token
        return found


def caller_scope(request: Request, auth: Auth) -> Binding | None:
    """The caller's scope: its token's binding narrowed by the scope headers (None: no token,
    answered 401). A browser page of another site is refused even with a valid token (CSRF):
    NotAllowedError, 403; an empty scope header is bad input (400)."""
    origin = request.headers.get("origin")
    if origin is not None and _origin_host(origin) not in auth.allowed_hosts:
        raise NotAllowedError(f"requests from origin {origin} are refused")
    # uvicorn gives a Unix socket's server as (path, None), a TCP one as (host, port).
    server = request.scope.get("server")
    unix_socket = server is not None and server[1] is None
    token = auth.check(request.headers.get("authorization"), unix_socket=unix_socket)
    if token is None:
        return None
    bound = {name: request.headers[h] for h, name in SCOPE_HEADERS.items()
             if h in request.headers}
    for name, value in bound.items():
        if not value.strip():
            raise BadRequest(f"an empty {name} header", "leave the header out instead")
    return token.scope().narrowed(**bound)


def _origin_host(origin: str) -> str:
    try:
        return (urlsplit(origin).hostname or "").lower()
    except ValueError:
        return ""


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`; False for a wildcard or any other address."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str) -> tuple[str, ...]:
    """The Host header names the API answers to when bound to `host`: the loopback names
    always (a rebinding attack needs a name the attacker controls; the daemon's Unix socket
    clients say `localhost`), plus the host itself, or this machine's names on a wildcard."""
    name = host.strip("[]").lower()
    if is_loopback(name):
        return LOOPBACK_NAMES
    if name in ("0.0.0.0", "::", ""):
        names = {socket.gethostname().lower(), socket.getfqdn().lower()}
        return (*LOOPBACK_NAMES, *sorted(n for n in names if n))
    return (*LOOPBACK_NAMES, *((name, f"[{name}]") if ":" in name else (name,)))


def load_auth(*, host: str, port: int | None, token_file: Path | str | None, no_token: bool,
              settings: Settings) -> Auth:
    """Decide the access rules for serving HTTP on `host`:`port` (a UsageError, exit 2, for a
    combination that would leave the API open)."""
    del settings  # the generated token's place comes from memcli.config (per user)
    hosts = allowed_hosts(host)
    if no_token:
        if token_file is not None:
            raise UsageError("--no-token and --token-file exclude each other")
        if not is_loopback(host):
            raise UsageError(f"refusing to serve {host}:{port} without a token",
                             "--no-token is for loopback only; give --token-file")
        return Auth(tokens=(), allowed_hosts=hosts)
    # A --token-file that does not exist yet is created with one new token (as the default
    # one is), so `--token-file PATH` both sets up and reuses a token.
    given = Path(token_file) if token_file is not None else None
    path, created = _generated_token(given)
    notice = None
    if created or given is None:  # say where the token is when serve chose or made it
        notice = (f"{'generated a' if created else 'using the'} bearer token in {path} "
                  "(send it as `Authorization: Bearer <token>`)")
    return Auth(tokens=read_token_file(path), allowed_hosts=hosts, token_file=path,
                notice=notice)


def read_token_file(path: Path) -> tuple[Token, ...]:
    """The tokens of a 0600 token file, each with its binding."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read token file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"token file {path} is not UTF-8 text") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(f"token file {path} is readable by others (mode {mode & 0o777:o})",
                         f"chmod 600 {path}")
    tokens = [_parse_line(line, path, n) for n, line in enumerate(text.splitlines(), start=1)
              if line.strip() and not line.lstrip().startswith("#")]
    if not tokens:
        raise UsageError(f"token file {path} holds no token", "one token a line")
    return tuple(tokens)


def _parse_line(line: str, path: Path, number: int) -> Token:
    secret, *pairs = line.split()
    if len(secret) < MIN_TOKEN_CHARS:
        raise UsageError(f"{path}:{number}: a token needs at least {MIN_TOKEN_CHARS} characters",
                         "e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    binding: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in BINDING_KEYS or not value:
            raise UsageError(f"{path}:{number}: bad binding {pair!r}",
                             "use " + ", ".join(f"{k}=..." for k in BINDING_KEYS))
        binding[BINDING_KEYS[key]] = (tuple(v for v in value.split(",") if v)
                                      if key == "categories" else value)
    return Token(secret=secret, **binding)  # type: ignore[arg-type]


def _generated_token(path: Path | None = None) -> tuple[Path, bool]:
    """`path` (default: the config dir's serve token), created 0600 with one new token if it
    does not exist (never readable by others, not even for a moment: the file is created with
    its mode); whether it was created."""

    path = path or serve_token_path()
    if path.exists():
        return path, False
    private.make_dirs(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another serve made it first: use theirs
        return path, False
    except OSError as exc:
        raise UsageError(f"cannot create token file {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(secrets.token_urlsafe(32) + "\n")
    return path, True
