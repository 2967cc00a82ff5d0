"""The daemon's CLI socket: a process of its own for each forwarded `memcli` command line.

Each connection carries one command (see `client.py` for the wire format). The main process
keeps one spare command process forked and warmed before the request comes
(memcli/service/daemon/worker.py `wait_as_spare`): it accepts the connection itself, tells the
main process on its channel (b"A"), which forks the next spare, then receives the request and
the caller's fds, becomes the caller's process (environment, folder, umask, stdio) and runs the
command through the runner the CLI gave the daemon (the same Typer app as the in-process
path). While no spare waits (one ended without a command), the main process accepts and forks
per command itself. The parent keeps the children's pids: how many commands run (for the idle
exit and shutdown; a waiting spare is none), and how many were started (for `memcli serve
status`).

Forking is safe because the process that forks is single-threaded: the main process runs one
select loop, loads the models but never runs them (no OpenMP or BLAS thread pool is started
before a fork), and holds no database connection (memcli/service/daemon/http_process.py's process
does); a spare starts its pools after its fork and never forks again. Each child gets a process
group of its own, so a Ctrl-C typed at the daemon's terminal stops the daemon (which lets
commands in flight finish), not the commands.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from memcli.service.daemon import worker

# A spare that ended without a command (killed, say) is replaced after this many seconds at the
# soonest; meanwhile the main process accepts and forks per command.
SPARE_RETRY = 1.0
# A spare warms up once no command runs (the warm-up would take their cores), or this many
# seconds after its fork at the latest.
SPARE_WARM_AFTER = 1.0


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
    """Serves the CLI socket: keeps one spare command process waiting in `accept()` (forked
    and warmed before the request comes), forks the next one when it has taken a connection,
    and accepts and forks itself only while no spare is there."""

    def __init__(self, path: Path, runner: worker.Runner,
                 on_request: Callable[[], None] = lambda: None,
                 warm: Callable[[], None] = lambda: None) -> None:
        self.path = path
        self.sock = bind_unix(path)
        self.sock.setblocking(False)
        self.runner = runner
        self.on_request = on_request
        self.warm = warm  # what a spare runs once before its command (the first-run costs)
        self.children: set[int] = set()  # the commands running (a waiting spare is none)
        self.served = 0  # commands started (for `memcli serve status`)
        self.parent_fds: list[int] = []  # the daemon's own fds a child closes at once
        # The children's end of the life pipe: it reads EOF once the daemon is gone.
        self.life_r, self.life_w = os.pipe()
        self.spare: Spare | None = None
        self.spares = True  # False: accept and fork per command, as before spares existed
        self._spare_failed = -SPARE_RETRY  # when a spare last ended without a command
        self._gone: set[int] = set()  # spares that ended without a command, to be reaped
        self._closed = False
        self.reports = -1  # where a command's process names its database (worker.py)

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def active(self) -> int:
        return len(self.children)

    def waiting(self) -> list[Any]:
        """What the main loop selects on for the CLI: the spare's channel while a spare waits
        (it takes the connections itself), else the socket."""
        if self._closed:
            return []
        return [self.spare] if self.spare is not None else [self]

    def timeout(self) -> float | None:
        """How long the main loop may sleep before this needs it again (a spare to replace,
        or to warm up)."""
        if self._closed or not self.spares:
            return None
        if self.spare is None:
            at = self._spare_failed + SPARE_RETRY
        elif not self.spare.warming:
            at = self.spare.forked + SPARE_WARM_AFTER
        else:
            return None
        return max(0.0, at - time.monotonic())

    def serve(self, ready: Iterable[Any]) -> None:
        """After the main loop's select: take the spare's report, accept a connection
        (without a spare), and keep a spare waiting."""
        ready = list(ready)
        if self.spare is not None and self.spare in ready:
            self._read_spare()
        if self in ready and self.spare is None:
            self.accept()
        self.keep_spare()

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
        pid = self._fork()
        if pid == 0:
            try:
                self._child_setup()
                self.sock.close()
            finally:
                worker.serve_one(conn, self.runner, self.life_r, self.reports)
        conn.close()
        self.children.add(pid)
        self.served += 1

    def keep_spare(self) -> None:
        """Fork a spare when none waits (not again within SPARE_RETRY of one that ended
        without a command: the main process then accepts, as it did before spares)."""
        if self._closed or not self.spares:
            return
        spare = self.spare
        if spare is not None:
            if not spare.warming and (not self.children
                                      or time.monotonic() >= spare.forked + SPARE_WARM_AFTER):
                spare.order(b"W")
                spare.warming = True
            return
        if time.monotonic() < self._spare_failed + SPARE_RETRY:
            return
        ours, theirs = socket.socketpair()
        pid = self._fork()
        if pid == 0:
            try:
                ours.close()
                self._child_setup()
            finally:
                worker.wait_as_spare(self.sock, theirs, self.runner, self.life_r, self.warm,
                                     self.reports)
        theirs.close()
        ours.setblocking(False)
        self.spare = Spare(pid, ours)
        self.keep_spare()  # warm at once when no command runs

    def _read_spare(self) -> None:
        spare = self.spare
        assert spare is not None
        try:
            data = spare.channel.recv(64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data.startswith(b"A"):  # it took a connection: a command now
            self.children.add(spare.pid)
            self.served += 1
            self.on_request()
        else:  # it ended without one (killed, say)
            self._spare_failed = time.monotonic()
            self._gone.add(spare.pid)
        spare.channel.close()
        self.spare = None

    def _fork(self) -> int:
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
            try:
                stream.flush()
            except (OSError, ValueError):  # the daemon's log is gone: commands still run
                pass
        return os.fork()

    def _child_setup(self) -> None:
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _close([*self.parent_fds, self.life_w])

    def reap(self) -> list[int]:
        """Collect the children that ended (commands, and spares that ended without one); the
        commands' pids."""
        if self.spare is not None and _ended(self.spare.pid):
            self._read_spare()  # its report came before its end: read it first
        ended = [pid for pid in list(self.children) if _ended(pid)]
        self.children.difference_update(ended)
        self._gone.difference_update([pid for pid in list(self._gone) if _ended(pid)])
        return ended

    def close(self) -> None:
        """Stop accepting (the spare leaves without taking a connection); commands already
        started go on."""
        self._closed = True
        if self.spare is not None:
            self.spare.quit()
        self.sock.close()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the commands in flight; True when none is left."""
        deadline = time.monotonic() + timeout
        while self.children or self.spare is not None:
            self.reap()
            if not self.children and self.spare is None:
                break
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def kill_all(self) -> None:
        """End the commands still running (their transactions roll back), and the spare."""
        pids = list(self.children) + ([self.spare.pid] if self.spare is not None else [])
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.children.discard(pid)
        if self.spare is not None:
            self.spare.channel.close()
            self.spare = None
        if self.life_w >= 0:
            os.close(self.life_w)
            self.life_w = -1


class Spare:
    """A spare command process seen from the main process: its pid, and the main process's
    end of a socket pair with it (b"A" from it: it took a connection; b"Q" to it: leave)."""

    def __init__(self, pid: int, channel: socket.socket) -> None:
        self.pid, self.channel = pid, channel
        self.forked = time.monotonic()
        self.warming = False  # told to warm up

    def fileno(self) -> int:
        return self.channel.fileno()

    def order(self, what: bytes) -> None:
        try:
            self.channel.send(what)
        except OSError:  # gone already: its end is read next
            pass

    def quit(self) -> None:
        self.order(b"Q")


def _ended(pid: int) -> bool:
    """Whether the child `pid` has ended (collected now, or before)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        return True


def _close(fds: Iterable[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
