"""Cold `memcli mcp` start: seconds from spawning the process to its `initialize` answer.

    python -m bench.mcp_initialize [--runs 9] [--out bench/results/mcp-initialize]

Three commands, their runs interleaved so they share the machine's load: `python -c pass`
(the floor), `memcli mcp --no-daemon` (served in-process with the SDK) and `memcli mcp` with a
`memcli serve` running for the database (the stdlib bridge to the daemon's /mcp). Everything
lives in a scratch folder (its own HOME, runtime dir and database, hash embedder); the daemon
is stopped and every child reaped at the end. Prints JSON (median, min and each run); with
`--out`, also writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.service_support import Daemon, cli_env

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "bench", "version": "0"}}}
MEMCLI = [sys.executable, "-m", "memcli"]


def initialize_time(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        proc.stdin.flush()
        line = proc.stdout.readline()
        elapsed = time.perf_counter() - start
        if "result" not in json.loads(line or b"{}"):
            raise SystemExit(f"{command}: no initialize result: {line[:200]!r}")
        proc.stdin.close()
        proc.wait(timeout=30)
        return elapsed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def pass_time(env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memcli-mcp-bench-") as scratch:
        root = Path(scratch)
        db = root / "memory.db"
        env = {**cli_env(root, hash_embedder=True), "MEMCLI_DB": str(db)}
        subprocess.run([*MEMCLI, "remember", "warm-up fact"], env=env, check=True,
                       capture_output=True)
        runs: dict[str, list[float]] = {"python -c pass": [], "memcli mcp (in-process)": [],
                                        "memcli mcp (forwarded to memcli serve)": []}
        with Daemon(db, env) as daemon:
            daemon.wait_ready()
            for _ in range(args.runs):
                runs["python -c pass"].append(pass_time(env))
                runs["memcli mcp (in-process)"].append(
                    initialize_time([*MEMCLI, "mcp", "--no-daemon"], env))
                runs["memcli mcp (forwarded to memcli serve)"].append(
                    initialize_time([*MEMCLI, "mcp"], env))
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                         f"{platform.python_version()}",
              "load_average_after": os.getloadavg()[0],
              "runs": {name: {"median_s": round(statistics.median(t), 3),
                              "min_s": round(min(t), 3), "each_s": [round(x, 3) for x in t]}
                       for name, t in runs.items()}}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        lines = ["# Cold `memcli mcp`: process start to the `initialize` answer", "",
                 f"{result['machine']}; load average after the run "
                 f"{result['load_average_after']:.1f}. `python -m bench.mcp_initialize "
                 f"--runs {args.runs}`.", "", "| command | median s | min s |", "|---|---|---|"]
        lines += [f"| {name} | {r['median_s']} | {r['min_s']} |"
                  for name, r in result["runs"].items()]
        args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
