"""Real `memcli serve` processes for tests: start, wait for the socket, always stop.

`Daemon` starts `python -m memcli serve` for one database with a given environment and, on
leaving the block, sends SIGTERM and then SIGKILL (finally), so no test leaves a daemon
behind; `no_stray_daemons` (autouse, registered in conftest) fails a test that does anyway.
A module-scoped fixture that serves several tests from one daemon says so with `shared=True`
(stopped when the fixture ends, not after each test).
`run_client` runs the installed entry point's code in a child process and records which route
the command took (and which heavy modules the client had imported when a daemon answered).
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memcli.service.daemon import paths
from tests.support.procs import children, processes, with_argument
from tests.support.trust import memcli_env

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pydantic", "numpy", "typer", "click", "rich")
_LIVE: set[subprocess.Popen] = set()
_SHARED: set[int] = set()  # pids of daemons a module-scoped fixture keeps across its tests

# The entry point as installed, plus a record of the route: a forwarded command ends in
# os._exit (entry._exit_now) and writes "daemon <heavy modules loaded>", an in-process one
# writes "inprocess" at exit ("inprocess other-db" when its command line names a database with
# --db: the README's export/import examples move a memory to another file, no daemon's).
_CLIENT = (
    "import atexit, os, sys\n"
    "log = os.environ['MEMCLI_TEST_ROUTE_LOG']\n"
    f"heavy = {HEAVY!r}\n"
    "real_exit = os._exit\n"
    "def marked(code):\n"
    "    with open(log, 'a') as f:\n"
    "        f.write('daemon ' + ','.join(m for m in heavy if m in sys.modules) + '\\n')\n"
    "    real_exit(code)\n"
    "os._exit = marked\n"
    "other = ' other-db' if any(a.startswith('--db') for a in sys.argv) else ''\n"
    "atexit.register(lambda: open(log, 'a').write('inprocess' + other + '\\n'))\n"
    "from memcli.cli.entry import main\n"
    "main()\n"
)


def daemon_env(home: Path, db: Path, *, models: str = "hash") -> dict[str, str]:
    """An isolated environment (tests.support.trust.memcli_env) with its own runtime folder."""
    env = memcli_env(home, db, models=models)
    run = home / "run"
    run.mkdir(mode=0o700, parents=True, exist_ok=True)
    env["XDG_RUNTIME_DIR"] = str(run)
    return env


def socket_of(db: Path, env: dict[str, str]) -> Path:
    return Path(paths.endpoint(str(db), env).socket)


def user_socket(env: dict[str, str]) -> Path:
    """The CLI socket of the user's daemon for the environment `env` (paths.user_endpoint)."""
    return Path(paths.user_endpoint(env).socket)


class Daemon:
    """`memcli serve` for `db`, stopped on leaving the block (SIGTERM, then SIGKILL)."""

    def __init__(self, db: Path, env: dict[str, str], *args: str, cwd: Path | None = None,
                 wait: bool = True, shared: bool = False) -> None:
        self.db, self.env, self.args, self.cwd, self.wait = db, env, args, cwd, wait
        self.shared = shared  # outlives one test: no_stray_daemons leaves it running
        self.proc: subprocess.Popen | None = None
        self.socket = socket_of(db, env)

    def __enter__(self) -> Daemon:
        self.proc = start_serve(self.env, "--db", str(self.db), *self.args, cwd=self.cwd)
        if self.shared:
            _SHARED.add(self.proc.pid)
        if self.wait:
            wait_for_socket(self.socket, self.proc)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            try:
                stop(self.proc)
            finally:
                _SHARED.discard(self.proc.pid)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


def start_serve(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "memcli", "serve", *args], env=env,
                            cwd=cwd or ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _LIVE.add(proc)
    return proc


def stop(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str, str]:
    """SIGTERM, wait, SIGKILL if needed; (exit code, stdout, stderr)."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return proc.returncode, out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _LIVE.discard(proc)


def wait_for_socket(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"memcli serve exited {proc.returncode}: {err}")
        if path.exists():
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(path))
                return
            except OSError:
                pass
            finally:
                probe.close()
        time.sleep(0.05)
    raise AssertionError(f"no socket at {path} after {timeout} s")


def run_client(args: list[str], env: dict[str, str], *, routes: Path, stdin: str | bytes | None
               = None, cwd: Path | None = None, timeout: float = 120,
               ) -> subprocess.CompletedProcess:
    """The `memcli` entry point in a child process (bytes out); its route is appended to
    `routes`."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    feed: dict = {"input": data} if data is not None else {"stdin": subprocess.DEVNULL}
    return subprocess.run([sys.executable, "-c", _CLIENT, *args], **feed,
                          env={**env, "MEMCLI_TEST_ROUTE_LOG": str(routes)}, cwd=cwd or ROOT,
                          capture_output=True, timeout=timeout)


