"""Shared query encodes in `memcli serve`, before and after, in one run.

    git worktree add --detach /tmp/memcli-before <commit before the change>
    ln -s "$PWD/bench/.cache" /tmp/memcli-before/bench/.cache
    python -m bench.service_batch --reference /tmp/memcli-before [--rounds 3] [--seconds 60]

Runs, alternately for the reference checkout and this one (which goes first swaps each round,
so a machine that gets busier slows both alike): bench/service_load.py's 10 agents with 1 s of
think time and saturated (no think time), then bench/service.py's single agent on the 10k
database. Each script's daemon runs the code of its own checkout (service_support.cli_env puts
it first on PYTHONPATH). `python -c pass` is timed before every run, as the machine's yardstick.
Reported: per operation the median over rounds of each run's p50 and p95, and the ratio after /
before. Both checkouts' own result files are put back as they were afterwards.

Data: bench/perf.py's 10k database (`perf-10000-e5-small-splade.db`) in each checkout's
bench/.cache (a symlink is enough).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.perf import loadavg, python_pass_ms

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "bench" / "results" / "service-batch.md"
OWN_FILES = ("service-load-think1", "service-load", "service")


def log(msg: str) -> None:
    print(f"[service-batch {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def scenarios(seconds: float, runs: int) -> list[tuple[str, list[str], str]]:
    """(name, arguments of the bench script, its result file's stem)."""
    return [("10 agents, think 1 s", ["bench.service_load", "--think", "1", "--seconds",
                                      f"{seconds:g}"], "service-load-think1"),
            ("10 agents, saturated", ["bench.service_load", "--seconds", f"{seconds:g}"],
             "service-load"),
            ("1 agent (service.py)", ["bench.service", "--sizes", "10000", "--runs", str(runs)],
             "service")]


def rows_of(stem: str, result: dict[str, Any]) -> dict[str, dict[str, float]]:
    if stem == "service":
        size = result["sizes"]["10000"]
        return {k: v for k, v in size.items() if k.endswith("| daemon")}
    return result["ops"]


def run_one(checkout: Path, args: list[str], stem: str) -> dict[str, dict[str, float]]:
    # `-m` from the checkout's root: its own bench and memcli packages come first.
    done = subprocess.run([sys.executable, "-m", *args], cwd=checkout, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    out = checkout / "bench" / "results" / f"{stem}.json"
    return rows_of(stem, json.loads(out.read_text()))


def summarise(samples: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    keys = sorted(set().union(*samples))
    return {k: {m: statistics.median(s[k][m] for s in samples if k in s) for m in ("p50", "p95")}
            for k in keys}


def render(res: dict[str, Any]) -> str:
    lines = ["# Concurrent query encodes share one batch: `memcli serve` before and after", "",
             f"Measured {time.strftime('%Y-%m-%d')} on 2 cores, {res['rounds']} rounds, before "
             f"and after alternating; load average before/after {res['load_before']} / "
             f"{res['load_after']}. `python -c pass` p50 over the run: before "
             f"{res['pass_ms']['before']:.1f} ms, after {res['pass_ms']['after']:.1f} ms. "
             "Each cell: the median over rounds of a run's p50 / p95 wall ms, as the client saw "
             "them; x pass: the p95 over `python -c pass` timed before the same runs.", ""]
    for name, per in res["scenarios"].items():
        before, after = per["before"], per["after"]
        lines += [f"## {name}", "", "| operation | before p50 / p95 | after p50 / p95 | "
                  "p95 x pass before / after | after / before p95 |", "|---|---|---|---|---|"]
        for key in before:
            b, a = before[key], after.get(key)
            if a is None:
                continue
            lines.append(
                f"| {key} | {b['p50']:.1f} / {b['p95']:.1f} | {a['p50']:.1f} / {a['p95']:.1f} "
                f"| {b['p95'] / res['pass_ms']['before']:.1f}x / "
                f"{a['p95'] / res['pass_ms']['after']:.1f}x | {a['p95'] / b['p95']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", type=Path, required=True, help="checkout of the code before")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each load run")
    ap.add_argument("--runs", type=int, default=20, help="service.py's measured rounds")
    ap.add_argument("--only", default="", help="comma-separated scenario name prefixes")
    ap.add_argument("--out", type=Path, default=RESULTS, help="the .md file (and .json beside)")
    args = ap.parse_args(argv)
    checkouts = {"before": args.reference.resolve(), "after": REPO_ROOT}
    kept = {p: p.read_bytes() for c in checkouts.values() for stem in OWN_FILES
            for p in (c / "bench" / "results" / f"{stem}.json",
                      c / "bench" / "results" / f"{stem}.md") if p.exists()}
    res: dict[str, Any] = {"rounds": args.rounds, "load_before": loadavg(), "scenarios": {}}
    samples: dict[str, dict[str, list[Any]]] = {}
    passes: dict[str, list[float]] = {"before": [], "after": []}
    try:
        for r in range(args.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for name, script, stem in scenarios(args.seconds, args.runs):
                if args.only and not name.startswith(tuple(args.only.split(","))):
                    continue
                for label in order:
                    passes[label].append(python_pass_ms())
                    log(f"round {r + 1}: {name}, {label}")
                    rows = run_one(checkouts[label], script, stem)
                    samples.setdefault(name, {}).setdefault(label, []).append(rows)
    finally:
        for path, data in kept.items():
            path.write_bytes(data)
    res["load_after"] = loadavg()
    res["pass_ms"] = {k: statistics.median(v) for k, v in passes.items()}
    res["scenarios"] = {name: {label: summarise(runs) for label, runs in per.items()}
                        for name, per in samples.items()}
    res["raw"] = samples
    text = render(res)
    print(text)
    args.out.write_text(text + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
