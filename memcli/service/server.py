"""The daemon's CLI socket: run forwarded `memcli` command lines on the caller's streams.

Each connection carries one command (see `client.py` for the wire format). It runs on a thread
of its own through the same Typer app as the in-process path, inside `runctx.request` (the
caller's environment and stdio) and `CwdGate.enter` (the caller's working folder and umask).
A second thread per request watches the connection: Ctrl-C on the client (b"I") or the client
going away interrupts the command with KeyboardInterrupt, as the signal would in-process.
"""

from __future__ import annotations

import ctypes
import os
import select
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from memcli.service import runctx
from memcli.service.client import decode_request

MAX_HEADER = 16 * 1024 * 1024  # a whole environment and argv; anything larger is not a client


def bind_unix(path: Path) -> socket.socket:
    """A listening unix socket at `path`, mode 0600 from the start (no window where another
    user could connect); a leftover file there is replaced (the caller holds the lock)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(64)
    return sock


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


def _open_streams(fds: list[int], stdio: list[tuple[str | None, str | None]]
                  ) -> tuple[TextIO, TextIO, TextIO]:
    """Text streams over the passed fds, configured as the client's own sys.std* were."""
    def info(i: int, default_errors: str) -> tuple[str, str]:
        encoding, errors = stdio[i] if i < len(stdio) else (None, None)
        return encoding or "utf-8", errors or default_errors

    enc, err = info(0, "strict")
    stdin = open(fds[0], encoding=enc, errors=err, newline="\n", closefd=True)
    enc, err = info(1, "strict")
    stdout = open(fds[1], "w", 1 if os.isatty(fds[1]) else -1, encoding=enc,
                  errors=err, newline="\n", closefd=True)
    enc, err = info(2, "backslashreplace")
    stderr = open(fds[2], "w", 1, encoding=enc, errors=err, newline="\n",
                  closefd=True)
    return stdin, stdout, stderr


def _exit_code(code: Any) -> int:
    """What the interpreter would exit with for `SystemExit(code)` (printing a message)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_command(header: dict[str, Any], fds: list[int], gate: runctx.CwdGate) -> int:
    """Run one command line as `memcli` would in the caller's process; its exit code."""
    streams = _open_streams(fds, header.get("stdio") or [])
    try:
        with gate.enter(str(header["cwd"]), header.get("umask")), \
                runctx.request(header["env"], streams):
            try:
                from memcli.cli.app import run_typer

                run_typer([str(a) for a in header["argv"]])
                code = 0
            except SystemExit as exc:
                code = _exit_code(exc.code)
            except KeyboardInterrupt:
                code = 130
            except BaseException:  # noqa: BLE001 - what the interpreter would print
                traceback.print_exc()
                code = 1
            for stream in streams[1:]:
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
    finally:
        for stream in streams:
            try:
                stream.close()
            except (OSError, ValueError):
                pass
    return code


def _interrupt(thread: threading.Thread) -> None:
    """Raise KeyboardInterrupt in `thread` at its next Python instruction."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                   ctypes.py_object(KeyboardInterrupt))


class CliServer:
    """Accepts connections on the CLI socket, one thread per request."""

    def __init__(self, path: Path, on_request: Callable[[], None] = lambda: None) -> None:
        self.path = path
        self.sock = bind_unix(path)
        self.sock.settimeout(0.2)
        self.on_request = on_request
        self.gate = runctx.CwdGate()
        self._closing = threading.Event()
        self._active = 0
        self.served = 0  # commands answered (for `memcli serve status`)
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._accept_loop, name="memcli-cli-accept",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def active(self) -> int:
        return self._active

    def close(self) -> None:
        """Stop accepting; requests already started go on."""
        self._closing.set()
        if self._thread.ident is not None:  # a start that failed midway never started it
            self._thread.join(timeout=5)
        self.sock.close()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the requests in flight; True when none is left."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._active:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._closing.is_set():
                    return
                time.sleep(0.05)
                continue
            with self._cond:
                self._active += 1
            threading.Thread(target=self._handle, args=(conn,), name="memcli-request",
                             daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(10)
            try:
                header, fds = receive(conn)
            except (OSError, ValueError, ConnectionError):
                return
            if self._closing.is_set():  # not started: the client runs it in-process
                for fd in fds:
                    os.close(fd)
                return
            self.on_request()
            conn.settimeout(None)
            try:
                conn.sendall(b"R")
            except OSError:
                for fd in fds:
                    os.close(fd)
                return
            code = self._run_watched(conn, header, fds)
            self.served += 1
            try:
                conn.sendall(b"E%d\n" % code)
            except OSError:
                pass
        finally:
            conn.close()
            self.on_request()
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def _run_watched(self, conn: socket.socket, header: dict[str, Any], fds: list[int]) -> int:
        """Run the command on this thread while another watches the connection."""
        done = threading.Event()
        state = threading.Lock()  # no interrupt once the command has returned
        me = threading.current_thread()

        def watch() -> None:
            while not done.is_set():
                ready, _, _ = select.select([conn], [], [], 0.2)
                if not ready or done.is_set():
                    continue
                try:
                    data = conn.recv(64)
                except OSError:
                    data = b""
                if not data or b"I" in data:
                    with state:
                        if not done.is_set():
                            _interrupt(me)
                if not data:
                    return

        watcher = threading.Thread(target=watch, name="memcli-watch", daemon=True)
        watcher.start()
        code = 1
        try:
            code = run_command(header, fds, self.gate)
        except BaseException as exc:  # noqa: BLE001 - e.g. the caller's folder is gone
            print(f"memcli: warning: request failed before its command ran: {exc!r}",
                  file=sys.stderr)
        finally:
            with state:
                done.set()
        return code
