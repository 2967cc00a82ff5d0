"""The CLI's client of `memcli serve` (standard library only: it runs before anything heavy).

`memcli.cli.entry.main()` calls `main_hook(argv)` first. When a daemon answers for the database
the command targets (`paths.guess_db`): one started by hand for that database (its socket named
after it, `paths.endpoint`) first, else the user's daemon that serves every database
(`paths.user_endpoint`), the command line, the environment a command can read
(`forwarded_env`), the working folder and the caller's file descriptors 0, 1 and 2 (passed
with SCM_RIGHTS, as Mercurial's chg does) go over its unix socket; the daemon runs the same
Typer app on them, in a process forked for the command (memcli/service/daemon/worker.py), and sends
the exit code back. Output is byte-identical by construction: same code, same streams, same
settings. Only a socket `paths.connect` trusts (this user's folder and listener) gets any of
it; another is named in one warning line and the command runs in-process.

Never forwarded: `serve`, `mcp`, shell completion, `acb edit` on a terminal (its editor must
be in the terminal's foreground process group), `--no-daemon` (removed from the command line),
`MEMCLI_NO_DAEMON=1` and config `daemon: off`. No socket or a refused connection: a daemon is
started in the background (memcli/service/daemon/autostart.py says when not) and the command runs
in-process at once, as it does when a daemon closes before it starts the command. Ctrl-C is
passed on: the command's process gets SIGINT, as it would in-process.

Wire format (`encode_request` / `decode_request`): a 4-byte big-endian length, sent together
with the three fds, then NUL-separated fields (argv, environment, cwd, umask, the encoding and
error handler of stdin, stdout and stderr) as the raw bytes the OS gave this process. The
daemon answers b"R" when the command starts, then b"E<exit code>\\n". Only `_socket` (not
`socket`, whose enums cost ~10 ms) and no json: this module is on every command's path.
"""

from __future__ import annotations

import _socket
import os
import struct
import sys
from array import array
from collections.abc import Mapping

from memcli.service.daemon import autostart, paths

NO_DAEMON_FLAG = "--no-daemon"
NEVER_ROUTED = {"serve", "mcp", "ui"}  # `ui` asks the daemon itself, starting none
CONNECT_TIMEOUT = 1.0
MAGIC = b"memcli/1"
# The environment a command can read, and all of it that is sent: memcli's own variables, the
# XDG folders and HOME, locale and terminal (rich, Typer), the clients memcli drives (libpq
# and psycopg's PG*, the openai client's OPENAI_*, httpx's proxies and CA files), the editor,
# PATH, TMPDIR and the time zone. Nothing else (another tool's tokens) leaves the process.
FORWARDED_PREFIXES = ("MEMCLI_", "XDG_", "LC_", "PG", "OPENAI_", "TYPER_", "_TYPER_",
                      "JUPYTER_")
FORWARDED_NAMES = frozenset({
    "HOME", "USER", "LOGNAME", "PATH", "TMPDIR", "TZ", "LANG", "LANGUAGE",
    "TERM", "COLORTERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "CLICOLOR",
    "CLICOLOR_FORCE", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERMINAL_WIDTH", "PY_COLORS",
    "GITHUB_ACTIONS", "UNICODE_VERSION", "EDITOR", "VISUAL", "SSL_CERT_FILE", "SSL_CERT_DIR",
})


def _routable(argv: list[str]) -> bool:
    if autostart.mode(os.environ) == "off":
        return False
    if any(key.startswith("_MEMCLI") and key.endswith("_COMPLETE") for key in os.environ):
        return False
    words = [a for a in paths.root_db(argv)[1] if not a.startswith("-")]
    if words and words[0] in NEVER_ROUTED:
        # `serve status` asks the daemon itself (in-process it can only see the lock).
        return words[0] == "serve" and "status" in words[1:]
    # `acb edit` starts $EDITOR. The daemon's process for the command is the caller's in all
    # but one thing: it is not in the terminal's foreground process group (the caller is), and
    # an editor reading a terminal from outside it is stopped. On a terminal it runs here.
    editing = bool(words) and words[0] == "acb" and "edit" in words
    return not (editing and (os.isatty(0) or os.isatty(1)))


def strip_no_daemon(argv: list[str]) -> tuple[list[str], bool]:
    """argv without `--no-daemon` (before any `--`), and whether it was there."""
    end = argv.index("--") if "--" in argv else len(argv)
    if NO_DAEMON_FLAG not in argv[:end]:
        return argv, False
    return [a for i, a in enumerate(argv) if not (i < end and a == NO_DAEMON_FLAG)], True


def socket_paths(argv: list[str]) -> list[str]:
    """The CLI sockets that may answer for `argv`'s database, in order: `MEMCLI_SOCKET` alone
    when set, else the database's own daemon's (started by hand: it wins), then the user's
    daemon's. ValueError when the database is not known without the app's settings (the
    command runs in-process)."""
    if os.environ.get("MEMCLI_SOCKET"):
        return [os.environ["MEMCLI_SOCKET"]]
    db = paths.guess_db(argv, os.environ)
    if db is None:
        raise ValueError("the config file's db: needs yaml")
    return [paths.endpoint(db, os.environ).socket, paths.user_endpoint(os.environ).socket]


