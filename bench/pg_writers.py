"""Many writer processes on one PostgreSQL database.

    python -m bench.pg_writers            # 8 writers x 40 batches x 5 events per scenario
    python -m bench.pg_writers --quick    # CI: 8 writers x 4 batches, checks only

A throw-away PostgreSQL 18 (tests/support/pg.py). Each writer is its own process running the
library as an agent would (`Memory.configured()` from MEMCLI_DB=<URL>, the hash embedder, no
SPLADE: the database path is what is measured), ingesting small batches in a loop (one
transaction each, as one `memcli ingest` or one HTTP `POST /events` is). Scenarios, each on a
fresh database:

- `1 writer`: the same total events from one process (the sequential baseline);
- `8 writers, 8 tenants`: memcli's writer lock is one advisory lock per database, so their
  transactions queue even though no two touch the same tenant;
- `8 writers, 1 tenant`: the queue the store needs (design note (f));
- `8 writers, 8 databases`: no shared lock at all: the upper bound of what a per-tenant lock
  could give the 8-tenant case on this machine;
- `4 writers, same events`: every event exactly once (the others' copies are duplicates).

Every scenario checks its counts (exact, else exit 1). Reports events/s and the p50/p95 of one
batch's write (`Memory.ingest`) as its writer saw it. Results: bench/results/pg-writers.{md,json}
(not for --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.pg_bench_support import create_database, database_url, running_server

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "bench" / "results"
REAL = "tenant_id NOT LIKE 'warm-%'"  # each writer's warm-up event has a tenant of its own

# One writer process: start together (a file appears), then batches, then its timings.
WRITER = r"""
import json, os, sys, time
from memcli.operations.memory import Memory
tenant, prefix, go, ready = sys.argv[1], sys.argv[2], sys.argv[5], sys.argv[6]
batches, size = int(sys.argv[3]), int(sys.argv[4])
memory = Memory.configured()
# Warm: imports, the embedder, the connection's first transaction (a tenant of its own).
memory.ingest([{"event_id": f"warm-{prefix}-{os.getpid()}", "tenant_id": f"warm-{prefix}",
                "text": f"warm up {prefix} {os.getpid()}"}])
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.005)
times, ingested, skipped = [], 0, 0
for b in range(batches):
    records = [{"event_id": f"{prefix}-{b}-{i}", "tenant_id": tenant, "session_id": f"s{b % 3}",
                "user_id": "u", "text": f"{prefix} batch {b} note {i}: the deploy went fine"}
               for i in range(size)]
    t = time.perf_counter()
    report = memory.ingest(records)
    times.append(time.perf_counter() - t)
    ingested += len(report.created)
    skipped += len(report.skipped)
memory.close()
print(json.dumps({"times": times, "ingested": ingested, "skipped": skipped}))
"""


def env_for(url: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCLI_")}
    config = home / "memcli.yaml"
    home.mkdir(parents=True, exist_ok=True)
    config.write_text("retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0, entity: 0.5,"
                      " trigram: 0.5}\n", encoding="utf-8")
    env.update(HOME=str(home), MEMCLI_DB=url, MEMCLI_EMBEDDER="hash",
               MEMCLI_CONFIG=str(config), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               XDG_RUNTIME_DIR=str(home / "run"))
    return env


TEMPLATE = "w_template"


def memcli_template(dsn: str, home: Path) -> None:
    """A database memcli made its schema in (by a process of its own, as a writer would), the
    template every scenario's database is copied from: one schema creation, not one per
    database (a process start and the migrations, ~1.5 s each on this machine)."""
    url = create_database(dsn, TEMPLATE)
    subprocess.run([sys.executable, "-c", "from memcli.operations.memory import Memory; "
                    "Memory.configured().close()"], env=env_for(url, home), check=True)


def new_database(dsn: str, name: str, home: Path) -> str:
    """A fresh copy of the template (memcli's schema, no rows): what a first `Memory` makes."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
    return database_url(dsn, name)


def run(jobs: list[tuple[str, str, str]], batches: int, size: int, home: Path) -> dict[str, Any]:
    """jobs: (url, tenant, event prefix) per writer process."""
    go = home / f"go-{time.monotonic_ns()}"
    ready = [go.with_name(f"{go.name}-ready-{i}") for i in range(len(jobs))]
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, tenant, prefix, str(batches),
                               str(size), str(go), str(ready[i])], env=env_for(url, home),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, (url, tenant, prefix) in enumerate(jobs)]
    # Every writer has imported, connected and written its warm-up event before the clock
    # starts (each says so by a file): the timed part is the batches alone.
    while not all(r.exists() for r in ready):
        if any(p.poll() is not None for p in procs):
            break  # a writer died before it was ready: its error is reported below
        time.sleep(0.01)
    start = time.perf_counter()
    go.touch()
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - start
    failed = [err.strip().splitlines()[-1:] for p, (_, err) in zip(procs, outs, strict=True)
              if p.returncode != 0]
    if failed:
        raise SystemExit(f"writers failed: {failed}")
    parsed = [json.loads(out) for out, _ in outs]
    times = sorted(t for p in parsed for t in p["times"])
    ingested = sum(p["ingested"] for p in parsed)
    return {"writers": len(jobs), "wall_s": round(wall, 2), "ingested": ingested,
            "skipped": sum(p["skipped"] for p in parsed),
            "events_per_s": round(ingested / wall, 1),
            "batch_ms_p50": round(statistics.median(times) * 1000, 1),
            "batch_ms_p95": round(times[int(0.95 * (len(times) - 1))] * 1000, 1)}


