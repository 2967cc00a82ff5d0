"""bench/perf.py, part 2: library `Memory.query` latency per database size, legs and scope,
run in a child process with the CLI's thread settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.perf_data import CACHE_DIR, FTS_ONLY, PERF_CHILD, REPO_ROOT, log, pct, summary
from bench.perf_ingest import make_models, open_memory, warm_models

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


