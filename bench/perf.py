"""Speed benchmark for the memcli foundation: ingest, query, CLI start-up, database size.

    python -m bench.perf                 # full: 10k (e5-small) + 100k databases, the real numbers
    python -m bench.perf --quick         # 1k memories, hash embedder, < 60 s: a CI smoke test
    python -m bench.perf --rebuild       # ignore cached databases under bench/.cache/

What it measures, how, and the results: bench/README.md, "Speed of the foundation".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.perf_cli import cli_benches, db_size, time_process
from bench.perf_data import (
    CACHE_DIR,
    REPO_ROOT,
    RESULTS,
    generate_events,
    generate_queries,
    loadavg,
    log,
    pct,
    python_pass_ms,
    summary,
    users,
)
from bench.perf_ingest import (
    batches,
    build_embedded_db,
    build_large_db,
    checkpoint,
    defer_ingest,
    model_ingest_sample,
    model_speed,
    query_models,
    query_models_child,
    remove_db,
)
from bench.perf_query import page_cache_warm, query_benches_in_child, run_query_benches
from bench.perf_report import render

# What the other bench scripts take from `perf` (pg_scale*, acb, service*).
__all__ = ["CACHE_DIR", "batches", "build_embedded_db",
           "checkpoint", "generate_events", "generate_queries", "loadavg", "main",
           "page_cache_warm", "pct", "python_pass_ms", "summary", "time_process", "users"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="1k memories, hash embedder, no SPLADE, few queries (< 60 s)")
    ap.add_argument("--embedder", default=None, help="default: e5-small (full), hash (quick)")
    ap.add_argument("--no-sparse", action="store_true",
                    help="leave out the SPLADE sparse leg (default: on in full mode)")
    ap.add_argument("--sizes", default=None, help="comma-separated database sizes")
    ap.add_argument("--queries", type=int, default=None, help="measured queries per pass")
    ap.add_argument("--cli-runs", type=int, default=None, help="measured CLI runs")
    ap.add_argument("--model-sample", type=int, default=None,
                    help="texts for each model's own speed")
    ap.add_argument("--rebuild", action="store_true", help="ignore cached databases")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"markdown results (default {RESULTS.relative_to(REPO_ROOT)}; "
                    "quick mode writes a file only when given)")
    ap.add_argument("--ingest-sample", type=int, default=None,
                    help="events for the fresh with-models ingest measurement (default 1000)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--spec", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child == "query-benches":
        spec = json.loads(Path(args.spec).read_text())
        out = run_query_benches(Path(spec["db"]), args.embedder or "e5-small",
                                not args.no_sparse, spec["queries"], spec["warmup"])
        print(json.dumps(out))
        return 0
    if args.child == "query-models":
        query_models_child(args.embedder or "e5-small", not args.no_sparse, args.queries or 60)
        return 0

    quick = args.quick
    embedder_name = args.embedder or ("hash" if quick else "e5-small")
    use_sparse = not (quick or args.no_sparse)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else (
        [1000] if quick else [10_000, 100_000])
    n_queries = args.queries or (30 if quick else 200)
    warmup = 5 if quick else 10
    cli_runs = args.cli_runs or (5 if quick else 15)
    sample = args.model_sample or 500
    out_path = args.out or (None if quick else RESULTS)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tag = f"{'quick-' if quick else ''}{embedder_name}{'-splade' if use_sparse else ''}"

    import apsw

    res: dict[str, Any] = {
        "mode": "quick" if quick else "full", "embedder": embedder_name, "sparse": use_sparse,
        "sizes": sizes, "n_queries": n_queries, "warmup": warmup,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "load_before": loadavg(),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python "
                   f"{platform.python_version()}, SQLite {apsw.sqlite_lib_version()}",
        "ingest": {}, "query": {}, "size": {},
    }
    started = time.perf_counter()
    all_events = generate_events(sizes[-1] + 520)
    small = sizes[0]
    small_events = all_events[:small]
    scopes = sorted({(e["tenant_id"], e["user_id"]) for e in small_events})
    queries = generate_queries(n_queries + warmup, scopes)
    log(f"mode {res['mode']}, embedder {embedder_name}, sparse {use_sparse}, sizes {sizes}, "
        f"{len(queries)} queries, load {res['load_before']}")

    # 1. ingest
    small_db = CACHE_DIR / f"perf-{small}-{tag}.db"
    res["ingest"]["embedded"] = build_embedded_db(small_db, small_events, embedder_name,
                                                  use_sparse, args.rebuild)
    log(f"ingest with models: {res['ingest']['embedded']['events_per_s']:.1f} events/s")
    res["ingest"]["model_speed"] = model_speed(
        embedder_name, use_sparse, [e["content"]["text"] for e in small_events[:sample]])
    n_sample = args.ingest_sample or (500 if quick else 1000)
    res["ingest"]["sample"] = model_ingest_sample(
        CACHE_DIR / f"perf-sample-{tag}.db", all_events[-520 - n_sample : -520], embedder_name,
        use_sparse)
    log(f"ingest sample with models: {res['ingest']['sample']['events_per_s']:.1f} events/s")
    if use_sparse:
        # The sparse leg's own ingest cost (#6: >= 100 turns/s with it): the same sample with
        # SPLADE and no dense leg.
        res["ingest"]["sample_sparse_only"] = model_ingest_sample(
            CACHE_DIR / f"perf-sample-{tag}.db", all_events[-520 - n_sample : -520], "none",
            True)
        log("ingest sample, SPLADE and no dense leg: "
            f"{res['ingest']['sample_sparse_only']['events_per_s']:.1f} events/s")
    res["query_models"] = query_models(embedder_name, use_sparse)
    scratch = CACHE_DIR / f"perf-scratch-{tag}.db"
    res["ingest"]["defer"] = defer_ingest(scratch, small_events,
                                          all_events[sizes[-1] : sizes[-1] + 520],
                                          embedder_name, use_sparse)
    log(f"defer ingest: {res['ingest']['defer']['events_per_s']:.0f} events/s, single p95 "
        f"{res['ingest']['defer']['single_ms']['p95']:.2f} ms")
    remove_db(scratch)

    dbs = {small: small_db}
    for size in sizes[1:]:
        path = CACHE_DIR / f"perf-{size}-{tag}.db"
        res["ingest"]["large"] = build_large_db(path, all_events[:size], small_db,
                                                embedder_name, use_sparse, args.rebuild)
        dbs[size] = path

    # 2. query, 4. size
    for size, path in dbs.items():
        log(f"query latency on {path.name}")
        res["query"][str(size)] = query_benches_in_child(path, embedder_name, use_sparse,
                                                         queries, warmup)
        res["size"][str(size)] = db_size(path)

    # 3. CLI
    log("whole-process CLI runs")
    res["cli"] = cli_benches(small_db, embedder_name, queries, cli_runs,
                             warm=1 if quick else 2, import_runs=3 if quick else 5)


    res["load_after"] = loadavg()
    res["seconds"] = time.perf_counter() - started
    report = render(res)
    print(report)
    (CACHE_DIR / f"perf-results-{tag}.json").write_text(json.dumps(res, indent=1, default=str))
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(report)
        log(f"wrote {out_path}")
    log(f"done in {res['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
