"""What bench/service.py and bench/service_load.py share: a `memcli serve` process and timing,
and the processes of the daemons a run started, found in /proc (with their memory)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.procs import stop

REPO_ROOT = Path(__file__).resolve().parents[1]


def cli_env(tmp: Path, *, hash_embedder: bool) -> dict[str, str]:
    """The environment of every process the benchmark starts: no user config, private dirs."""
    env = dict(os.environ)
    for var in [v for v in env if v.startswith("MEMCLI_")]:
        env.pop(var)
    env.update({
        "MEMCLI_CONFIG": str(tmp / "missing.yaml"),
        "XDG_RUNTIME_DIR": str(tmp / "run"),
        "XDG_CONFIG_HOME": str(tmp / "config"),
        "XDG_DATA_HOME": str(tmp / "data"),
        "HOME": str(tmp / "home"),
        "PYTHONPATH": str(REPO_ROOT),
        # Benchmarks start the daemons they measure; no command starts one by itself.
        "MEMCLI_AUTOSTART": "0",
    })
    for sub in ("run", "config", "data", "home"):
        (tmp / sub).mkdir(mode=0o700, exist_ok=True)
    if hash_embedder:
        env["MEMCLI_EMBEDDER"] = "hash"
    return env


def process_ms(argv: list[str], env: dict[str, str], stdin: str | None,
               cwd: Path = REPO_ROOT) -> tuple[float, float, str]:
    """(wall ms, the child's CPU ms from its rusage, stdout) of one process; exits on failure.
    `python -m memcli` imports the memcli of `cwd` first (`-m` puts it on sys.path)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True,
                          cwd=cwd, check=False)
    wall = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])} ... exit {done.returncode}: "
                         f"{done.stderr.strip()[-600:]}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu, done.stdout


class Daemon:
    """`memcli serve` for one database, stopped (SIGTERM, then SIGKILL) when the block ends."""

    def __init__(self, db: Path, env: dict[str, str], *extra: str) -> None:
        self.db, self.env, self.extra = db, env, list(extra)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = Path(env["XDG_RUNTIME_DIR"]) / f"serve-{db.name}.log"

    def __enter__(self) -> Daemon:
        argv = [sys.executable, "-m", "memcli", "serve", "--db", str(self.db), *self.extra]
        self._log = open(self.log, "wb")  # noqa: SIM115 (closed in __exit__)
        self.proc = subprocess.Popen(argv, env=self.env, stdout=self._log,
                                     stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        return self

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until the daemon answers a command (`memcli serve status`) and its models are warm."""
        deadline = time.monotonic() + timeout
        argv = [sys.executable, "-m", "memcli", "serve", "status", "--db", str(self.db)]
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise SystemExit(f"memcli serve exited {self.proc.returncode}: "
                                 f"{self.log.read_text()[-800:]}")
            done = subprocess.run(argv, env=self.env, capture_output=True, text=True,
                                  check=False)
            if done.returncode == 0 and '"models_ready": true' in done.stdout:
                return
            time.sleep(0.25)
        raise SystemExit(f"memcli serve not ready after {timeout:.0f} s")

    def status(self) -> dict[str, Any]:
        """`memcli serve status` of this database, parsed (its URL, backlog, requests...)."""
        argv = [sys.executable, "-m", "memcli", "serve", "status", "--db", str(self.db)]
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"memcli serve status failed: {done.stderr.strip()}")
        return json.loads(done.stdout)

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        stop(self.proc, timeout=30)
        self._log.close()


def auto_env(env: dict[str, str], run_dir: Path) -> dict[str, str]:
    """`env` with warm by default on, and a runtime folder of its own (so no daemon is found
    there at first: the first command starts one)."""
    run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # A short idle exit: a daemon an interrupted run could not stop goes away by itself.
    out = {**env, "XDG_RUNTIME_DIR": str(run_dir), "MEMCLI_DAEMON_IDLE_EXIT": "2"}
    out.pop("MEMCLI_AUTOSTART", None)
    return out


def alive(pid: int) -> bool:
    """The process runs (a zombie no parent reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def stop_pid(pid: int, timeout: float = 60.0) -> None:
    """SIGTERM `pid`, wait until it is gone (SIGKILL after `timeout` s)."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        if gone(pid, wait):
            return


def gone(pid: int, wait: float) -> bool:
    """Whether `pid` has exited within `wait` s."""
    deadline = time.monotonic() + wait
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # gone meanwhile, or another user's
        return b""


def _serves(pid: int, marker: bytes) -> bool:
    """`pid` is a `memcli serve` (not `serve status` or `stop`) with `marker` as the value of
    a variable of its environment: a daemon of this run, started by hand or by the CLI (it
    keeps the runtime folder of the command that started it)."""
    argv = _read(f"/proc/{pid}/cmdline").split(b"\0")
    if b"serve" not in argv or not any(a.rsplit(b"/", 1)[-1] == b"memcli" for a in argv):
        return False
    rest = argv[argv.index(b"serve") + 1:]
    return (rest[:1] not in ([b"status"], [b"stop"])
            and b"=" + marker + b"\0" in _read(f"/proc/{pid}/environ"))


def daemon_processes(marker: str | Path) -> dict[int, list[int]]:
    """Every daemon whose environment names `marker` (a folder of this run, its
    XDG_RUNTIME_DIR) and its processes, from /proc: {its main
    process: [it, then every live descendant (HTTP, indexer, commands, spares)]}."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        fields = _read(f"/proc/{name}/stat").rsplit(b")", 1)[-1].split() if name.isdigit() else []
        if len(fields) > 1 and fields[0] != b"Z":
            parents[int(name)] = int(fields[1])
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    key = os.fsencode(str(marker))
    serving = {pid for pid in parents if _serves(pid, key)}
    return {root: _tree(root, children)
            for root in sorted(pid for pid in serving if parents[pid] not in serving)}


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        fields = _read(f"/proc/{name}/stat").rsplit(b")", 1)[-1].split() if name.isdigit() else []
        if len(fields) > 1 and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    return children


def _tree(root: int, children: dict[int, list[int]]) -> list[int]:
    tree, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        tree.append(pid)
        todo += sorted(children.get(pid, []))
    return tree


def process_tree(root: int) -> list[int]:
    """`root`, then every live process below it (from /proc)."""
    return _tree(root, _children())


def pss_mb(pid: int) -> float:
    """The proportional set size of `pid` (/proc/PID/smaps_rollup, Linux 4.14+) in MB: its
    private pages plus its share of the pages it shares (0 when it is gone)."""
    for line in _read(f"/proc/{pid}/smaps_rollup").splitlines():
        if line.startswith(b"Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def stop_daemons(marker: str | Path, timeout: float = 60.0) -> None:
    """Stop every daemon of this run (`daemon_processes`) and whatever of theirs outlives
    them."""
    trees = daemon_processes(marker)
    for root in trees:  # all at once: each stops its own processes, in its own order
        with contextlib.suppress(ProcessLookupError):
            os.kill(root, signal.SIGTERM)
    for root in trees:
        if not gone(root, timeout):
            stop_pid(root, 0)
    for pid in [pid for tree in trees.values() for pid in tree[1:]]:
        if alive(pid):
            stop_pid(pid, 10.0)
