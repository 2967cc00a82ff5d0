"""The daemon's CLI socket: one forked process per forwarded `memcli` command line.

Each connection carries one command (see `client.py` for the wire format). The daemon's main
process accepts it and forks; the child (memcli/service/daemon/worker.py) receives the request and
the caller's fds, becomes the caller's process (environment, folder, umask, stdio) and runs the
command through the runner the CLI gave the daemon (the same Typer app as the in-process path).
The parent only keeps the children's pids: how many run (for the idle exit and shutdown), and
how many were started (for `memcli serve status`).

Forking is safe because the process that forks is single-threaded: the main process runs one
select loop, loads the models but never runs them (no OpenMP or BLAS thread pool is started
before a fork), and holds no database connection (memcli/service/daemon/http_process.py's process
does). Each child gets a process group of its own, so a Ctrl-C typed at the daemon's terminal stops
the daemon (which lets commands in flight finish), not the commands.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from memcli.service.daemon import worker


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


class CliServer:
    """Accepts connections on the CLI socket and forks a process per command."""

    def __init__(self, path: Path, runner: worker.Runner,
                 on_request: Callable[[], None] = lambda: None) -> None:
        self.path = path
        self.sock = bind_unix(path)
        self.sock.setblocking(False)
        self.runner = runner
        self.on_request = on_request
        self.children: set[int] = set()
        self.served = 0  # commands started (for `memcli serve status`)
        self.parent_fds: list[int] = []  # the daemon's own fds a child closes at once
        # The children's end of the life pipe: it reads EOF once the daemon is gone.
        self.life_r, self.life_w = os.pipe()
        self.reports = -1  # where a command's process names its database (worker.py)

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def active(self) -> int:
        return len(self.children)

    def accept(self) -> None:
        """Accept a waiting connection (if any) and fork its command's process."""
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            time.sleep(0.05)
            return
        conn.setblocking(True)
        self.on_request()
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
            try:
                stream.flush()
            except (OSError, ValueError):  # the daemon's log is gone: commands still run
                pass
        pid = os.fork()
        if pid == 0:
            try:
                self._child_setup()
            finally:
                worker.serve_one(conn, self.runner, self.life_r, self.reports)
        conn.close()
        self.children.add(pid)
        self.served += 1

    def _child_setup(self) -> None:
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.sock.close()
        _close([*self.parent_fds, self.life_w])

    def reap(self) -> list[int]:
        """Collect the children that ended; their pids."""
        ended = []
        for pid in list(self.children):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.children.discard(pid)
                ended.append(pid)
        return ended

    def close(self) -> None:
        """Stop accepting; commands already started go on."""
        self.sock.close()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the commands in flight; True when none is left."""
        deadline = time.monotonic() + timeout
        while self.children:
            self.reap()
            if not self.children:
                break
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def kill_all(self) -> None:
        """End the commands still running (their transactions roll back)."""
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.children.discard(pid)
        if self.life_w >= 0:
            os.close(self.life_w)
            self.life_w = -1


def _close(fds: Iterable[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
