"""Background indexing through `memcli serve`: acknowledged ingest, and queries while it drains.

    python -m bench.background            # 10k-memory database, the default models, 10k events
    python -m bench.background --quick    # CI smoke: 1k hash database, 2k events, few queries

What it measures, how, and the results: bench/README.md, "Background indexing".
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

from bench.perf_data import CACHE_DIR, generate_events, generate_queries, loadavg, pct, users
from bench.perf_ingest import build_embedded_db
from bench.service_support import Daemon, cli_env, process_ms

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "bench" / "results" / "background.md"
ACK_TARGET = 2000.0  # events per second, acknowledged through the daemon
QUERY_TARGET = (100.0, 150.0)  # p50, p95 ms through the daemon (bench/service.py's)
BATCH = 1000  # events per ingest command


def log(msg: str) -> None:
    print(f"[background {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def source_db(quick: bool, given: Path | None) -> Path:
    if given is not None:
        return given
    if quick:
        path = CACHE_DIR / "background-quick-source.db"
        build_embedded_db(path, generate_events(1000), "hash", False, rebuild=False)
        return path
    path = CACHE_DIR / "perf-10000-e5-small-splade.db"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `python -m bench.perf` first, or --source")
    return path


def copy_db(source: Path, folder: Path, name: str) -> Path:
    path = folder / name
    shutil.copyfile(source, path)
    return path


def event_files(folder: Path, count: int) -> list[Path]:
    """New events (a seed the source database was not built with), BATCH per NDJSON file."""
    events = generate_events(count, seed=99)
    files = []
    for start in range(0, count, BATCH):
        path = folder / f"events-{start:06d}.jsonl"
        path.write_text("".join(json.dumps({**e, "event_id": f"bg-{start + i}",
                                            "session_id": f"bg-{e['session_id']}"}) + "\n"
                                for i, e in enumerate(events[start:start + BATCH])),
                        encoding="utf-8")
        files.append(path)
    return files


def children_cpu(pid: int) -> float:
    """CPU seconds of `pid`'s reaped children (a daemon's command processes), from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def ingest_rate(db: Path, files: list[Path], env: dict[str, str], daemon: int | None
                ) -> dict[str, float]:
    """Events per second over the ingest processes' wall time and over their CPU time (the
    client's, and the command processes' of `daemon` when given): on a busy machine the wall
    time is mostly waiting for a core."""
    py = sys.executable
    wall_s = cpu_s = 0.0
    count = 0
    for path in files:
        argv = [py, "-m", "memcli", *([] if daemon else ["--no-daemon"]), "ingest",
                str(path), "--db", str(db), "--json"]
        before = children_cpu(daemon) if daemon else 0.0
        wall, cpu, out = process_ms(argv, env, None)
        time.sleep(0.2)  # the daemon reaps the command (its CPU then counts as its child's)
        report = json.loads(out)
        if report["rejected"] or len(report["created"]) != BATCH:
            raise SystemExit(f"ingest of {path.name}: {out[:300]}")
        wall_s += wall / 1000
        cpu_s += cpu / 1000 + (children_cpu(daemon) - before if daemon else 0.0)
        count += BATCH
    return {"rate": count / wall_s, "seconds": wall_s, "cpu_rate": count / cpu_s,
            "cpu_seconds": cpu_s}


def query_round(db: Path, queries: list[dict], env: dict[str, str]) -> list[float]:
    out = []
    for q in queries:
        argv = [sys.executable, "-m", "memcli", "query", q["text"], "--db", str(db),
                "--tenant-id", q["tenant_id"], "--user-id", q["user_id"], "--json"]
        wall, _cpu, stdout = process_ms(argv, env, None)
        if not isinstance(json.loads(stdout), list):
            raise SystemExit(f"query: not its JSON output: {stdout[:300]}")
        out.append(wall)
    return out


def measure(source: Path, events: int, queries: int, env: dict[str, str], folder: Path
            ) -> dict[str, Any]:
    py = sys.executable
    files = event_files(folder, events)
    floor = [process_ms([py, "-c", "pass"], env, None)[0] for _ in range(10)]
    inline_db = copy_db(source, folder, "inline.db")
    log(f"in-process ingest of {events:,} events")
    inline = ingest_rate(inline_db, files, env, None)
    served_db = copy_db(source, folder, "served.db")
    asked = generate_queries(queries, users(), seed=7)
    with Daemon(served_db, env) as daemon:
        daemon.wait_ready()
        query_round(served_db, asked[:3], env)  # the daemon's first calls
        log(f"acknowledged ingest of {events:,} events through the daemon")
        ack = ingest_rate(served_db, files, env, daemon.proc.pid)
        after_ack = time.monotonic()
        start = daemon.status()["backlog"]
        during: list[float] = []
        samples = [(0.0, start["waiting"])]
        while True:  # queries while the queue drains, the backlog sampled between rounds
            during += query_round(served_db, asked[:5], env)
            state = daemon.status()["backlog"]
            samples.append((round(time.monotonic() - after_ack, 1), state["waiting"]))
            if not state["waiting"] or len(during) >= queries * 4:
                break
        drained = state["waiting"] == 0
        while state["waiting"]:  # let it finish, for the drain time and the idle queries
            time.sleep(0.5)
            state = daemon.status()["backlog"]
        drain_s = time.monotonic() - after_ack
        idle = query_round(served_db, asked, env)
        indexer = state["indexer"]
    return {
        "events": events, "floor_p50": pct(floor, 50),
        "inline": inline, "ack": ack,
        "backlog_after_ack": start["waiting"], "drain_s": drain_s,
        "drain_rate": (start["waiting"] or 0) / drain_s if drain_s else None,
        "indexer": indexer, "samples": samples, "drained_while_querying": drained,
        "during": {"n": len(during), "p50": pct(during, 50), "p95": pct(during, 95)},
        "idle": {"n": len(idle), "p50": pct(idle, 50), "p95": pct(idle, 95)},
    }


