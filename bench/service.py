"""Whole-process latency of `memcli query` and `memcli acb build` through a running daemon.

    python -m bench.service               # 10k and 100k memories, the default models
    python -m bench.service --quick       # CI smoke: 1k memories, hash embedder, few runs
    python -m bench.service --sizes 10000 --runs 40

What it measures, how, and the results: bench/README.md, "The service".
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.perf_data import CACHE_DIR, generate_events, generate_queries, loadavg, pct, users
from bench.perf_ingest import build_embedded_db
from bench.service_support import (
    Daemon,
    auto_env,
    cli_env,
    process_ms,
    stop_auto_started,
)
from memcli.service.daemon import paths
from tests.support.sockets import answers

REPO_ROOT = Path(__file__).resolve().parents[1]

RESULTS = REPO_ROOT / "bench" / "results" / "service.md"
TARGETS = {"query": (100.0, 150.0), "acb build": (150.0, None)}
# p50 over `python -c pass`'s p50 in the same run, through a warm daemon (at 10k memories).
RATIO_TARGETS = {"query": 4.0, "acb build": 5.0}
FIRST_TARGET = 1.3  # the first command's p50 over the in-process p50
FIRST = "first (starts the daemon)"
READY = "until its daemon answers"
LATER = "next, through it"


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
        raise SystemExit(f"{source} is missing: run `python -m bench.perf` first")
    log(f"copying {source.name} to {path.name}")
    shutil.copyfile(source, path)
    return path


def commands(path: Path, queries: list[dict]) -> list[tuple[str, list[str], str | None]]:
    """(label, argv after `memcli`, stdin) for one round, cycling through the queries."""
    out = []
    for q in queries:
        scope = ["--db", str(path), "--tenant-id", q["tenant_id"], "--user-id", q["user_id"]]
        request = {"tenant_id": q["tenant_id"], "user_id": q["user_id"],
                   "session_id": f"bench-{q['user_id']}", "query": q["text"]}
        out.append(("query", ["query", q["text"], *scope, "--json"], None))
        out.append(("acb build", ["acb", "build", "-", "--db", str(path), "--json"],
                    json.dumps(request)))
    return out


def check(label: str, stdout: str) -> None:
    payload = json.loads(stdout)
    ok = isinstance(payload, list) if label == "query" else "sections" in payload
    if not ok:
        raise SystemExit(f"{label}: not its JSON output: {stdout[:300]}")


def measure(path: Path, queries: list[dict], runs: int, env: dict[str, str],
            first_runs: int = 0) -> dict[str, Any]:
    py = sys.executable
    rows: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    work = commands(path, queries)
    with Daemon(path, env) as daemon:
        daemon.wait_ready()
        for i in range(runs + 2):  # two warm-up rounds (page cache, the daemon's first calls)
            for label, args, stdin in work[2 * (i % len(queries)): 2 * (i % len(queries)) + 2]:
                ways = [("daemon", [py, "-m", "memcli", *args], env),
                        ("in-process", [py, "-m", "memcli", "--no-daemon", *args], env)]
                for way, argv, way_env in ways:
                    wall, cpu_ms, out = process_ms(argv, way_env, stdin)
                    check(label, out)
                    if i >= 2:
                        rows.setdefault(f"{label} | {way}", []).append(wall)
                        cpu.setdefault(f"{label} | {way}", []).append(cpu_ms)
            wall, cpu_ms, _ = process_ms([py, "-c", "pass"], env, None)
            if i >= 2:
                rows.setdefault("python -c pass", []).append(wall)
                cpu.setdefault("python -c pass", []).append(cpu_ms)
        served = daemon.status()["requests"]
    if first_runs:
        first_commands(path, work, first_runs, env, rows, cpu)
    out = {k: {"n": len(v), "p50": pct(v, 50), "p95": pct(v, 95),
               "cpu_p50": pct(cpu.get(k) or [0.0], 50)} for k, v in rows.items()}
    out["_served"] = served
    return out


def first_commands(path: Path, work: list[tuple[str, list[str], str | None]], runs: int,
                   env: dict[str, str], rows: dict[str, list[float]],
                   cpu: dict[str, list[float]]) -> None:
    """Warm by default, `runs` rounds of each command: in a runtime folder where no daemon
    runs, the first command (it starts one and answers in-process), the time from its start
    until that daemon answers a command (`serve status`), and the two commands after it
    (through the daemon); then the daemon is stopped. The in-process and `python -c pass`
    processes of the same minutes are measured beside them (the ratios' denominators)."""
    py = sys.executable
    base = Path(env["XDG_RUNTIME_DIR"]).parent
    for i in range(runs):
        for label, args, stdin in work[2 * (i % (len(work) // 2)):][:2]:
            run_dir = base / f"auto-{i}-{label.replace(' ', '-')}"
            first_env = auto_env(env, run_dir)
            ep = paths.endpoint(str(path), first_env)
            t0 = time.perf_counter()
            try:
                wall, cpu_ms, out = process_ms([py, "-m", "memcli", *args], first_env, stdin)
                check(label, out)
                rows.setdefault(f"{label} | {FIRST}", []).append(wall)
                cpu.setdefault(f"{label} | {FIRST}", []).append(cpu_ms)
                deadline = time.monotonic() + 120
                while not answers(ep.socket):
                    if time.monotonic() > deadline:
                        raise SystemExit(f"no auto-started daemon: {Path(ep.log).read_text()}")
                    time.sleep(0.01)
                # Bound before the warm-up: a command sent now waits for it, and returns once
                # the daemon answers commands.
                _, _, out = process_ms([py, "-m", "memcli", "serve", "status", "--db",
                                        str(path)], first_env, None)
                if '"auto_started": true' not in out:
                    raise SystemExit(f"serve status not from the auto-started daemon: {out}")
                rows.setdefault(f"{label} | {READY}", []).append(
                    (time.perf_counter() - t0) * 1000)
                for _ in range(2):
                    wall, cpu_ms, out = process_ms([py, "-m", "memcli", *args], first_env, stdin)
                    check(label, out)
                    rows.setdefault(f"{label} | {LATER}", []).append(wall)
                    cpu.setdefault(f"{label} | {LATER}", []).append(cpu_ms)
            finally:
                stop_auto_started(Path(ep.pid))
            wall, cpu_ms, out = process_ms([py, "-m", "memcli", "--no-daemon", *args], env, stdin)
            rows.setdefault(f"{label} | in-process", []).append(wall)
            cpu.setdefault(f"{label} | in-process", []).append(cpu_ms)
        wall, cpu_ms, _ = process_ms([py, "-c", "pass"], env, None)
        rows.setdefault("python -c pass", []).append(wall)
        cpu.setdefault("python -c pass", []).append(cpu_ms)


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
                ratio = row["p50"] / base <= RATIO_TARGETS[label]
                target = (f"p50 <= {p50_t:.0f}" + (f", p95 <= {p95_t:.0f}" if p95_t else "")
                          + (" ok" if ok else " MISSED")
                          + f"; <= {RATIO_TARGETS[label]:g}x" + (" ok" if ratio else " MISSED"))
            if key.endswith(f"| {FIRST}"):
                local = rows[f"{label} | in-process"]["p50"]
                target = (f"{row['p50'] / local:.2f}x in-process p50 (<= {FIRST_TARGET:g}x"
                          + (" ok)" if row["p50"] <= FIRST_TARGET * local else " MISSED)"))
            lines.append(f"| {key} | {row['p50']:.1f} | {row['p95']:.1f} | {row['cpu_p50']:.1f} "
                         f"| {row['p50'] / base:.1f}x | {target} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1k hash database, 4 runs, no file")
    ap.add_argument("--sizes", default=None, help="comma-separated sizes (default 10000,100000)")
    ap.add_argument("--runs", type=int, default=None, help="measured rounds per size (30)")
    ap.add_argument("--first-runs", type=int, default=None, help="rounds of the first "
                    "command with no daemon running (warm by default; 10, quick: 1)")
    args = ap.parse_args(argv)
    # What an installed memcli has: current bytecode (a shell with PYTHONDONTWRITEBYTECODE set
    # would otherwise have every process compile the modules changed since the last write).
    compileall.compile_dir(REPO_ROOT / "memcli", quiet=1)
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
            first = args.first_runs if args.first_runs is not None else (1 if args.quick
                                                                          else 10)
            results["sizes"][str(size)] = measure(path, queries, runs, env, first)
    results["load_after"] = loadavg()
    text = render(results, args.quick)
    print(text)
    if not args.quick:
        RESULTS.write_text(text + "\n")
        RESULTS.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
