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
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.perf_data import (
    BATCH,
    CACHE_DIR,
    CLI_FTS_LEGS,
    FTS_ONLY,
    REPO_ROOT,
    RESULTS,
    generate_events,
    generate_queries,
    loadavg,
    log,
)
from bench.perf_ingest import (
    build_embedded_db,
    build_large_db,
    defer_ingest,
    model_ingest_sample,
    model_speed,
    query_models,
    query_models_child,
    remove_db,
)
from bench.perf_query import (
    QUERY_ENV,
    REFERENCE_PROCESSES,
    cli_benches,
    db_size,
    query_benches_in_child,
    run_query_benches,
)


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


# ---------------------------------------------------------------- report (bench/results/perf.md)


def fmt(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def verdict(ok: bool) -> str:
    return "pass" if ok else "**miss**"


def render(res: dict[str, Any]) -> str:
    quick = res["mode"] == "quick"
    sizes = res["sizes"]
    small, large = sizes[0], sizes[-1]
    k = lambda n: f"{n // 1000}k"  # noqa: E731
    models = f"`{res['embedder']}`" + (" + SPLADE-tiny (the default sparse leg)"
                                       if res["sparse"] else " (no SPLADE sparse leg)")
    lines = [
        "# memcli performance" + (" (quick smoke run: not the real numbers)" if quick else ""),
        "",
        f"Measured {res['date']} with `python -m bench.perf{' --quick' if quick else ''}` on "
        f"{res['machine']}. Load average (1, 5, 15 min) before: {res['load_before']}, after: "
        f"{res['load_after']}. Other jobs shared this machine during the run whenever the "
        "load was above the core count: read latencies as upper bounds.",
        "",
        "Data: synthetic chat turns of 20-40 words (names, dates, @mentions, #tags, ~3 % "
        "Chinese), 40 users in 2 tenants, sessions of 8-40 turns, one memory per event. "
        f"Models: {models}. Ingest goes through `Memory.ingest` in batches of {BATCH}. "
        f"Queries: {res['n_queries']} varied queries per pass (names, places, projects, tags, "
        f"dates, long questions, ~4 % Chinese), after {res['warmup']} warm-up queries that are "
        "not counted; top 10, default ranking. Times in ms unless marked.",
    ]
    if len(sizes) > 1:
        lines += [
            "",
            f"The {k(large)} database was ingested with `defer_embed=True`; its vectors are the "
            f"{res['embedder']} vectors of the {k(small)} database (its first {k(small)} events "
            "are the same events), copied with small Gaussian noise (sigma 0.015 per dimension) "
            "and renormalised for the other memories, and written through "
            "`memcli.store.vectors.insert_vectors`"
            + (" (SPLADE postings copied the same way, through `insert_postings`)"
               if res["sparse"] else "")
            + ". KNN cost depends on how many vectors there are, not on what they mean.",
        ]

    ing = res["ingest"]
    emb, defer, speed = ing["embedded"], ing["defer"], ing["model_speed"]
    alone = [f"{res['embedder']} alone {fmt(speed['embedder'])} texts/s"]
    if "sparse" in speed:
        alone.append(f"SPLADE alone {fmt(speed['sparse'])} texts/s")
    lines += ["", "## Targets", "",
              "Wall time is the measure. The CPU column is the process's own CPU time (all its "
              "threads), which other jobs on the machine do not inflate as much: read it as "
              "an estimate of an unloaded machine (for e5-small, which runs on both cores, "
              "CPU time overstates the wall time it would take).", "",
              "| target | measured (wall) | verdict | CPU-time estimate | verdict on CPU |",
              "|---|---|---|---|---|"]

    def target(name: str, wall: float, cpu: float, ok: Callable[[float], bool],
               unit: str, digits: int = 1) -> None:
        lines.append(f"| {name} | {fmt(wall, digits)} {unit} | {verdict(ok(wall))} | "
                     f"{fmt(cpu, digits)} {unit} | {verdict(ok(cpu))} |")

    sample = ing["sample"]
    target(f"ingest with the default models >= 100 events/s ({sample['events']:,} events)",
           sample["events_per_s"], sample["events"] / sample["cpu_seconds"],
           lambda v: v >= 100, "events/s")
    sparse_only = ing.get("sample_sparse_only")
    if sparse_only:
        target(f"ingest with the sparse leg (SPLADE, dense leg off) >= 100 events/s "
               f"({sparse_only['events']:,} events)", sparse_only["events_per_s"],
               sparse_only["events"] / sparse_only["cpu_seconds"], lambda v: v >= 100,
               "events/s")
    target(f"ingest `defer_embed=True`, batches of {BATCH}, >= 2,000 events/s",
           defer["events_per_s"], defer["events"] / defer["cpu_seconds"], lambda v: v >= 2000,
           "events/s", 0)
    target("`Memory.ingest([record])` p95 <= 50 ms", defer["single_ms"]["p95"],
           defer["single_cpu_ms"]["p95"], lambda v: v <= 50, "ms", 2)
    q = res["query"][str(large)]
    for key in ("all legs | tenant+user", "all legs | tenant only",
                "FTS-only | tenant+user", "FTS-only | tenant only"):
        target(f"library query p95 <= 20 ms at {k(large)} ({key})", q[key]["p95"],
               q[key]["cpu_p95"], lambda v: v <= 20, "ms")
    cli = res["cli"]
    target("`memcli query` p50 <= 400 ms with the embedder", cli["with embedder"]["p50"],
           cli["with embedder"]["cpu_p50"], lambda v: v <= 400, "ms", 0)
    target(f"`memcli query --legs {CLI_FTS_LEGS}` p50 <= 200 ms", cli["FTS-only"]["p50"],
           cli["FTS-only"]["cpu_p50"], lambda v: v <= 200, "ms", 0)
    lines.append("")
    lines.append(f"Ingest with the models: {'; '.join(alone)}.")

    lines += ["", "## 1. Ingest", "",
              "Wall time is the measure; CPU is this process's CPU time (all its threads), "
              "a hint of the cost without the other jobs on the machine.", "",
              "| what | count | wall | CPU | throughput |", "|---|---|---|---|---|"]
    cached = (f" (measured when the cached database was built, {emb['built_at']}, load "
              f"{emb.get('load', '?')})" if emb.get("cached") else "")
    lines.append(f"| `Memory.ingest`, {models}, this run | {sample['events']:,} events | "
                 f"{fmt(sample['seconds'])} s | {fmt(sample['cpu_seconds'])} s | "
                 f"{fmt(sample['events_per_s'])} events/s |")
    if sparse_only:
        lines.append(f"| `Memory.ingest`, SPLADE-tiny and no dense leg, this run | "
                     f"{sparse_only['events']:,} events | {fmt(sparse_only['seconds'])} s | "
                     f"{fmt(sparse_only['cpu_seconds'])} s | "
                     f"{fmt(sparse_only['events_per_s'])} events/s |")
    lines.append(f"| `Memory.ingest`, {models}, the {k(small)} query database{cached} | "
                 f"{emb['events']:,} events | {fmt(emb['seconds'])} s | "
                 f"{fmt(emb.get('cpu_seconds', float('nan')))} s | "
                 f"{fmt(emb['events_per_s'])} events/s |")
    for key, name, call in (("embedder", res["embedder"], "embed_documents"),
                            ("sparse", "SPLADE-tiny", "encode_documents")):
        if key in speed:
            lines.append(f"| {name} alone, `{call}` in calls of {BATCH} | "
                         f"{speed['texts']:,} texts | {fmt(speed['texts'] / speed[key])} s | "
                         f"{fmt(speed[key + '_cpu_seconds'])} s | {fmt(speed[key])} texts/s |")
    lines.append(f"| `Memory.ingest(defer_embed=True)` | {defer['events']:,} events | "
                 f"{fmt(defer['seconds'], 2)} s | {fmt(defer['cpu_seconds'], 2)} s | "
                 f"{fmt(defer['events_per_s'], 0)} events/s |")
    if "large" in ing:
        lg = ing["large"]
        cached = " (cached build)" if lg.get("cached") else ""
        lines.append(f"| `Memory.ingest(defer_embed=True)` into the {k(large)} database"
                     f"{cached} | {lg['events']:,} events | {fmt(lg['seconds'], 1)} s | "
                     f"{fmt(lg.get('cpu_seconds', float('nan')), 1)} s | "
                     f"{fmt(lg['events_per_s'], 0)} events/s |")
    s, c = defer["single_ms"], defer["single_cpu_ms"]
    lines += ["", f"One event per `Memory.ingest([record])` call with `defer_embed=True`, into "
              f"the {k(small)} database ({s['n']} calls after 20 warm-up): p50 "
              f"{fmt(s['p50'], 2)} ms, p95 {fmt(s['p95'], 2)} ms, mean {fmt(s['mean'], 2)} ms "
              f"(CPU p50 {fmt(c['p50'], 2)} ms, p95 {fmt(c['p95'], 2)} ms)."]
    per_event = {"everything but the models": 1000 / defer["events_per_s"],
                 f"{res['embedder']}": 1000 / speed["embedder"]}
    if "sparse" in speed:
        per_event["SPLADE"] = 1000 / speed["sparse"]
    predicted = sum(per_event.values())
    lines += ["", "Cost per event, from the rows above: " + ", ".join(
        f"{name} {fmt(ms, 2)} ms" for name, ms in per_event.items())
        + f"; sum {fmt(predicted, 1)} ms = {fmt(1000 / predicted)} events/s predicted, "
        f"{fmt(sample['events_per_s'])} measured in this run."]

    lines += ["", "## 2. Library query latency (`Memory.query`)", "",
              f"All legs = the defaults ({', '.join(q['legs'])}); FTS-only = "
              f"`leg_weights = {FTS_ONLY}`. The query-side models are inside the call (on "
              "its worker thread). These passes run in a fresh process with "
              f"{' '.join(f'{k}={v}' for k, v in QUERY_ENV.items())}, as `memcli` and "
              "`Memory.configured` set; CPU times count every thread.", "",
              "| database | legs | scope | p50 | p95 | mean | CPU p50 | CPU p95 |",
              "|---|---|---|---|---|---|---|---|"]
    for size in sizes:
        for key, val in res["query"][str(size)].items():
            if " | " not in key:
                continue
            legs, scope = key.split(" | ")
            lines.append(f"| {k(size)} | {legs} | {scope} | {fmt(val['p50'], 2)} | "
                         f"{fmt(val['p95'], 2)} | {fmt(val['mean'], 2)} | "
                         f"{fmt(val['cpu_p50'], 2)} | {fmt(val['cpu_p95'], 2)} |")
    lines += ["", "The query-side models alone, in a fresh process per row (the library leaves "
              "OpenMP's wait policy alone; `memcli`'s `main()` sets `OMP_WAIT_POLICY=PASSIVE`):",
              "", "| model call | OpenMP policy | p50 | p95 | CPU p50 |", "|---|---|---|---|---|"]
    for policy, calls in res["query_models"].items():
        for call, val in calls.items():
            name = {"embed_query": f"{res['embedder']} `embed_query`",
                    "encode_query": "SPLADE-tiny `encode_query`"}.get(call, call)
            lines.append(f"| {name} | {policy} | {fmt(val['p50'], 2)} | {fmt(val['p95'], 2)} | "
                         f"{fmt(val['cpu_p50'], 2)} |")
    lines.append("")
    for size in sizes:
        sc = res["query"][str(size)]["scope_sizes"]
        lines.append(f"{k(size)}: memories per tenant+user scope, min / median / max: "
                     f"{sc['min']:,} / {sc['median']:,} / {sc['max']:,}. ")
    lines.append("")
    for size in sizes:
        fts = res["query"][str(size)]["fts_matches"]
        lines.append(f"{k(size)}: rows matching a query's FTS expression (whole database, "
                     f"before filters): median {fts['p50']:,.0f}, p95 {fts['p95']:,.0f} "
                     f"({100 * fts['p50'] / res['query'][str(size)]['memories']:.0f} % of "
                     "the memories at the median). ")

    lines += ["", f"## 3. Whole process (`python -m memcli query ... --tenant --user --json`, "
              f"{k(small)} database)", "",
              f"A fresh interpreter per run; {cli['warm']} warm-up run(s) first (OS page "
              "cache). CPU = the child's user + system time.", "",
              "| command | runs | wall p50 | wall p95 | wall min | CPU p50 |",
              "|---|---|---|---|---|---|"]
    for label in ("with embedder", "FTS-only", *(label for label, _ in REFERENCE_PROCESSES)):
        val = cli[label]
        name = {"with embedder": f"`memcli query` (MEMCLI_EMBEDDER={res['embedder']}, "
                                 "default legs)",
                "FTS-only": f"`memcli query --legs {CLI_FTS_LEGS}`"}.get(label, f"`{label}`")
        lines.append(f"| {name} | {val['n']} | {fmt(val['p50'], 0)} | {fmt(val['p95'], 0)} | "
                     f"{fmt(val['min'], 0)} | {fmt(val['cpu_p50'], 0)} |")
    lines += ["", f"Top 10 cumulative imports of `python -X importtime -m memcli query ... "
              f"--legs {CLI_FTS_LEGS}` (each module's minimum over {cli['import_runs']} runs; "
              "depth 0 = a top-level "
              "import; cumulative includes the imports below it):", "",
              "| module | depth | cumulative ms | self ms |", "|---|---|---|---|"]
    for row in cli["importtime"]:
        lines.append(f"| `{row['module']}` | {row['depth']} | {fmt(row['cumulative_ms'])} | "
                     f"{fmt(row['self_ms'])} |")

    lines += ["", "The same runs, self time summed per top-level package (memcli per subpackage), "
              "top 10:", "", "| package | modules | self ms |", "|---|---|---|"]
    for row in cli["import_packages"]:
        lines.append(f"| `{row['package']}` | {row['modules']} | {fmt(row['self_ms'])} |")
    total_self = sum(r["self_ms"] for r in cli["import_packages"])
    lines.append(f"| (these 10) | | {fmt(total_self)} |")

    lines += ["", "## 4. Database size (after a WAL checkpoint)", "",
              "| database | memories | file bytes | bytes/memory | largest objects, bytes/memory |",
              "|---|---|---|---|---|"]
    for size in sizes:
        d = res["size"][str(size)]
        largest = ", ".join(f"{n} {b / d['memories']:,.0f}" for n, b in d["largest"][:8])
        lines.append(f"| {k(size)} | {d['memories']:,} | {d['bytes']:,} | "
                     f"{d['bytes_per_memory']:,.0f} | {largest} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
