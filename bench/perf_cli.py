"""bench/perf.py, parts 3 and 4: whole-process `python -m memcli query` timings, the slowest
imports, database size per memory, and the optional cProfile of ingest and query."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.perf_data import (
    BATCH,
    CACHE_DIR,
    CLI_FTS_LEGS,
    FTS_ONLY,
    REPO_ROOT,
    generate_events,
    log,
    pct,
    summary,
)
from bench.perf_ingest import batches, checkpoint, make_models, open_memory, warm_models
from bench.perf_query import default_legs

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
        argv = [py, "-m", "memcli", "query", q["text"], "--db", str(path), "--tenant",
                q["tenant_id"], "--user", q["user_id"], "--json"]
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


def profile_paths(db: Path, queries: list[dict], embedder_name: str,
                  use_sparse: bool, out_path: Path) -> None:
    """cProfile (CPU time, so other jobs on the machine do not count) the defer-embed ingest
    of 2,000 events, 300 single-event ingests and 100 queries of each kind."""
    import cProfile
    import io
    import pstats

    buf = io.StringIO()
    events = generate_events(BATCH * 5 + 300, seed=11)

    def dump(title: str, prof: cProfile.Profile) -> None:
        buf.write(f"\n===== {title} =====\n")
        stats = pstats.Stats(prof, stream=buf).strip_dirs()
        stats.sort_stats("cumulative").print_stats(35)
        stats.sort_stats("tottime").print_stats(20)

    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        path = Path(tmp) / "profile.db"
        with open_memory(path, *make_models(embedder_name, use_sparse)) as memory:
            memory.ingest(events[:BATCH], defer_embed=True)
            prof = cProfile.Profile(time.process_time)
            prof.enable()
            for chunk in batches(events[BATCH : BATCH * 5], BATCH):
                memory.ingest(list(chunk), defer_embed=True)
            prof.disable()
            dump("ingest, defer_embed, 2,000 events in batches of 500", prof)
            prof = cProfile.Profile(time.process_time)
            prof.enable()
            for rec in events[BATCH * 5 : BATCH * 5 + 300]:
                memory.ingest([rec], defer_embed=True)
            prof.disable()
            dump("ingest, defer_embed, 300 single-event calls", prof)
    embedder, sparse = make_models(embedder_name, use_sparse)
    warm_models(embedder, sparse)
    with open_memory(db, embedder, sparse) as memory:
        for legs_name, legs in (("all legs", default_legs()), ("FTS-only", FTS_ONLY)):
            for user_scope in (True, False):
                memory.retrieval.leg_weights = legs
                for q in queries[:10]:
                    memory.query(q["text"])
                prof = cProfile.Profile(time.process_time)
                prof.enable()
                for q in queries[:100]:
                    f = memory.filters(tenant_id=q["tenant_id"],
                                       user_id=q["user_id"] if user_scope else None)
                    memory.query(q["text"], filters=f)
                prof.disable()
                scope = "tenant+user" if user_scope else "tenant only"
                dump(f"query {db.name}, {legs_name}, {scope}, 100 queries", prof)
    out_path.write_text(buf.getvalue())
    log(f"profile written to {out_path}")


