"""Many `memcli` writer processes on one PostgreSQL database at once (tests and
bench/results/pg-writers.md): the records they write and a runner that starts them together.

Each writer is a real `python -m memcli ingest -` process with MEMCLI_DB set to the server URL
(no daemon: its runtime folder is its own), the hash embedder and no SPLADE leg, so what is
measured and checked is the database path: the writer lock, the unique constraints, the
sequences.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.trust import memcli_env


def writer_env(home: Path, url: str) -> dict[str, str]:
    """An isolated memcli environment writing to `url` (no daemon found: own runtime dir)."""
    env = memcli_env(home, url)  # type: ignore[arg-type]  # only str()-ed
    run = home / "run"
    run.mkdir(mode=0o700, parents=True, exist_ok=True)
    env["XDG_RUNTIME_DIR"] = str(run)
    return env


def records(tenant: str, count: int, *, prefix: str = "ev", session: str = "s1") -> str:
    """`count` NDJSON events of `tenant` with stable ids `<prefix>-<tenant>-<i>`."""
    return "".join(json.dumps({
        "event_id": f"{prefix}-{tenant}-{i}", "tenant_id": tenant, "session_id": session,
        "user_id": "u", "ts": f"2025-01-01T10:{i // 60 % 60:02d}:{i % 60:02d}Z",
        "text": f"{prefix} note {i} of {tenant}: the {('red', 'blue', 'green')[i % 3]} "
                f"deploy number {i} went fine"}) + "\n" for i in range(count))


@dataclass
class Run:
    results: list[subprocess.CompletedProcess]
    seconds: float  # from the first start to the last exit

    @property
    def ingested(self) -> int:
        return sum(len(json.loads(r.stdout)["created"]) for r in self.results)

    def failures(self) -> list[str]:
        return [f"exit {r.returncode}: {r.stderr.strip()}" for r in self.results
                if r.returncode != 0]


def run_writers(jobs: list[tuple[dict[str, str], str]], *, timeout: float = 600) -> Run:
    """Start one `memcli ingest -` per (env, ndjson) at once (input and output in files, so
    no pipe paces a writer) and wait for all."""
    args = [sys.executable, "-m", "memcli", "ingest", "-"]
    with tempfile.TemporaryDirectory(prefix="memcli-writers-") as tmp:
        folder = Path(tmp)
        files = []
        for i, (_, data) in enumerate(jobs):
            (folder / f"{i}.in").write_text(data, encoding="utf-8")
            files.append((open(folder / f"{i}.in", "rb"), open(folder / f"{i}.out", "wb"),
                          open(folder / f"{i}.err", "wb")))
        started = time.perf_counter()
        procs = [subprocess.Popen(args, env=env, stdin=fin, stdout=fout, stderr=ferr)
                 for (env, _), (fin, fout, ferr) in zip(jobs, files, strict=True)]
        try:
            for proc in procs:
                proc.wait(timeout=timeout)
            seconds = time.perf_counter() - started
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for handles in files:
                for handle in handles:
                    handle.close()
        outs = [subprocess.CompletedProcess(
            proc.args, proc.returncode, (folder / f"{i}.out").read_text(encoding="utf-8"),
            (folder / f"{i}.err").read_text(encoding="utf-8")) for i, proc in enumerate(procs)]
    return Run(outs, seconds)
