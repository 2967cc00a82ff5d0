"""Whole-process latency of `memcli query` and `memcli acb build` through a running daemon.

    python bench/service.py               # 10k and 100k memories, the default models
    python bench/service.py --quick       # CI smoke: 1k memories, hash embedder, few runs
    python bench/service.py --sizes 10000 --runs 40

What an agent feels: a fresh `memcli` process per call, as a shell, a hook or a cron job runs
it. Three ways, measured in the same run and interleaved (one of each per round, so a busy
machine slows all three alike):

- `python -c pass`: the interpreter alone, the floor of any command;
- `memcli ... ` with `memcli serve` running for the database: the client forwards the command
  line, its environment and its stdio to the warm process;
- `memcli --no-daemon ...`: the in-process path (imports, settings, models, the database).

Targets (the issue's): through the daemon, query p50 <= 100 ms and p95 <= 150 ms at 100k, `acb
build` p50 <= 150 ms. Every run's stdout is checked (JSON with hits / a bundle).

Data: copies of bench/perf.py's databases (`perf-<size>-e5-small-splade.db`: the 10k one is
embedded for real with e5-small and SPLADE, the 100k one holds noisy copies of those vectors):
run `python bench/perf.py` first. `--quick` builds a 1k database with the hash embedder and no
SPLADE instead. The copies (`bench/.cache/service-<size>.db`) take the daemon's writes (access
counts, request metrics), so perf.py's cache stays as it was.

The load half (10 concurrent agents over HTTP and MCP) is `bench/service_load.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from perf import (  # noqa: E402
    CACHE_DIR,
    build_embedded_db,
    generate_events,
    generate_queries,
    loadavg,
    pct,
    users,
)
from service_support import Daemon, cli_env, process_ms  # noqa: E402

RESULTS = REPO_ROOT / "bench" / "results" / "service.md"
TARGETS = {"query": (100.0, 150.0), "acb build": (150.0, None)}


def log(msg: str) -> None:
    print(f"[service {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def database(size: int, quick: bool) -> Path:
    """A private copy of perf.py's database of this size (quick: a fresh 1k hash database)."""
    path = CACHE_DIR / f"service-{size}{'-quick' if quick else ''}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    if quick:
        events = generate_events(size)
        build_embedded_db(path, events, "hash", False, rebuild=True)
        return path
    source = CACHE_DIR / f"perf-{size}-e5-small-splade.db"
    if not source.exists():
        raise SystemExit(f"{source} is missing: run `python bench/perf.py` first")
    log(f"copying {source.name} to {path.name}")
    shutil.copyfile(source, path)
    return path


def commands(path: Path, queries: list[dict]) -> list[tuple[str, list[str], str | None]]:
    """(label, argv after `memcli`, stdin) for one round, cycling through the queries."""
    out = []
    for q in queries:
        scope = ["--db", str(path), "--tenant", q["tenant_id"], "--user", q["user_id"]]
        request = {"tenant_id": q["tenant_id"], "user_id": q["user_id"],
                   "session_id": f"bench-{q['user_id']}", "query_text": q["text"]}
        out.append(("query", ["query", q["text"], *scope, "--json"], None))
        out.append(("acb build", ["acb", "build", "-", "--db", str(path), "--json"],
                    json.dumps(request)))
    return out


def check(label: str, stdout: str) -> None:
    payload = json.loads(stdout)
    ok = isinstance(payload, list) if label == "query" else "sections" in payload
    if not ok:
        raise SystemExit(f"{label}: not its JSON output: {stdout[:300]}")


def measure(path: Path, queries: list[dict], runs: int, env: dict[str, str]) -> dict[str, Any]:
    py = sys.executable
    rows: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    work = commands(path, queries)
    with Daemon(path, env) as daemon:
        daemon.wait_ready()
        for i in range(runs + 2):  # two warm-up rounds (page cache, the daemon's first calls)
            for label, args, stdin in work[2 * (i % len(queries)): 2 * (i % len(queries)) + 2]:
                ways = (("daemon", [py, "-m", "memcli", *args]),
                        ("in-process", [py, "-m", "memcli", "--no-daemon", *args]))
                for way, argv in ways:
                    wall, cpu_ms, out = process_ms(argv, env, stdin)
                    check(label, out)
                    if i >= 2:
                        rows.setdefault(f"{label} | {way}", []).append(wall)
                        cpu.setdefault(f"{label} | {way}", []).append(cpu_ms)
            wall, cpu_ms, _ = process_ms([py, "-c", "pass"], env, None)
            if i >= 2:
                rows.setdefault("python -c pass", []).append(wall)
                cpu.setdefault("python -c pass", []).append(cpu_ms)
        served = daemon.requests_served()
    out = {k: {"n": len(v), "p50": pct(v, 50), "p95": pct(v, 95), "cpu_p50": pct(cpu[k], 50)}
           for k, v in rows.items()}
    out["_served"] = served
    return out


def render(results: dict[str, Any], quick: bool) -> str:
    lines = ["# memcli through `memcli serve`: whole-process latency", "",
             f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores"
             f"{' (quick smoke)' if quick else ''}; load average before/after: "
             f"{results['load_before']} / {results['load_after']}.", "",
             "Wall ms per process (p50 / p95), child CPU ms p50, and the ratio of p50 to "
             "`python -c pass` in the same run.", ""]
    for size, rows in results["sizes"].items():
        base = rows["python -c pass"]["p50"]
        lines += [f"## {int(size):,} memories ({rows['_served']} requests answered by the daemon)",
                  "", "| process | p50 | p95 | CPU p50 | p50 / `python -c pass` | target |",
                  "|---|---|---|---|---|---|"]
        for key, row in rows.items():
            if key.startswith("_"):
                continue
            label = key.split(" | ")[0]
            target = ""
            if key.endswith("| daemon") and label in TARGETS:
                p50_t, p95_t = TARGETS[label]
                ok = row["p50"] <= p50_t and (p95_t is None or row["p95"] <= p95_t)
                target = f"p50 <= {p50_t:.0f}" + (f", p95 <= {p95_t:.0f}" if p95_t else "")
                target += " ok" if ok else " MISSED"
            lines.append(f"| {key} | {row['p50']:.1f} | {row['p95']:.1f} | {row['cpu_p50']:.1f} "
                         f"| {row['p50'] / base:.1f}x | {target} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1k hash database, 4 runs, no file")
    ap.add_argument("--sizes", default=None, help="comma-separated sizes (default 10000,100000)")
    ap.add_argument("--runs", type=int, default=None, help="measured rounds per size (30)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("1000" if args.quick else "10000,100000")).split(",")]
    runs = args.runs or (4 if args.quick else 30)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"load_before": loadavg(), "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="memcli-bench-") as tmp:
        env = cli_env(Path(tmp), hash_embedder=args.quick)
        for size in sizes:
            path = database(size, args.quick)
            queries = generate_queries(max(runs, 10), users(), seed=7)
            log(f"{size:,} memories: {runs} rounds")
            results["sizes"][str(size)] = measure(path, queries, runs, env)
    results["load_after"] = loadavg()
    text = render(results, args.quick)
    print(text)
    if not args.quick:
        RESULTS.write_text(text + "\n")
        RESULTS.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
