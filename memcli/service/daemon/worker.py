"""One forwarded command in a process of its own: what a child of `memcli serve` does.

The daemon forks a process per command (Mercurial's chg model), before the command comes: a
spare (`wait_as_spare`) starts warm (imports, models and the Typer commands built in the main
process; the query models' first run in its own warm-up), takes the next connection, then
becomes the caller's process for real before the command runs, so nothing has to be faked:

- `os.environ` is cleared and filled with the caller's forwarded environment. It is the real
  one (putenv), so C code (libpq's PG* variables) and programs the command starts (an editor)
  see the caller's environment, not the daemon's.
- `chdir` to the caller's folder and its umask: relative paths resolve as in the caller's
  process, and messages print them as given.
- the caller's fds 0, 1, 2 (passed over the socket) are dup2'ed onto 0, 1, 2, and `sys.std*`
  are opened on them with the encodings the caller's own streams had.
- Ctrl-C on the client (b"I"), or the client going away, becomes a real SIGINT to this process:
  KeyboardInterrupt, as in-process, even in a blocking read. The daemon dying (kill -9) ends
  the command too (the life pipe closes), as it would a thread of the daemon.

Right after the request is received, the process names the command's database to the main
process (`report_database`: `D<location>\n` on the report pipe every fork inherits), found as
the client found it (`paths.guess_db` over the caller's command line, environment and folder),
so that the user's daemon knows which databases are open and when each was last used.

The exit code goes back to the client as b"E<code>\\n"; the process ends with `os._exit` (its
streams flushed), skipping a teardown the daemon's own objects must not run twice.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, NoReturn, TextIO

from memcli.service.daemon import paths
from memcli.service.daemon.client import decode_request

MAX_HEADER = 16 * 1024 * 1024  # a whole environment and argv; anything larger is not a client
Runner = Callable[[list[str]], None]


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise ConnectionError("the client closed the connection")
        data += chunk
    return data


def receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """The request (`client.decode_request`) and the client's fds 0, 1, 2."""
    prefix, fds, _flags, _addr = socket.recv_fds(conn, 4, 3)
    try:
        prefix += _recv_exact(conn, 4 - len(prefix))
        (size,) = struct.unpack("!I", prefix)
        if size > MAX_HEADER or len(fds) != 3:
            raise ConnectionError("not a memcli client")
        header = decode_request(_recv_exact(conn, size))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return header, fds


def report_database(header: dict[str, Any], reports: int) -> None:
    """Tell the main process which database this command works on (`D<location>\n` on
    `reports`; nothing when it is -1, or when the database is not known without the app's
    settings). One write of a line under PIPE_BUF: lines of two commands never interleave."""
    if reports < 0:
        return
    try:
        db = paths.guess_db([str(a) for a in header["argv"]], header["env"])
        if db is None:
            return
        line = b"D" + os.fsencode(paths.location(db, str(header["cwd"]))) + b"\n"
        if b"\n" not in line[:-1] and len(line) <= select.PIPE_BUF:
            os.write(reports, line)
    except (OSError, ValueError, KeyError):  # the main process gone, a folder deleted...
        pass


def _open_streams(stdio: list[tuple[str | None, str | None]]) -> tuple[TextIO, TextIO, TextIO]:
    """Text streams over fds 0, 1, 2, configured as the client's own sys.std* were."""
    def info(i: int, default_errors: str) -> tuple[str, str]:
        encoding, errors = stdio[i] if i < len(stdio) else (None, None)
        return encoding or "utf-8", errors or default_errors

    enc, err = info(0, "strict")
    stdin = open(0, encoding=enc, errors=err, newline="\n", closefd=False)
    enc, err = info(1, "strict")
    stdout = open(1, "w", 1 if os.isatty(1) else -1, encoding=enc, errors=err, newline="\n",
                  closefd=False)
    enc, err = info(2, "backslashreplace")
    stderr = open(2, "w", 1, encoding=enc, errors=err, newline="\n", closefd=False)
    return stdin, stdout, stderr


