"""What bench/service.py and bench/service_load.py share: a `memcli serve` process and timing."""

from __future__ import annotations

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


def process_ms(argv: list[str], env: dict[str, str], stdin: str | None
               ) -> tuple[float, float, str]:
    """(wall ms, the child's CPU ms from its rusage, stdout) of one process; exits on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True,
                          cwd=REPO_ROOT, check=False)
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


def stop_auto_started(pid_file: Path, timeout: float = 60.0) -> None:
    """SIGTERM the daemon a command started (its pid in `pid_file`), wait until it is gone
    (SIGKILL after `timeout` s)."""
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not alive(pid):
                return
            time.sleep(0.05)
