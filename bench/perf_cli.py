"""bench/perf.py, parts 3 and 4: whole-process `python -m memcli query` timings, the slowest
imports and the database size per memory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.perf_data import (
    CLI_FTS_LEGS,
    REPO_ROOT,
    pct,
    summary,
)
from bench.perf_ingest import checkpoint

# ----------------------------------------------------------------------------- 3. CLI


def cli_env(embedder_name: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"MEMCLI_EMBEDDER": embedder_name, "MEMCLI_CONFIG": "/nonexistent/memcli.yaml",
                "PYTHONPATH": str(REPO_ROOT)})
    env.pop("MEMCLI_DB", None)
    return env


def time_process(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms of the child: user + system from its rusage)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    ms = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-800:]}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return ms, cpu


def process_summary(runs: list[tuple[float, float]]) -> dict[str, float]:
    out = summary([w for w, _ in runs])
    cpus = [c for _, c in runs]
    out.update({"min": min(w for w, _ in runs), "cpu_p50": pct(cpus, 50),
                "cpu_p95": pct(cpus, 95)})
    return out


# Reference processes beside `memcli query`: the interpreter alone; pydantic's BaseModel, which
# the query path needs (settings, results) and nothing can start faster than; and the Typer app
# with every command, which an in-process command builds only in part (its own group).
REFERENCE_PROCESSES = (
    ("python -c pass", "pass"),
    ("python -c 'from pydantic import BaseModel'",  # with the plugin scan off, as memcli does
     "import os; os.environ['PYDANTIC_DISABLE_PLUGINS'] = '__all__'; "
     "from pydantic import BaseModel"),
    ("python -c 'import memcli.cli.app'", "import memcli.cli.app"),
)


def cli_benches(path: Path, embedder_name: str, queries: list[dict], runs: int,
                warm: int = 2, import_runs: int = 5) -> dict[str, Any]:
    env = cli_env(embedder_name)
    py = sys.executable
    out: dict[str, Any] = {}

    def query_argv(q: dict, legs: str | None) -> list[str]:
        argv = [py, "-m", "memcli", "query", q["text"], "--db", str(path), "--tenant-id",
                q["tenant_id"], "--user-id", q["user_id"], "--json"]
        return argv + (["--legs", legs] if legs else [])

    for label, legs in (("with embedder", None), ("FTS-only", CLI_FTS_LEGS)):
        measured = [time_process(query_argv(q, legs), env) for q in queries[: runs + warm]]
        out[label] = process_summary(measured[warm:])
    for label, code in REFERENCE_PROCESSES:
        measured = [time_process([py, "-c", code], env) for _ in range(runs + warm)]
        out[label] = process_summary(measured[warm:])
    out["importtime"], out["import_packages"] = import_offenders(
        query_argv(queries[0], CLI_FTS_LEGS), env, runs=import_runs)
    out["warm"], out["import_runs"] = warm, import_runs
    return out


_IMPORT_LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")


def import_offenders(argv: list[str], env: dict[str, str], runs: int = 5, top: int = 10
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Top cumulative imports of the command with their nesting depth, and self time summed
    per top-level package. Each module's time is its minimum over `runs`: the least
    disturbed run when other jobs share the machine."""
    cumulative: dict[str, list[int]] = {}
    selfs: dict[str, list[int]] = {}
    depth: dict[str, int] = {}
    for _ in range(runs):
        proc = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, cwd=REPO_ROOT,
                              capture_output=True, text=True)
        for line in proc.stderr.splitlines():
            m = _IMPORT_LINE.match(line)
            if m:
                name = m.group(4)
                selfs.setdefault(name, []).append(int(m.group(1)))
                cumulative.setdefault(name, []).append(int(m.group(2)))
                depth[name] = len(m.group(3)) // 2
    rows = [{"module": k, "cumulative_ms": min(v) / 1000, "self_ms": min(selfs[k]) / 1000,
             "depth": depth[k]}
            for k, v in cumulative.items()]
    rows.sort(key=lambda r: -r["cumulative_ms"])
    packages: dict[str, list[float]] = {}
    for row in rows:
        name = row["module"]
        key = ".".join(name.split(".")[:2]) if name.startswith("memcli.") else name.split(".")[0]
        acc = packages.setdefault(key, [0.0, 0])
        acc[0] += row["self_ms"]
        acc[1] += 1
    by_package = sorted(({"package": k, "self_ms": v[0], "modules": v[1]}
                         for k, v in packages.items()), key=lambda r: -r["self_ms"])
    return rows[:top], by_package[:top]


# ----------------------------------------------------------------------------- 4. size


def db_size(path: Path) -> dict[str, Any]:
    import apsw

    checkpoint(path)
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    memories = int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])
    objects = list(conn.execute(
        "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 8"))
    conn.close()
    total = path.stat().st_size
    return {"memories": memories, "bytes": total, "bytes_per_memory": total / max(memories, 1),
            "largest": [(n, int(b)) for n, b in objects]}


# ----------------------------------------------------------------------------- profiling