def become_caller(header: dict[str, Any], fds: list[int]) -> None:
    """Make this process the caller's: environment, folder, umask, stdio."""
    os.environ.clear()
    os.environ.update(header["env"])
    os.chdir(str(header["cwd"]))
    if header.get("umask") is not None:
        os.umask(int(header["umask"]))
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin, sys.stdout, sys.stderr = _open_streams(header.get("stdio") or [])


def _exit_code(code: Any) -> int:
    """What the interpreter would exit with for `SystemExit(code)` (printing a message)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run(runner: Runner, argv: list[str]) -> int:
    """Run one command line as `memcli` would in the caller's process; its exit code."""
    try:
        runner(argv)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - what the interpreter would print
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


def _watch(conn: socket.socket, life: int, done: threading.Event, guard: threading.Lock) -> None:
    """Turn the client's Ctrl-C (b"I") or its going away into SIGINT; the daemon's death
    (the life pipe's end) into the end of this process."""
    while not done.is_set():
        ready, _, _ = select.select([conn, life], [], [])
        if life in ready:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        if not data or b"I" in data:
            with guard:
                if not done.is_set():
                    # To the main thread itself: a signal sent to the process may be taken by
                    # this thread, and then the command's blocking read is never interrupted.
                    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        if not data:
            return


def wait_as_spare(listener: socket.socket, channel: socket.socket, runner: Runner, life: int,
                  warm: Callable[[], None], reports: int = -1) -> NoReturn:
    """A spare command process: wait for a connection on the daemon's CLI socket, tell the
    main process (b"A" on `channel`, so it forks the next spare), then serve it (`serve_one`).
    Never returns.

    Warmed once the main process says so (b"W": no command is running, whose cores the
    warm-up would take): `warm` pays what a forked process's first command pays (the query
    models' first run, their threads) before any request, docs/design/daemon.md. It leaves
    without a connection on b"Q" (the daemon stops) or when the daemon is gone (the life
    pipe). The listening socket is non-blocking and shared with the main process, so it
    waits in select and a connection taken by another process is no error."""
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        warmed = False
        while True:
            ready, _, _ = select.select([channel.fileno(), life, listener.fileno()], [], [])
            if life in ready:
                os._exit(0)
            if channel.fileno() in ready:
                order = channel.recv(64)
                if not order or b"Q" in order:
                    os._exit(0)
                if b"W" in order and not warmed:
                    warmed = True
                    _quietly(warm)
                continue  # look at the socket again: the order came first
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            break
        channel.sendall(b"A")
        listener.close()
        channel.close()
        conn.setblocking(True)
    except BaseException:  # noqa: BLE001 - a spare that cannot go on leaves; another is forked
        os._exit(1)
    serve_one(conn, runner, life, reports)


def _quietly(warm: Callable[[], None]) -> None:
    try:
        warm()
    except Exception:  # noqa: BLE001 - a warm-up only: the command reports its own errors
        pass


def serve_one(conn: socket.socket, runner: Runner, life: int, reports: int = -1) -> NoReturn:
    """The whole life of a command's process: receive, answer b"R", become the caller, run,
    answer b"E<code>\\n", exit. Never returns."""
    code = 1
    try:
        # The daemon's handlers are not this process's: Ctrl-C is KeyboardInterrupt again.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        conn.settimeout(10)
        try:
            header, fds = receive(conn)
            conn.settimeout(None)
            conn.sendall(b"R")
        except (OSError, ValueError, ConnectionError):
            os._exit(1)  # not a client, or gone: nothing started, nothing to tell
        report_database(header, reports)
        become_caller(header, fds)
        done, guard = threading.Event(), threading.Lock()
        threading.Thread(target=_watch, args=(conn, life, done, guard), name="memcli-watch",
                         daemon=True).start()
        try:
            code = run(runner, [str(a) for a in header["argv"]])
        finally:
            with guard:
                done.set()
    except KeyboardInterrupt:  # a Ctrl-C that came before the command started
        code = 130
    except BaseException as exc:  # noqa: BLE001 - e.g. the caller's folder is gone
        try:
            print(f"memcli: warning: request failed before its command ran: {exc!r}",
                  file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
    try:
        conn.sendall(b"E%d\n" % code)
    except OSError:
        pass
    os._exit(code)
