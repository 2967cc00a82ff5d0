"""Where a daemon listens, shared by `memcli serve` and the CLI client (standard library only).

One daemon per database: its files live in the user's runtime dir (`$XDG_RUNTIME_DIR/memcli/`,
else `/tmp/memcli-$UID/`, a 0700 folder the user must own), named by a hash of the database's
real path, so every client that targets the same file finds the same socket:

    <key>.sock       the CLI socket (requests carry argv, the environment a command reads, cwd
                     and the caller's fds)
    <key>.http.sock  the HTTP API (and MCP) on a unix socket
    <key>.lock       held (flock) by the running daemon: a second `serve` refuses
    <key>.pid        the running daemon's pid, for the messages and `kill`
    <key>.log        the output of a daemon the CLI started itself (memcli/service/autostart.py)

`--socket PATH` (and `MEMCLI_SOCKET` for the client) names the CLI socket instead; the other
files then sit beside it, named after it. The client runs before `memcli.config` may be
imported (pydantic), so this module reads the few environment variables it needs itself, with
the same default database rule as `config.default_db_path`: from the mapping it is given, else
`os.environ` as it is at the call (never a default bound at import).

Every connection to a daemon (the CLI client, `memcli mcp`'s bridge, and through the client the
agent hooks) goes through `connect`, which sends nothing to a socket another user could have
put there: its folder must be this user's and closed to others, and (Linux, `SO_PEERCRED`) the
process listening must run as this user. Anyone can compute a socket's name, and a second user
could otherwise plant a listener there and receive the caller's command line, environment and
terminal.
"""

from __future__ import annotations

import _socket
import os
import stat
import struct
import sys
from collections.abc import Mapping, Sequence

try:  # the builtin module: hashlib loads OpenSSL (~7 ms of the client's start)
    from _sha256 import sha256
except ImportError:  # pragma: no cover - an interpreter without it
    from hashlib import sha256

APP = "memcli"
# The shapes of memcli.store.location's _URL, _DSN and _DSN_KEY (tests/test_seam.py checks
# they agree), compiled only for a location with a ':' or '=' (`re` costs the client's start).
_URL = r"^(?:[A-Za-z][A-Za-z0-9+.-]+:/|file:)"
_DSN = r"^\s*(?:[A-Za-z_]+\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']+)\s*)+$"
_DSN_KEY = (r"(?:^|\s)(?:host|hostaddr|port|dbname|user|password|passfile|service|"
            r"sslmode|connect_timeout|application_name)\s*=")


class RuntimeDirError(Exception):
    """The runtime folder cannot be used safely (someone else owns it, or others can enter)."""


class UntrustedSocket(OSError):
    """A daemon socket this user must not talk to (nothing was sent to it)."""

    def __init__(self, folder: str, why: str) -> None:
        super().__init__(f"not using the daemon socket in {folder} ({why})")
        self.folder = folder


class Endpoint:
    """The files of one daemon (paths as strings: no pathlib on the client's route)."""

    __slots__ = ("socket", "http_socket", "lock", "pid", "log")

    def __init__(self, socket: str, http_socket: str, lock: str, pid: str, log: str = "") -> None:
        self.socket = socket
        self.http_socket = http_socket
        self.lock = lock
        self.pid = pid
        self.log = log or pid[: -len(".pid")] + ".log"


def runtime_dir(env: Mapping[str, str] | None = None) -> str:
    base = (os.environ if env is None else env).get("XDG_RUNTIME_DIR")
    if base:
        return os.path.join(base, APP)
    return os.path.join("/tmp", f"{APP}-{os.getuid()}")


def ensure_private_dir(folder: str) -> None:
    """Create `folder` 0700 if missing; refuse one owned by another user or open to others
    (a socket there could be replaced by someone else's)."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except OSError as exc:
        raise RuntimeDirError(f"cannot create {folder}: {exc.strerror}") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise RuntimeDirError(f"{folder} is not a folder")
    if info.st_uid != os.getuid():
        raise RuntimeDirError(f"{folder} belongs to another user (uid {info.st_uid})")
    if info.st_mode & 0o077:
        raise RuntimeDirError(f"{folder} is open to other users (mode {info.st_mode & 0o777:o})")


def folder_problem(folder: str) -> str | None:
    """Why a socket in `folder` cannot be trusted, or None: the folder itself (not a symlink)
    must belong to this user and give no permission to group or others (like
    `ensure_private_dir`, which `memcli serve` applies). OSError when it cannot be read."""
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    mode = info.st_mode & 0o7777
    if info.st_uid != os.getuid() or mode & 0o077:
        return f"owned by uid {info.st_uid}, mode {mode:04o}"
    return None


def peer_problem(sock: _socket.socket) -> str | None:
    """Why the process listening on the connected unix socket `sock` cannot be trusted (it
    runs as another user), or None; None too where the kernel does not say (no SO_PEERCRED:
    the folder check stands alone there)."""
    option = getattr(_socket, "SO_PEERCRED", None)
    if option is None:
        return None
    size = struct.calcsize("3i")
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(_socket.SOL_SOCKET, option, size))
    return None if uid == os.getuid() else f"its listener runs as uid {uid}"


def connect(sock: _socket.socket, path: str) -> None:
    """Connect the unix socket `sock` to the daemon socket `path`, sending nothing: OSError
    when nothing is there (no daemon), UntrustedSocket when its folder or its listener is not
    this user's own (checked before and right after connecting)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.lstat(path)  # no socket file: no daemon, and nothing to warn about
    why = folder_problem(folder)
    if why is None:
        sock.connect(path)
        why = peer_problem(sock)
    if why is not None:
        raise UntrustedSocket(folder, why)