def render(r: dict[str, Any], quick: bool, source: str) -> str:
    base = r["floor_p50"]
    p50_t, p95_t = QUERY_TARGET

    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    lines = [
        "# Background indexing through `memcli serve`", "",
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores"
        f"{' (quick smoke)' if quick else ''}, database {source}; load average before/after: "
        f"{r['load_before']} / {r['load_after']}. Regenerate: `python -m bench.background"
        f"{' --quick' if quick else ''}`.", "",
        f"`python -c pass` p50: {base:.1f} ms.", "",
        "| ingest of new events, processes of 1,000 events | events/s (wall) | s | "
        "events per CPU s | CPU s | target |",
        "|---|---|---|---|---|---|",
        f"| in-process (`--no-daemon`: vectors before the write) | {r['inline']['rate']:,.0f} | "
        f"{r['inline']['seconds']:.1f} | {r['inline']['cpu_rate']:,.0f} | "
        f"{r['inline']['cpu_seconds']:.1f} | |",
        f"| acknowledged through `memcli serve` (vectors later) | {r['ack']['rate']:,.0f} | "
        f"{r['ack']['seconds']:.1f} | {r['ack']['cpu_rate']:,.0f} | "
        f"{r['ack']['cpu_seconds']:.1f} | >= {ACK_TARGET:,.0f} "
        f"{verdict(r['ack']['rate'] >= ACK_TARGET)} |",
        "", f"Acknowledged / in-process: {r['ack']['rate'] / r['inline']['rate']:.1f}x. "
        f"Backlog after the last acknowledgement: {r['backlog_after_ack']:,} memories, drained "
        f"in {r['drain_s']:.1f} s ({r['drain_rate'] or 0:,.0f} memories/s from then; the "
        f"indexer's own figure: {(r['indexer'] or {}).get('drain_per_s')} memories/s).", "",
        "| `memcli query` through the daemon | n | p50 ms | p95 ms | p50 / `python -c pass` "
        "| target |", "|---|---|---|---|---|---|"]
    for label, key in (("while the queue drains", "during"), ("once drained", "idle")):
        row = r[key]
        ok = row["p50"] <= p50_t and row["p95"] <= p95_t
        lines.append(f"| {label} | {row['n']} | {row['p50']:.1f} | {row['p95']:.1f} | "
                     f"{row['p50'] / base:.1f}x | p50 <= {p50_t:.0f}, p95 <= {p95_t:.0f} "
                     f"{verdict(ok)} |")
    lines += ["", "Backlog (memories waiting) by seconds after the last acknowledgement: "
              + ", ".join(f"{t:g} s: {w}" for t, w in r["samples"]) + ".", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1k hash database, 2k events, no file")
    ap.add_argument("--events", type=int, default=None, help="events to ingest (10000)")
    ap.add_argument("--queries", type=int, default=None, help="queries per round (20)")
    ap.add_argument("--source", type=Path, default=None, help="the database to copy")
    args = ap.parse_args(argv)
    events = args.events or (2000 if args.quick else 10000)
    queries = args.queries or (5 if args.quick else 20)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    source = source_db(args.quick, args.source)
    results: dict[str, Any] = {"load_before": loadavg()}
    with tempfile.TemporaryDirectory(prefix="memcli-bench-") as tmp:
        env = cli_env(Path(tmp), hash_embedder=args.quick)
        if args.quick:  # the hash embedder alone: no SPLADE
            config = Path(tmp) / "config.yaml"
            config.write_text("retrieval: {leg_weights: {sparse: 0}}\n", encoding="utf-8")
            env["MEMCLI_CONFIG"] = str(config)
        results.update(measure(source, events, queries, env, Path(tmp)))
    results["load_after"] = loadavg()
    text = render(results, args.quick, source.name)
    print(text)
    if not args.quick:
        RESULTS.write_text(text, encoding="utf-8")
        RESULTS.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n",
                                                encoding="utf-8")
    return 0  # a target missed is said in the table (a busy machine misses wall-time ones)


if __name__ == "__main__":
    raise SystemExit(main())