@contextlib.contextmanager
def piped_client(args: list[str], env: dict[str, str], *, routes: Path
                 ) -> Iterator[subprocess.Popen]:
    """The `memcli` entry point running in a child process, its stdin, stdout and stderr on
    pipes (a test feeds, reads or signals it); killed if it still runs when the block ends."""
    client = subprocess.Popen([sys.executable, "-c", _CLIENT, *args],
                              env={**env, "MEMCLI_TEST_ROUTE_LOG": str(routes)},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        yield client
    finally:
        if client.poll() is None:
            client.kill()
        client.wait()
        client.stdin.close()


def last_route(routes: Path) -> str:
    """The route of the last command: "daemon <heavy modules>" or "inprocess"."""
    return routes.read_text().splitlines()[-1].removesuffix(" other-db")


def children_of(parent: int) -> list[int]:
    """Pids of the running processes whose parent is `parent` (a daemon's command processes
    and its HTTP process)."""
    return [p.pid for p in processes() if p.ppid == parent]


def open_files(pid: int) -> set[str]:
    """What the fds of process `pid` point at ("pipe:[123]", "socket:[456]", paths); empty
    when the process is gone."""
    found: set[str] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    return found


def serve_processes() -> list[int]:
    """Pids of running `memcli serve` processes that are children of this test process
    (however they were started)."""
    return [p.pid for p in children(os.getpid())
            if b"memcli" in p.argv and b"serve" in p.argv]


def auto_started_under(folder: Path) -> list[int]:
    """Pids of auto-started `memcli serve` processes (detached: no test's children) of a
    test under `folder`: their socket (`--socket`, in the test's runtime folder) or their
    config file (MEMCLI_CONFIG, in the test's home) lies there (memcli/service/daemon/
    autostart.py gives the user's daemon no database)."""
    where = str(folder).encode()
    return [p.pid for p in with_argument(b"--auto-started")
            if any(where in a for a in p.argv)
            or any(v.startswith(b"MEMCLI_CONFIG=" + where) for v in p.environ or ())]


@pytest.fixture(autouse=True)
def no_stray_daemons(tmp_path_factory):
    """Fail a test that leaves a `memcli serve` it started running (and stop it), a daemon a
    command of the test started by itself included (a child environment built without
    MEMCLI_AUTOSTART=0). A daemon of a module-scoped fixture (`Daemon(..., shared=True)`) is
    the fixture's to stop."""
    yield
    stray = [pid for pid in serve_processes() if pid not in _SHARED]
    auto = auto_started_under(tmp_path_factory.getbasetemp())
    for pid in auto:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    stray += auto
    for pid in stray:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    for proc in list(_LIVE):
        if proc.pid in _SHARED:
            continue
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _LIVE.discard(proc)
    assert not stray, f"a test left memcli serve running (pids {stray})"


def wait_until(predicate, timeout: float = 30.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


READ = {"x86_64": 0, "aarch64": 63}.get(platform.machine())


def reading(daemon: int, target: str) -> bool:
    """True when a thread of the daemon or of a process it started is in read() on `target`
    (an `open_files` name); skips the test where the read system call's number is unknown."""
    if READ is None:
        pytest.skip("the read system call's number is known for x86_64 and aarch64 only")
    for pid in (daemon, *children_of(daemon)):
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                    fields = f.read().split()
                if len(fields) > 1 and fields[0] == str(READ):
                    if os.readlink(f"/proc/{pid}/fd/{int(fields[1], 16)}") == target:
                        return True
            except (OSError, ValueError):
                continue
    return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def processes_naming(text: str) -> list[int]:
    """Pids of the running `serve` processes whose command line contains `text`."""
    me = os.getpid()
    found = []
    for p in processes():
        argv = b" ".join(p.argv).decode(errors="replace")
        if p.pid != me and not p.zombie and text in argv and "serve" in argv:
            found.append(p.pid)
    return found


def stop_started(run: Path) -> None:
    """Kill every daemon serving from `run` (SIGTERM, then SIGKILL) and wait until none
    is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in processes_naming(str(run)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if wait_until(lambda: not processes_naming(str(run)), timeout=20):
            return
    raise AssertionError(f"daemons left under {run}: {processes_naming(str(run))}")
