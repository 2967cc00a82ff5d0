"""The daemon's indexer comes and goes: its memory while it drains, the daemon's once it is
gone, and what the first memory of a new backlog waits for a new indexer.

    python -m bench.indexer_lifecycle            # the default models (e5-small + SPLADE)
    python -m bench.indexer_lifecycle --quick    # the hash embedder, a smoke run

One `memcli serve` on a fresh database (MEMCLI_INDEXER_IDLE_EXIT=--idle seconds). PSS is read
from /proc/PID/smaps_rollup: the indexer's, sampled while it drains `--memories` memories
(the highest sample), and the daemon's total (every process of it) while the idle indexer is
still there and after it has exited. Latency: `memcli ingest --text` of one memory through the
daemon, then the time until its vector is in the database (read every 10 ms), `--runs` times
with no indexer running (a fork and the models' first run in it) and as many with the idle
indexer still running. Results: docs/guides/indexing.md, docs/design/daemon.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.perf_data import pct
from bench.service_support import Daemon, cli_env, process_tree, pss_mb


def total_mb(root: int) -> float:
    return sum(pss_mb(p) for p in process_tree(root))


def memcli(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "memcli", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"memcli {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def indexer_pid(daemon: Daemon) -> int | None:
    return daemon.status()["backlog"]["indexer"]["pid"]


def until(predicate, timeout: float, step: float = 0.01) -> float:
    """Seconds until `predicate()` holds."""
    began = time.monotonic()
    while not predicate():
        if time.monotonic() - began > timeout:
            raise SystemExit("timed out")
        time.sleep(step)
    return time.monotonic() - began


def has_vector(db: Path, memory_id: int) -> bool:
    with sqlite3.connect(db) as conn:
        return bool(
            conn.execute(
                "SELECT count(*) FROM memory_vectors WHERE memory_id = ?", (memory_id,)
            ).fetchone()[0]
        )


def vector_wait(env: dict[str, str], db: Path, n: int) -> float:
    """Ingest one memory through the daemon; seconds until its vector is written."""
    out = json.loads(
        memcli(env, "ingest", "--text", f"a new note number {n} about herons", "--user-id", "u")
    )
    (memory_id,) = out["memory_ids"]
    return until(lambda: has_vector(db, memory_id), 300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the hash embedder")
    parser.add_argument("--memories", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--idle", type=float, default=8.0, help="the indexer's idle exit, s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memcli-indexer-") as folder:
        tmp = Path(folder)
        env = cli_env(tmp, hash_embedder=args.quick)
        env["MEMCLI_INDEXER_IDLE_EXIT"] = str(args.idle)
        db = tmp / "m.db"
        env["MEMCLI_DB"] = str(db)
        with Daemon(db, env) as daemon:
            daemon.wait_ready()
            assert daemon.proc is not None
            root = daemon.proc.pid
            until(lambda: indexer_pid(daemon) is None, 120, 0.2)  # the start's check is done
            no_indexer = total_mb(root)
            events = "".join(
                json.dumps(
                    {
                        "text": f"note {i}: the otters of pond {i % 17} "
                        "were seen again near the reeds",
                        "user_id": "u",
                    }
                )
                + "\n"
                for i in range(args.memories)
            )
            memcli(env, "ingest", "-", stdin=events)
            pid = indexer_pid(daemon)
            peak, began = 0, time.monotonic()
            while daemon.status()["backlog"]["waiting"]:
                if pid:
                    peak = max(peak, pss_mb(pid))
                time.sleep(0.2)
            drained = time.monotonic() - began
            peak = max(peak, pss_mb(pid) if pid else 0)
            with_idle = total_mb(root)
            idle_pid = indexer_pid(daemon)
            by_process: dict[str, float] = {}
            for p in process_tree(root):  # the HTTP process and the spare are "others"
                name = "main" if p == root else "indexer" if p == idle_pid else "others"
                by_process[name] = round(by_process.get(name, 0.0) + pss_mb(p), 1)
            until(lambda: indexer_pid(daemon) is None, args.idle + 60, 0.2)
            after_exit = total_mb(root)
            cold, warm = [], []
            for n in range(args.runs):  # each after the indexer has exited
                until(lambda: indexer_pid(daemon) is None, args.idle + 60, 0.2)
                cold.append(vector_wait(env, db, n))
            for n in range(args.runs):  # the last one's indexer still runs, idle
                warm.append(vector_wait(env, db, 100 + n))
        load = os.getloadavg()[0]
    print(
        json.dumps(
            {
                "models": "hash" if args.quick else "default",
                "memories": args.memories,
                "drain_s": round(drained, 1),
                "load": round(load, 1),
                "indexer_pss_mb_draining": round(peak, 1),
                "daemon_pss_mb": {
                    "no_indexer_before": round(no_indexer, 1),
                    "indexer_idle": round(with_idle, 1),
                    "by_process": by_process,
                    "after_indexer_exit": round(after_exit, 1),
                },
                "first_vector_s_new_indexer": {
                    "p50": round(pct(cold, 50), 3),
                    "max": round(max(cold), 3),
                },
                "first_vector_s_running_indexer": {
                    "p50": round(pct(warm, 50), 3),
                    "max": round(max(warm), 3),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
