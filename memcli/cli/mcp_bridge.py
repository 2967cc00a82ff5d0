"""`memcli mcp` when a daemon runs: a stdio <-> HTTP bridge to the daemon's `/mcp`, stdlib only.

A coding agent starts one stdio MCP server per session. Importing the MCP SDK takes over a
second here, and ten sessions each opening the database would fight over its write lock. So
when `memcli serve` runs for the database, `memcli mcp` only moves bytes: each JSON-RPC line
read on stdin is POSTed to the daemon's `/mcp` (streamable HTTP, stateless, JSON responses)
over its unix socket, and the answer is written back as one line on stdout: the daemon started
for the database when one runs, else the user's daemon, which serves every database and is
told which one by the header `X-Memcli-Db` (the database's location: a file by its real path,
sent to either). The daemon does
the protocol (the SDK), the scope binding (the identity flags travel as `X-Memcli-*`
headers, which the daemon's MCP server binds) and the single writer.

Only a socket `paths.connect` trusts (this user's folder and listener) is spoken to; another is
named in one warning line and `memcli mcp` serves in-process. Messages are forwarded unchanged;
requests run side by side (one thread each, so a slow tool call never holds up a ping or a
cancellation), their answers written whole, one per line.
Nothing here imports pydantic, the SDK or memcli's library.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import threading
from collections.abc import Mapping
from typing import BinaryIO

from memcli.cli.output import said_old
from memcli.service.daemon import autostart, paths

MCP_PATH = "/mcp"


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a unix socket (the daemon's `<key>.http.sock`)."""

    def __init__(self, path: str, timeout: float | None = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        try:
            paths.connect(sock, self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def daemon_answers(path: str, timeout: float = 2.0) -> bool:
    """True when this user's daemon accepts connections on `path` (a stale socket file
    refuses; a socket another user could have planted is refused with a warning)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        paths.connect(sock, path)
        return True
    except paths.UntrustedSocket as exc:
        paths.warn_untrusted(exc)
        return False
    except OSError:
        return False
    finally:
        sock.close()


class Bridge:
    """Forward stdin's JSON-RPC lines to the daemon; answers to stdout."""

    def __init__(self, socket_path: str, headers: dict[str, str], out: BinaryIO) -> None:
        self.socket_path = socket_path
        self.headers = {"Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream", **headers}
        self.out = out
        self.write_lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def run(self, source: BinaryIO) -> int:
        for line in source:
            if not line.strip():
                continue
            first = _first_message(line)
            if first is not None and first.get("method") == "initialize":
                # The client waits for this answer before anything else: answer it in line,
                # so its protocol version is known to every later request.
                self.forward(line, first)
                continue
            thread = threading.Thread(target=self.forward, args=(line, first), daemon=True)
            thread.start()
            self.threads = [t for t in self.threads if t.is_alive()] + [thread]
        for thread in self.threads:
            thread.join()
        return 0

    def forward(self, line: bytes, message: dict | None) -> None:
        try:
            status, content_type, body = self.post(line.strip())
        except (OSError, http.client.HTTPException, ValueError) as exc:
            self.fail(message, f"the memcli daemon did not answer: {exc}")
            return
        if status == 202 or not body.strip():
            return  # a notification or a response accepted: nothing to answer
        if "text/event-stream" in content_type:
            for data in _sse_data(body):
                self.write(data)
            return
        if "json" in content_type:
            self.write(body)
            if message is not None and message.get("method") == "initialize":
                self.note_version(body)
            return
        text = body.decode("utf-8", "replace").strip().splitlines()
        self.fail(message, f"the memcli daemon answered HTTP {status}: "
                           f"{text[0] if text else 'no message'}")

    def post(self, body: bytes) -> tuple[int, str, bytes]:
        conn = UnixHTTPConnection(self.socket_path)
        try:
            conn.request("POST", MCP_PATH, body=body, headers=self.headers)
            response = conn.getresponse()
            return response.status, response.getheader("Content-Type") or "", response.read()
        finally:
            conn.close()

    def note_version(self, body: bytes) -> None:
        try:
            version = json.loads(body)["result"]["protocolVersion"]
        except (ValueError, KeyError, TypeError):
            return
        if isinstance(version, str):
            self.headers["MCP-Protocol-Version"] = version

    def fail(self, message: dict | None, text: str) -> None:
        """A JSON-RPC error for a request the daemon could not answer (a notification has
        no one to tell: a note on stderr)."""
        if message is None or "id" not in message:
            print(f"memcli: warning: {text}", file=sys.stderr, flush=True)
            return
        error = {"jsonrpc": "2.0", "id": message["id"],
                 "error": {"code": -32603, "message": text}}
        self.write(json.dumps(error).encode())

    def write(self, data: bytes) -> None:
        data = data.strip()
        if b"\n" in data:  # one message per line on stdio: re-serialise a pretty answer
            data = json.dumps(json.loads(data), separators=(",", ":")).encode()
        with self.write_lock:
            self.out.write(data + b"\n")
            self.out.flush()


def _first_message(line: bytes) -> dict | None:
    """The request in a line (the first of a batch), or None when it is not JSON."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if isinstance(message, list):
        message = message[0] if message else None
    return message if isinstance(message, dict) else None


def _sse_data(body: bytes) -> list[bytes]:
    """The `data:` payloads of a server-sent-events body, one per event."""
    events, current = [], []
    for raw in body.splitlines():
        if raw.startswith(b"data:"):
            current.append(raw[5:].strip())
        elif not raw.strip() and current:
            events.append(b"\n".join(current))
            current = []
    if current:
        events.append(b"\n".join(current))
    return events


def scope_headers(tenant: str | None, user: str | None, agent: str | None,
                  app: str | None) -> dict[str, str]:
    """The identity flags as the headers the daemon's MCP server binds."""
    pairs = (("X-Memcli-Tenant", tenant), ("X-Memcli-User", user), ("X-Memcli-Agent", agent),
             ("X-Memcli-App", app))
    return {name: value for name, value in pairs if value}


def forward(socket_path: str, headers: dict[str, str]) -> int:
    """Bridge this process's stdin/stdout to the daemon until stdin closes."""
    return Bridge(socket_path, headers, sys.stdout.buffer).run(sys.stdin.buffer)


# `memcli mcp`'s options, as (flag, header); the header carries it to the daemon.
_FLAGS = {"--tenant-id": "X-Memcli-Tenant", "--user-id": "X-Memcli-User",
          "--agent-id": "X-Memcli-Agent", "--app-id": "X-Memcli-App", "--tools": "X-Memcli-Tools",
          "--db": None}
# Their spellings before 0.1.0 (memcli.cli.mcp.OLD_IDENTITY): a client config written then
# still starts the bridge, which says once on stderr what to write instead.
_OLD_FLAGS = {"--tenant": "--tenant-id", "--user": "--user-id", "--agent": "--agent-id",
              "--app": "--app-id"}
_ENV = {"MEMCLI_TENANT": "X-Memcli-Tenant", "MEMCLI_USER": "X-Memcli-User",
        "MEMCLI_AGENT": "X-Memcli-Agent", "MEMCLI_APP": "X-Memcli-App"}


def parse_argv(argv: list[str], env: Mapping[str, str]) -> tuple[str | None, dict[str, str]] | None:
    """(database, headers) of a plain `memcli mcp [OPTIONS]` line, or None for anything else
    (a subcommand, --help, --no-daemon, an unknown option): Typer handles those."""
    if not argv or argv[0] != "mcp":
        return None
    headers = {header: env[var] for var, header in _ENV.items() if env.get(var)}
    db = None
    rest = _new_spellings(argv[1:])
    i = 0
    while i < len(rest):
        flag, value = rest[i], None
        if "=" in flag and flag.split("=", 1)[0] in _FLAGS:
            flag, value = flag.split("=", 1)
            i += 1
        elif flag in _FLAGS and i + 1 < len(rest):
            value = rest[i + 1]
            i += 2
        else:
            return None
        if flag == "--db":
            db = value
        else:
            headers[_FLAGS[flag]] = value  # type: ignore[index]
    return db, headers


def _new_spellings(args: list[str]) -> list[str]:
    """`args` with an old flag (`--user`, `--user=x`) in its new spelling, where a flag stands
    (every other word, as `parse_argv` reads them)."""
    out = list(args)
    i = 0
    while i < len(out):
        name, eq, value = out[i].partition("=")
        if name in _OLD_FLAGS:
            out[i] = _OLD_FLAGS[name] + eq + value
        i += 1 if eq else 2
    return out


def old_flags(argv: list[str]) -> list[str]:
    """The old spellings a `memcli mcp` line uses (as `parse_argv` reads it)."""
    args = argv[1:]
    return [old.partition("=")[0] for old, new in zip(args, _new_spellings(args), strict=True)
            if old != new]


DB_HEADER = "X-Memcli-Db"  # the database a request is for, in the user's daemon's HTTP


def daemon_http_socket(db: str | None, env: Mapping[str, str]) -> str | None:
    """The HTTP socket of the daemon that answers for `db` (None: the default database), if
    one answers there: the one started for that database, else the user's daemon
    (`MEMCLI_SOCKET` names the daemon's CLI socket instead, as for the CLI)."""
    if autostart.mode(env) == "off":  # MEMCLI_NO_DAEMON=1 or config `daemon: off`
        return None
    override = env.get("MEMCLI_SOCKET")
    try:
        if override:
            endpoints = [paths.endpoint_for_socket(override)]
        else:
            # The database as the CLI finds it: --db, MEMCLI_DB, the config file's `db:`.
            target = database(db, env)
            if target is None:
                return None
            endpoints = [paths.endpoint(target, env), paths.user_endpoint(env)]
    except OSError:
        return None
    for endpoint in endpoints:
        if daemon_answers(str(endpoint.http_socket)):
            return str(endpoint.http_socket)
    return None


def database(db: str | None, env: Mapping[str, str]) -> str | None:
    """The database `memcli mcp` serves, as the CLI finds it, named as the daemon's processes
    name it (`paths.location`: a file by its real path); None when it needs yaml to know."""
    target = paths.guess_db(["--db", db] if db else [], env)
    return None if target is None else paths.location(target)


def main_hook(argv: list[str], env: Mapping[str, str] | None = None) -> int | None:
    """`memcli mcp` before anything else is imported: bridge to the daemon when one answers
    and return the exit code; None to go on in-process (the Typer command)."""
    env = os.environ if env is None else env
    parsed = parse_argv(argv, env)
    if parsed is None:
        return None
    db, headers = parsed
    if not all(value.isascii() for value in headers.values()):
        return None  # HTTP headers carry ASCII: the in-process server binds such a scope
    target = database(db, env)
    if target is not None:
        if not target.isascii():
            return None  # an HTTP header carries ASCII: the in-process server serves it
        headers[DB_HEADER] = target
    socket_path = daemon_http_socket(db, env)
    if socket_path is None:
        return None
    # Said here only when forwarding: otherwise the Typer command says it.
    for old in old_flags(argv):
        said_old(old, _OLD_FLAGS[old])
    return forward(socket_path, headers)