_warned: set[str] = set()


def warn_untrusted(exc: UntrustedSocket) -> None:
    """The one warning line for a refused socket (once per folder and process: the MCP
    bridge and the in-process `memcli mcp` both look for the daemon)."""
    if exc.folder in _warned:
        return
    _warned.add(exc.folder)
    try:
        sys.stderr.write(f"memcli: warning: {exc}; running in-process\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed stderr: the command still runs
        pass


def _is_server_location(db: str) -> bool:
    """A URL (`postgresql://...`) or a libpq keyword string (`host=... dbname=...`): no file.
    The shapes of memcli.store.location (which imports more than the client may)."""
    if ":" not in db and "=" not in db:
        return False
    import re

    return bool(re.match(_URL, db, re.IGNORECASE) or (
        re.match(_DSN, db) and re.search(_DSN_KEY, db, re.IGNORECASE)))


def _one_scheme(url: str) -> str:
    """`postgresql://` for every spelling of the scheme libpq takes (`postgres://`, any case).
    Nothing else is rewritten: a missing host or port means what PGHOST/PGPORT say where the
    daemon runs (`h/db` and `h:5432/db` can be two servers), a host may be a case-sensitive
    socket folder, and a key shared by two databases would route one to the other's daemon."""
    scheme, sep, rest = url.partition("://")
    return f"postgresql://{rest}" if sep and scheme.lower() in ("postgres", "postgresql") else url


def db_key(db: str | os.PathLike[str], cwd: str | None = None) -> str:
    """A short stable name for a database: for a file, a hash of its real path (symlinks
    resolved, relative to `cwd`), so `./memory.db` and its absolute path meet at the same
    daemon; for a server location, a hash of the location as given, but for the URL scheme's
    spelling (`postgres://` and `postgresql://` reach one daemon)."""
    text = os.fspath(db)
    if _is_server_location(text):
        return sha256(_one_scheme(text).encode("utf-8")).hexdigest()[:16]
    path = os.path.join(cwd or os.getcwd(), text)
    return sha256(os.fsencode(os.path.realpath(path))).hexdigest()[:16]


def endpoint_for_socket(socket_path: str | os.PathLike[str]) -> Endpoint:
    sock = os.fspath(socket_path)
    base = sock[: -len(".sock")] if sock.endswith(".sock") else sock
    return Endpoint(sock, base + ".http.sock", base + ".lock", base + ".pid", base + ".log")


def endpoint(db: str | os.PathLike[str], env: Mapping[str, str] | None = None,
             cwd: str | None = None) -> Endpoint:
    """The daemon files of database `db` in the runtime folder."""
    return endpoint_for_socket(os.path.join(runtime_dir(env), f"{db_key(db, cwd)}.sock"))


def default_db(env: Mapping[str, str] | None = None) -> str:
    """`config.default_db_path()`, without importing config (pydantic)."""
    env = os.environ if env is None else env
    data = env.get("XDG_DATA_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, APP, "memory.db")


def root_db(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The `--db X` / `--db=X` given before the command name (`memcli --db x doctor`), and the
    command line after it."""
    rest, db = list(argv), None
    while rest:
        if rest[0] == "--db" and len(rest) > 1:
            db, rest = rest[1], rest[2:]
        elif rest[0].startswith("--db="):
            db, rest = rest[0][len("--db="):], rest[1:]
        else:
            break
    return db, rest


def guess_db(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The database a command line targets, cheaply: `--db X` / `--db=X`, else `MEMCLI_DB`,
    else the default path. A config file's `db:` is not read (that needs yaml): such a command
    misses the daemon and runs in-process, which is correct, only slower. The command's own
    `--db` wins over one given before the command name, as the app's options do."""
    before, argv = root_db(argv)
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--db" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--db="):
            return arg[len("--db="):]
    env = os.environ if env is None else env
    return before or env.get("MEMCLI_DB") or default_db(env)