def forwarded_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of `env` (default: this process's) that a command can use."""
    env = os.environ if env is None else env
    return {key: value for key, value in env.items()
            if key in FORWARDED_NAMES or key.startswith(FORWARDED_PREFIXES)
            or key.lower().endswith("_proxy")}


def encode_request(argv: list[str]) -> bytes:
    umask = os.umask(0)
    os.umask(umask)
    env = forwarded_env()
    fields = [MAGIC, str(len(argv)).encode(), *map(os.fsencode, argv),
              str(len(env)).encode(),
              *(os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()),
              os.fsencode(os.getcwd()), str(umask).encode()]
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        fields.append((getattr(stream, "encoding", None) or "").encode())
        fields.append((getattr(stream, "errors", None) or "").encode())
    return b"\0".join(fields)


def decode_request(data: bytes) -> dict:
    """The daemon's view of a request: argv, env, cwd, umask, stdio [(encoding, errors)]."""
    fields = data.split(b"\0")
    if fields[0] != MAGIC:
        raise ValueError("not a memcli request")
    n = int(fields[1])
    argv = [os.fsdecode(f) for f in fields[2:2 + n]]
    i = 2 + n
    m = int(fields[i])
    env = dict(os.fsdecode(f).partition("=")[::2] for f in fields[i + 1:i + 1 + m])
    i += 1 + m
    cwd, umask = os.fsdecode(fields[i]), int(fields[i + 1])
    rest = [f.decode() or None for f in fields[i + 2:i + 8]]
    stdio = [(rest[j], rest[j + 1]) for j in (0, 2, 4)]
    return {"argv": argv, "env": env, "cwd": cwd, "umask": umask, "stdio": stdio}


def forward(argv: list[str]) -> int | None:
    """The exit code of `argv` run by a daemon, or None: run it in-process."""
    if not _routable(argv):
        return None
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        return _talk(sock, argv)
    finally:
        sock.close()


def _connect(sock: _socket.socket, argv: list[str]) -> _socket.socket | None:
    """`sock` connected to the first daemon that answers for `argv` (`socket_paths`), or
    None: the command runs in-process (and the user's daemon is started when none answered)."""
    try:
        candidates = socket_paths(argv)
    except (OSError, ValueError):  # the working folder deleted, say
        return None
    for path in candidates:
        try:
            sock.settimeout(CONNECT_TIMEOUT)
            paths.connect(sock, path)
            return sock
        except paths.UntrustedSocket as exc:
            paths.warn_untrusted(exc)
            return None
        except (FileNotFoundError, ConnectionRefusedError):  # none runs, or a stale socket
            if path == candidates[-1]:
                _start_daemon(argv, path)
                return None
            sock.close()  # a refused connect leaves the socket unusable: a fresh one
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        except (OSError, ValueError):  # a path too long, say
            return None
    return None


def _talk(sock: _socket.socket, argv: list[str]) -> int | None:
    connected = _connect(sock, argv)
    if connected is None:
        return None
    if connected is not sock:
        try:
            return _send(connected, argv)
        finally:
            connected.close()
    return _send(sock, argv)


def _send(sock: _socket.socket, argv: list[str]) -> int | None:
    """Send the request on the connected `sock`; the exit code, or None (in-process)."""
    try:
        request = encode_request(argv)
        fds = array("i", [0, 1, 2])
        sock.sendmsg([struct.pack("!I", len(request))],
                     [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds.tobytes())])
        sock.sendall(request)
        sock.settimeout(None)
        started = sock.recv(4096)
    except (OSError, ValueError):  # a closed fd 0-2, cwd deleted, the daemon went away...
        return None
    if not started.startswith(b"R"):
        return None  # the daemon closed before starting the command (it is shutting down)
    return _wait_exit(sock, started[1:])


def _start_daemon(argv: list[str], path: str) -> None:
    """Warm by default (memcli/service/daemon/autostart.py): the user's daemon on `path`; one
    that cannot be started (no process left to fork, say) changes nothing: the command runs
    in-process all the same."""
    try:
        autostart.maybe_start(argv, path)
    except (OSError, ValueError):
        pass


def _wait_exit(sock: _socket.socket, data: bytes) -> int:
    """Wait for the exit code; Ctrl-C is sent on to the daemon (which interrupts the command
    and reports what the in-process command would); a second Ctrl-C leaves at once."""
    interrupted = False
    while b"\n" not in data:
        try:
            chunk = sock.recv(4096)
        except KeyboardInterrupt:
            if interrupted:
                return 130
            interrupted = True
            try:
                sock.sendall(b"I")
            except OSError:
                return 130
            continue
        except OSError:
            chunk = b""
        if not chunk:
            sys.stderr.write("memcli: error: the memcli daemon stopped during the command "
                             "(check `memcli serve`; the command may have been cut short)\n")
            return 1
        data += chunk
    line = data.split(b"\n", 1)[0]
    return int(line[1:]) if line[:1] == b"E" and line[1:].isdigit() else 1


def main_hook(argv: list[str]) -> tuple[int | None, list[str]]:
    """(exit code from a daemon, or None to run in-process; argv for the in-process run)."""
    argv, forced = strip_no_daemon(argv)
    if forced:
        return None, argv
    return forward(argv), argv
