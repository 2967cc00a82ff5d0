"""bench/perf.py, part 2: library `Memory.query` latency per database size, legs and scope,
the per-step breakdown, run in a child process with the CLI's thread settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
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


class _Proxy:
    """Delegates to `inner`, timing the named methods into `sink`."""

    def __init__(self, inner: Any, methods: dict[str, str], sink: dict[str, list[float]]
                 ) -> None:
        self._inner, self._methods, self._sink = inner, methods, sink

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        label = self._methods.get(name)
        if label is None:
            return attr
        return _timed(attr, label, self._sink)


def _timed(fn: Callable[..., Any], label: str, sink: dict[str, list[float]]
           ) -> Callable[..., Any]:
    """Wrap fn so each call adds its [wall ms, CPU ms] to sink[label]."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            acc = sink.setdefault(label, [0.0, 0.0])
            acc[0] += (time.perf_counter() - t0) * 1000
            acc[1] += (time.process_time() - c0) * 1000
    wrapper.__name__ = getattr(fn, "__name__", label)
    return wrapper


# Steps of Memory.query, timed by wrapping the functions it calls through module attributes.
# (module, attribute, label, nested): nested steps run inside another step and are shown for
# detail only; the others add up, with "other" the rest of the call.
_STEPS = (
    ("memcli.retrieval.search", "query_entity_keys", "query parsing: entity keys", False),
    ("memcli.retrieval.text", "lexical_query", "query parsing: lexical terms", False),
    ("memcli.store.search_sql", "lexical", "leg lexical (SQL)", False),
    ("memcli.store.search_sql", "trigram", "leg trigram (SQL)", False),
    ("memcli.store.search_sql", "entity", "leg entity (SQL)", False),
    ("memcli.store.search_sql", "count_candidates", "scope count (picks the legs' plans)", False),
    ("memcli.store.sparse", "search", "leg sparse (SQL)", False),
    ("memcli.store.search_sql", "dense", "leg dense (SQL)", False),
    ("", "encode_query", "  worker thread: SPLADE encode_query", True),
    ("", "embed_query", "  worker thread: embed_query (dense model)", True),
    ("memcli.retrieval.search", "rank", "rank (fusion + stages)", False),
    ("memcli.retrieval.search", "fuse", "  rank: fuse", True),
    ("memcli.store.memories", "get_memories", "  rank: get_memories", True),
    ("memcli.store.search_sql", "session_neighbours",
     "  rank: session_neighbours SQL (in neighbours)", True),
)


OTHER = "other (Memory.query itself, incl. waiting for the models)"


def query_breakdown(memory: Any, queries: list[dict], *, legs: dict[str, float],
                    user_scope: bool, warmup: int) -> dict[str, dict[str, float]]:
    """Run the real Memory.query with its steps wrapped in timers: per step, wall ms
    summary plus CPU p50 (this process's CPU time)."""
    import importlib

    from memcli.retrieval import stages

    memory.retrieval.leg_weights = dict(legs)
    sink: dict[str, list[float]] = {}
    nested = {label for *_, label, is_nested in _STEPS if is_nested}
    saved: list[tuple[Any, str, Any]] = []
    write_name = "_after_read" if hasattr(memory, "_after_read") else "_record_access"
    parts: dict[str, list[tuple[float, float]]] = {}
    models = (memory.embedder, memory.sparse)
    pool, row = list(stages.POOL_STAGES), list(stages.ROW_STAGES)
    try:
        for module_name, attr, label, _ in _STEPS:
            if not module_name:
                continue  # a model method: wrapped through a proxy below
            module = importlib.import_module(module_name)
            if hasattr(module, attr):
                saved.append((module, attr, getattr(module, attr)))
                setattr(module, attr, _timed(getattr(module, attr), label, sink))
        stages.POOL_STAGES[:] = [_timed(f, f"  rank: stage {f.__name__}", sink) for f in pool]
        stages.ROW_STAGES[:] = [_timed(f, f"  rank: stage {f.__name__}", sink) for f in row]
        nested.update(f"  rank: stage {f.__name__}" for f in pool + row)
        if memory.embedder is not None:
            memory.embedder = _Proxy(
                memory.embedder, {"embed_query": "  worker thread: embed_query (dense model)"},
                sink)
        if memory.sparse is not None:
            memory.sparse = _Proxy(memory.sparse,
                                   {"encode_query": "  worker thread: SPLADE encode_query"},
                                   sink)
        memory._hit = _timed(type(memory)._hit, "build hits", sink)
        setattr(memory, write_name, _timed(getattr(memory, write_name),
                                           "after-read write (access counts, metrics)", sink))
        for i, q in enumerate(queries):
            f = memory.filters(tenant_id=q["tenant_id"],
                               user_id=q["user_id"] if user_scope else None)
            sink.clear()
            t0, c0 = time.perf_counter(), time.process_time()
            memory.query(q["text"], filters=f)
            total = ((time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000)
            if i < warmup:
                continue
            step = {k: (v[0], v[1]) for k, v in sink.items()}
            top = [v for k, v in step.items() if k not in nested]
            step[OTHER] = (total[0] - sum(v[0] for v in top), total[1] - sum(v[1] for v in top))
            step["total"] = total
            for k, v in step.items():
                parts.setdefault(k, []).append(v)
    finally:
        for module, attr, fn in saved:
            setattr(module, attr, fn)
        stages.POOL_STAGES[:] = pool
        stages.ROW_STAGES[:] = row
        memory.embedder, memory.sparse = models
        del memory._hit
        delattr(memory, write_name)
    order = [label for *_, label, _ in _STEPS]
    at = order.index("  rank: session_neighbours SQL (in neighbours)")
    order[at:at] = [f"  rank: stage {f.__name__}" for f in pool + row]
    order += ["build hits", "after-read write (access counts, metrics)",
              OTHER, "total"]
    out: dict[str, dict[str, float]] = {}
    n = len(queries) - warmup
    for label in [x for x in order if x in parts] + [x for x in parts if x not in order]:
        walls = [w for w, _ in parts[label]] + [0.0] * (n - len(parts[label]))
        cpus = [c for _, c in parts[label]] + [0.0] * (n - len(parts[label]))
        out[label] = {**summary(walls), "cpu_p50": pct(cpus, 50), "cpu_p95": pct(cpus, 95),
                      "calls": len(parts[label])}
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
        for legs_name, legs in (("all legs", default_legs()), ("FTS-only", FTS_ONLY)):
            for scope_name, user_scope in (("tenant+user", True), ("tenant only", False)):
                log(f"  {path.name}: breakdown, {legs_name}, {scope_name}")
                out[f"breakdown | {legs_name} | {scope_name}"] = query_breakdown(
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