def count(url: str, sql: str) -> Any:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchone()[0]


def scenarios(dsn: str, home: Path, batches: int, size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    per = batches * size
    memcli_template(dsn, home)
    url = new_database(dsn, "w_one", home)
    out["1 writer"] = run([(url, "t0", "one")], batches * 8, size, home)
    assert count(url, f"SELECT count(*) FROM events WHERE {REAL}") == 8 * per

    url = new_database(dsn, "w_tenants", home)
    out["8 writers, 8 tenants"] = run([(url, f"t{i}", f"w{i}") for i in range(8)], batches,
                                      size, home)
    assert count(url, "SELECT count(DISTINCT (tenant_id, event_id)) FROM events"
                      f" WHERE {REAL}") == 8 * per
    assert count(url, "SELECT min(n) = max(n) FROM (SELECT count(*) AS n FROM memories"
                      f" WHERE {REAL} GROUP BY tenant_id) c")

    url = new_database(dsn, "w_tenant", home)
    out["8 writers, 1 tenant"] = run([(url, "t0", f"w{i}") for i in range(8)], batches, size,
                                     home)
    assert count(url, f"SELECT count(DISTINCT event_id) FROM events WHERE {REAL}") == 8 * per

    urls = [new_database(dsn, f"w_db{i}", home) for i in range(8)]
    out["8 writers, 8 databases"] = run([(u, f"t{i}", f"w{i}") for i, u in enumerate(urls)],
                                        batches, size, home)
    assert sum(count(u, f"SELECT count(*) FROM events WHERE {REAL}") for u in urls) == 8 * per

    url = new_database(dsn, "w_same", home)
    same = run([(url, "t0", "same")] * 4, batches, size, home)
    assert same["ingested"] == per and same["skipped"] == 3 * per, same
    assert count(url, f"SELECT count(*) FROM events WHERE {REAL}") == per
    out["4 writers, same events"] = same
    return out


def render(report: dict[str, Any]) -> str:
    lines = [f"# PostgreSQL writers ({report['date']}, revision {report['revision']})", "",
             f"{report['batches']} batches x {report['size']} events per writer; "
             f"{report['machine']['cpus']} CPUs, load {report['machine']['load_avg_1m']}.", "",
             "| scenario | writers | events/s | batch p50 ms | batch p95 ms | wall s |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, r in report["scenarios"].items():
        lines.append(f"| {name} | {r['writers']} | {r['events_per_s']} | {r['batch_ms_p50']} |"
                     f" {r['batch_ms_p95']} | {r['wall_s']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI: small, checks only")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--size", type=int, default=5)
    args = parser.parse_args(argv)
    batches = 4 if args.quick else args.batches
    revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                              capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="pgw-") as tmp, running_server() as server:
        found = scenarios(server.dsn, Path(tmp), batches, args.size)
    report = {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "revision": revision,
              "batches": batches, "size": args.size,
              "machine": {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)},
              "scenarios": found}
    text = render(report)
    print(text)
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "pg-writers.json").write_text(json.dumps(report, indent=2) + "\n",
                                                 encoding="utf-8")
        (RESULTS / "pg-writers.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
