"""bench/perf.py's query measurements: library `Memory.query` latency per database size, legs
and scope (in a child process with the CLI's thread settings); whole-process `python -m memcli
query` timings and the slowest imports; the database size per memory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.perf_data import (
    CACHE_DIR,
    CLI_FTS_LEGS,
    FTS_ONLY,
    PERF_CHILD,
    REPO_ROOT,
    log,
    pct,
    summary,
)
from bench.perf_ingest import checkpoint, make_models, open_memory, warm_models
from bench.service_support import process_ms

# ----------------------------------------------------------------------------- 2. query


def default_legs() -> dict[str, float]:
    from memcli.config import RetrievalSettings

    return dict(RetrievalSettings().leg_weights)


def query_latency(memory: Any, queries: list[dict], *, legs: dict[str, float],
                  user_scope: bool, warmup: int) -> dict[str, float]:
    memory.retrieval.leg_weights = dict(legs)
    times, cpus = [], []
    for i, q in enumerate(queries):
        filters = memory.filters(tenant_id=q["tenant_id"],
                                 user_id=q["user_id"] if user_scope else None)
        t0, c0 = time.perf_counter(), time.process_time()
        memory.query(q["text"], filters=filters)
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1000)
            cpus.append((time.process_time() - c0) * 1000)
    out = summary(times)
    out["cpu_p50"], out["cpu_p95"] = pct(cpus, 50), pct(cpus, 95)
    return out


def fts_matches(memory: Any, queries: list[dict]) -> dict[str, float]:
    """How many rows each query's FTS expression matches (the lexical leg's work)."""
    from memcli.retrieval import text as qtext
    from memcli.store.sqlite.fts import fts_match

    counts = []
    for q in queries:
        match = fts_match(qtext.lexical_query(q["text"]))
        if match:
            counts.append(float(memory.db.scalar(
                "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?", (match,))))
    return summary(counts)


# The library query passes run in a fresh process (the ingest passes before them leave the
# page cache and the models' threads warm in odd ways) with the thread settings that `memcli`
# and `Memory.configured` set: passive OpenMP waiting and one OpenBLAS thread.
QUERY_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_NUM_THREADS": "1"}


def query_benches_in_child(path: Path, embedder_name: str, use_sparse: bool,
                           queries: list[dict], warmup: int) -> dict[str, Any]:
    spec = CACHE_DIR / "perf-queries.json"
    spec.write_text(json.dumps({"db": str(path), "queries": queries, "warmup": warmup}))
    argv = [*PERF_CHILD, "--child", "query-benches",
            "--embedder", embedder_name, "--spec", str(spec)]
    if not use_sparse:
        argv.append("--no-sparse")
    done = subprocess.run(argv, env={**os.environ, **QUERY_ENV}, capture_output=True,
                          text=True, check=False, cwd=REPO_ROOT)
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"query bench child failed ({done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def page_cache_warm(path: Path) -> None:
    """Read the database file once so the OS caches it."""
    for suffix in ("", "-wal"):
        part = Path(str(path) + suffix)
        if part.exists():
            with open(part, "rb") as fh:
                while fh.read(1 << 20):
                    pass


def run_query_benches(path: Path, embedder_name: str, use_sparse: bool, queries: list[dict],
                      warmup: int) -> dict[str, Any]:
    embedder, sparse = make_models(embedder_name, use_sparse)
    warm_models(embedder, sparse)
    out: dict[str, Any] = {}
    with open_memory(path, embedder, sparse) as memory:
        # Steady state, as in a long-running agent: the file in the OS page cache (the bench
        # may have just rewritten it) and one untimed pass of the queries.
        page_cache_warm(path)
        for q in queries:
            memory.query(q["text"], filters=memory.filters(tenant_id=q["tenant_id"]))
        for legs_name, legs in (("all legs", default_legs()), ("FTS-only", FTS_ONLY)):
            for scope_name, user_scope in (("tenant+user", True), ("tenant only", False)):
                log(f"  {path.name}: {legs_name}, {scope_name}")
                out[f"{legs_name} | {scope_name}"] = query_latency(
                    memory, queries, legs=legs, user_scope=user_scope, warmup=warmup)
        memories = int(memory.db.scalar("SELECT count(*) FROM memories"))
        out["fts_matches"] = fts_matches(memory, queries)
        per_user = memory.db.query(
            "SELECT count(*) AS n FROM memories GROUP BY tenant_id, user_id ORDER BY n")
    out["memories"] = memories
    out["legs"] = sorted(k for k, v in default_legs().items() if v > 0
                         and (k != "sparse" or use_sparse))
    out["scope_sizes"] = {"min": per_user[0]["n"], "median": per_user[len(per_user) // 2]["n"],
                          "max": per_user[-1]["n"]}
    return out


# ----------------------------------------------------------------------------- 3. CLI


def cli_env(embedder_name: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"MEMCLI_EMBEDDER": embedder_name, "MEMCLI_CONFIG": "/nonexistent/memcli.yaml",
                "PYTHONPATH": str(REPO_ROOT)})
    env.pop("MEMCLI_DB", None)
    return env


def time_process(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms of the child: user + system from its rusage)."""
    wall, cpu, _ = process_ms(argv, env, None)
    return wall, cpu


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
    """File bytes per memory after a WAL checkpoint, the largest tables and indexes, and the
    WAL's size before the checkpoint (concurrent writers rarely let it reset)."""
    import apsw

    wal = Path(f"{path}-wal")
    wal_before = wal.stat().st_size if wal.exists() else 0
    checkpoint(path)
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    memories = int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])
    objects = list(conn.execute(
        "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 8"))
    conn.close()
    total = path.stat().st_size
    return {"memories": memories, "bytes": total, "bytes_per_memory": total / max(memories, 1),
            "largest": [(n, int(b)) for n, b in objects], "wal_bytes_before_checkpoint": wal_before}
