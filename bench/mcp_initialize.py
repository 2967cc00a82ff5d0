"""Cold `memcli mcp` start: seconds from spawning the process to its `initialize` answer.

    python bench/mcp_initialize.py [--runs 5] [-- extra memcli mcp args]

Prints JSON: median and each run for `python -c pass`, and for `memcli mcp` (in-process when
no daemon runs for the database; forwarded when one does). The process is closed after each
answer (stdin EOF) and killed if it does not exit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "bench", "version": "0"}}}


def one(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        proc.stdin.flush()
        line = proc.stdout.readline()
        elapsed = time.perf_counter() - start
        answer = json.loads(line)
        if "result" not in answer:
            raise SystemExit(f"no initialize result: {line[:200]!r}")
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
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    memcli = shutil.which("memcli") or os.path.join(os.path.dirname(sys.executable), "memcli")
    env = dict(os.environ)
    runs = {"python -c pass": [pass_time(env) for _ in range(args.runs)],
            "memcli mcp " + " ".join(args.extra): [
                one([memcli, "mcp", *args.extra], env) for _ in range(args.runs)]}
    print(json.dumps({name: {"median_s": round(statistics.median(times), 3),
                             "runs_s": [round(t, 3) for t in times]}
                      for name, times in runs.items()}, indent=2))


if __name__ == "__main__":
    main()
