"""Where a daemon listens, shared by `memcli serve` and the CLI client (standard library only).

Two kinds of daemon, their files in the user's runtime dir (`$XDG_RUNTIME_DIR/memcli/`, else
`/tmp/memcli-$UID/`, a 0700 folder the user must own):

- per user (`memcli serve --all-databases`, what the CLI starts by itself): `u-<key>` files,
  the key a hash of what decides what the daemon loads (`user_key`: memcli's version and
  folder, the interpreter, the config file's path and bytes, memcli's model and key settings
  in the environment), so a configuration that changes models or keys gets its own daemon,
  as Mercurial's chg keeps one server per configuration;
- per database (`memcli serve [--db X]`, started by hand): named by a hash of the database's
  real path, so every client that targets the same file finds the same socket. A unix socket's
path has a limit (`sun_path`: 108 bytes on Linux, 104 on macOS and the BSDs); when the runtime
folder is too long for it, the files go to `/tmp/memcli-$UID-<hash of that folder>/` instead,
under the same trust rule (as GnuPG moves its sockets to a hashed folder). Every process that
computes the folder from the same environment finds the same short one.

    <key>.sock       the CLI socket (requests carry argv, the environment a command reads, cwd
                     and the caller's fds)
    <key>.http.sock  the HTTP API (and MCP) on a unix socket
    <key>.lock       held (flock) by the running daemon: a second `serve` refuses
    <key>.pid        the running daemon's pid, for the messages and `kill`
    <key>.log        the output of a daemon the CLI started itself (autostart.py, beside this file)

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

from memcli.core.version import __version__

try:  # the builtin module: hashlib loads OpenSSL (~7 ms of the client's start)
    from _sha256 import sha256
except ImportError:  # pragma: no cover - an interpreter without it
    from hashlib import sha256

APP = "memcli"
# The shapes of memcli.store.opener's _URL, _DSN and _DSN_KEY (tests/store/test_seam.py checks
# they agree), compiled only for a location with a ':' or '=' (`re` costs the client's start).
_URL = r"^(?:[A-Za-z][A-Za-z0-9+.-]+:/|file:)"
_DSN = r"^\s*(?:[A-Za-z_]+\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']+)\s*)+$"
_DSN_KEY = (r"(?:^|\s)(?:host|hostaddr|port|dbname|user|password|passfile|service|"
            r"sslmode|connect_timeout|application_name)\s*=")


class RuntimeDirError(Exception):
    """The runtime folder cannot be used safely (someone else owns it, or others can enter)."""


class UntrustedSocket(OSError):
    """A daemon socket this user must not talk to (nothing was sent to it); `fix` says what
    the user can do about it."""

    def __init__(self, folder: str, why: str) -> None:
        super().__init__(f"not using the daemon socket in {folder} ({why})")
        self.folder = folder
        self.fix = remedy(folder)


class Endpoint:
    """The files of one daemon (paths as strings: no pathlib on the client's route)."""

    __slots__ = ("socket", "http_socket", "lock", "pid", "log")

    def __init__(self, socket: str, http_socket: str, lock: str, pid: str, log: str = "") -> None:
        self.socket = socket
        self.http_socket = http_socket
        self.lock = lock
        self.pid = pid
        self.log = log or pid[: -len(".pid")] + ".log"


# The size of `sun_path`, the NUL included (Linux 108; macOS and the BSDs 104).
SUN_PATH = 108 if sys.platform.startswith("linux") else 104
# The longest name a daemon file takes in its folder: `u-<16 hex>.http.sock`.
LONGEST_NAME = len("u-") + 16 + len(".http.sock")


def fits(path: str) -> bool:
    """Whether a unix socket can be bound at `path` (its bytes and a NUL fit in sun_path)."""
    return len(os.fsencode(path)) < SUN_PATH


def runtime_dir(env: Mapping[str, str] | None = None) -> str:
    """The folder of the daemons' files: `$XDG_RUNTIME_DIR/memcli`, else `/tmp/memcli-$UID`;
    a short one in /tmp named by a hash of it when a socket there would pass sun_path."""
    base = (os.environ if env is None else env).get("XDG_RUNTIME_DIR")
    folder = os.path.join(base, APP) if base else os.path.join("/tmp", f"{APP}-{os.getuid()}")
    if fits(os.path.join(folder, "x" * LONGEST_NAME)):
        return folder
    digest = sha256(os.fsencode(os.path.abspath(folder))).hexdigest()[:12]
    return os.path.join("/tmp", f"{APP}-{os.getuid()}-{digest}")


def remedy(folder: str) -> str:
    """What the user can do about a runtime folder the trust rule refuses."""
    try:
        info = os.lstat(folder)
    except OSError:
        return "set XDG_RUNTIME_DIR to a folder only you can enter"
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return (f"have {folder} removed (it is not yours), or set XDG_RUNTIME_DIR to a "
                "folder only you can enter")
    if info.st_mode & 0o077:
        return f"run `chmod 700 {folder}`"
    return "remove the sockets there that another user listens on"


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
    # The folder first: one another user made (or opened) is named even when no socket is
    # in it yet, or when it cannot be entered (0700, someone else's: no daemon can start).
    why = folder_problem(folder)  # no folder: no daemon, and nothing to warn about
    if why is None:
        os.lstat(path)  # no socket file: no daemon
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
        sys.stderr.write(f"memcli: warning: {exc}; running in-process ({exc.fix})\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed stderr: the command still runs
        pass


def _is_server_location(db: str) -> bool:
    """A URL (`postgresql://...`) or a libpq keyword string (`host=... dbname=...`): no file.
    The shapes of memcli.store.opener (which imports more than the client may)."""
    if ":" not in db and "=" not in db:
        return False
    import re  # noqa: PLC0415 - off the forwarded command's start-up (a path has no ":")

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


# memcli's settings in the environment that change what a daemon loads or holds (its models,
# their endpoints and keys, the content key): part of the per-user daemon's key, and given to
# the daemon the CLI starts (autostart.DAEMON_NAMES). Paths among them count as absolute paths.
SETTING_NAMES = (
    "MEMCLI_EMBEDDER", "MEMCLI_EMBED_BASE_URL", "MEMCLI_EMBED_MODEL", "MEMCLI_EMBED_DIMENSION",
    "MEMCLI_EMBED_API_KEY", "MEMCLI_LLM_BASE_URL", "MEMCLI_LLM_MODEL", "MEMCLI_LLM_API_KEY",
    "MEMCLI_LLM_TIMEOUT", "MEMCLI_LLM_DAILY_TOKEN_CAP", "MEMCLI_BUSY_TIMEOUT", "MEMCLI_KEY",
    "MEMCLI_CATEGORIES", "MEMCLI_CONTEXT_DIR", "MEMCLI_KEY_FILE",
    "OPENAI_API_KEY", "OPENAI_BASE_URL",
)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTING_PATHS = ("MEMCLI_CATEGORIES", "MEMCLI_CONTEXT_DIR", "MEMCLI_KEY_FILE")


def settings_in(env: Mapping[str, str]) -> dict[str, str]:
    """The SETTING_NAMES set in `env`, paths made absolute (a daemon works from `/`)."""
    found = {name: env[name] for name in SETTING_NAMES if env.get(name)}
    for name in SETTING_PATHS:
        if name in found:
            found[name] = os.path.abspath(found[name])
    return found


def user_key(env: Mapping[str, str] | None = None) -> str:
    """The per-user daemon's key: 16 hex of sha256 over memcli's version and package folder,
    the interpreter, the config file's absolute path and bytes, and the sorted memcli
    settings of the environment (`settings_in`). Two commands whose models, keys or memcli
    differ meet different daemons; the database never counts (one daemon serves them all)."""
    env = os.environ if env is None else env
    path = os.path.abspath(config_file(env))
    digest = sha256()
    for part in (__version__, _PACKAGE, sys.executable, path):
        digest.update(os.fsencode(part) + b"\0")
    digest.update(_config_bytes(path) + b"\0")
    for name, value in sorted(settings_in(env).items()):
        digest.update(os.fsencode(name) + b"=" + os.fsencode(value) + b"\0")
    return digest.hexdigest()[:16]


def user_endpoint(env: Mapping[str, str] | None = None) -> Endpoint:
    """The per-user daemon's files in the runtime folder (`u-<user_key>.sock`, ...)."""
    return endpoint_for_socket(os.path.join(runtime_dir(env), f"u-{user_key(env)}.sock"))


def location(db: str, cwd: str | None = None) -> str:
    """A database as the daemon's processes name it to each other (`D<location>` lines,
    `X-Memcli-Db`): a server location as given, a file by its real path (relative to `cwd`)."""
    if _is_server_location(db):
        return db
    return os.path.realpath(os.path.join(cwd or os.getcwd(), db))


def default_db(env: Mapping[str, str] | None = None) -> str:
    """`config.default_db_path()`, without importing config (pydantic)."""
    env = os.environ if env is None else env
    data = env.get("XDG_DATA_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, APP, "memory.db")


def config_file(env: Mapping[str, str]) -> str:
    """`config.config_file_path()`, without importing config."""
    return env.get("MEMCLI_CONFIG") or os.path.join(
        env.get("XDG_CONFIG_HOME") or os.path.join(
            env.get("HOME") or os.path.expanduser("~"), ".config"), APP, "config.yaml")


CONFIG_KEYS = ("daemon", "daemon_idle_exit", "db")
_YAML_NULL = ("", "~", "null", "Null", "NULL")
_READ: dict[str, tuple[tuple[int, int, int], bytes]] = {}  # path: (its stat, its bytes)


def _config_bytes(path: str) -> bytes:
    """The config file's first 64 KiB (b"" when there is none), read once per process while
    it is unchanged (same inode, size and mtime): the client reads its keys (`config_values`)
    and hashes it (`user_key`) from one read."""
    try:
        info = os.stat(path)
    except OSError:
        return b""
    seen = (info.st_ino, info.st_size, info.st_mtime_ns)
    kept = _READ.get(path)
    if kept is not None and kept[0] == seen:
        return kept[1]
    try:
        with open(path, "rb") as f:
            text = f.read(1 << 16)
    except OSError:
        return b""
    _READ[path] = (seen, text)
    return text


def config_values(env: Mapping[str, str]) -> dict[str, str | None]:
    """The top-level `daemon:`, `daemon_idle_exit:` and `db:` of the config file, read as
    text (yaml would cost the client ~15 ms); {} when there is no file. A value this reading
    cannot be sure of (a YAML feature beyond a plain or simply quoted scalar) is None: the
    caller then knows it does not know. memcli.config reads the same keys with yaml (the
    tests check they agree)."""
    data = _config_bytes(os.path.abspath(config_file(env)))
    if not data:
        return {}
    text = data.decode("utf-8", errors="replace")
    found: dict[str, str | None] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        key, sep, value = line.partition(":")
        if sep and key in CONFIG_KEYS:
            found[key] = _scalar(value.strip())
            after = lines[i + 1] if i + 1 < len(lines) else ""
            if after[:1] in (" ", "\t") and after.strip()[:1] not in ("", "#"):
                found[key] = None  # the value goes on, indented: a block or a folded line
    return found


def _scalar(value: str) -> str | None:
    """A YAML scalar of one line as text ("" for null), or None when unsure."""
    if value[:1] in ("'", '"'):
        quote = value[0]
        end = value.find(quote, 1)
        rest = value[end + 1:].strip() if end > 0 else "?"
        inner = value[1:end]
        if rest[:1] not in ("", "#") or "\\" in inner or quote * 2 in value[1:]:
            return None
        return inner
    value = value.split(" #", 1)[0].split("\t#", 1)[0].strip()
    if value.startswith("#") or value in _YAML_NULL:
        return ""
    if value[:1] in "[]{}&*!|>%@`,":
        return None
    return value


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


def guess_db(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str | None:
    """The database a command line targets, cheaply, as `memcli.config.load_settings` finds
    it: `--db X` / `--db=X`, else `MEMCLI_DB`, else the config file's `db:`, else the default
    path. None when the config file's `db:` cannot be read without yaml (such a command runs
    in-process and starts no daemon: correct, only slower). The command's own `--db` wins over
    one given before the command name, as the app's options do."""
    before, argv = root_db(argv)
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--db" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--db="):
            return arg[len("--db="):]
    env = os.environ if env is None else env
    if before or env.get("MEMCLI_DB"):
        return before or env.get("MEMCLI_DB")
    configured = config_values(env).get("db", "")
    return default_db(env) if configured == "" else configured
