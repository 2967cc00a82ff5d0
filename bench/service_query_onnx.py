"""Query encodes through onnxruntime in `memcli serve`: before and after, in one run.

    git worktree add --detach /tmp/memcli-before <commit before the change>
    ln -s "$PWD/bench/.cache" /tmp/memcli-before/bench/.cache
    python -m bench.service_query_onnx --reference /tmp/memcli-before [--rounds 3]

Each round:

- the query encode alone, the first one in a process forked from a warm one (what each
  command of `memcli serve` is): e5-small's C engine against the one-thread onnxruntime
  session, alternating, short query texts (this checkout only: it holds both runtimes);
- bench/service.py's single agent on the 10k database with `--against` the reference:
  `memcli query` and `memcli acb build` as fresh processes through this checkout's daemon
  and through the reference's, interleaved, beside `python -c pass`;
- bench/service_load.py's 10 agents (HTTP and MCP) with 1 s of think time, for each checkout
  (which goes first alternates by round), `python -c pass` timed before each.

Reported: per operation, the median over rounds of each run's p50 and p95 (wall ms as the
client saw them) and the ratio after / before. Both checkouts' own result files of those
scripts are put back as they were. Data: bench/perf.py's 10k database
(`perf-10000-e5-small-splade.db`) in bench/.cache of each checkout (a symlink is enough).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.perf import loadavg, python_pass_ms

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "bench" / "results" / "service-query-onnx.md"
OWN_FILES = ("service-load-think1", "service")
QUERIES = ["where did the user move?", "what does Caroline do on weekends",
           "用户搬到了哪个城市？", "when is the deploy", "Melanie's sunrise painting"]


def log(msg: str) -> None:
    print(f"[service-query-onnx {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def encode_child(forks: int) -> None:
    """Print {runtime: [ms of the first query encode in each fork]} as JSON."""
    from memcli.config import thread_defaults

    thread_defaults()
    from memcli.providers.embedders import E5SmallEmbedder

    engine, warm = E5SmallEmbedder(runtime="engine"), E5SmallEmbedder()
    engine.load()
    if warm.warm_queries() != "onnxruntime":
        raise SystemExit("onnxruntime cannot run e5-small here")
    times: dict[str, list[float]] = {"engine": [], "onnxruntime": []}
    for i in range(forks):
        for name, model in (("engine", engine), ("onnxruntime", warm)):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                t0 = time.perf_counter()
                model.embed_query(QUERIES[i % len(QUERIES)])
                os.write(write, str((time.perf_counter() - t0) * 1000).encode())
                os._exit(0)
            os.close(write)
            with os.fdopen(read) as fh:
                times[name].append(float(fh.read()))
            os.waitpid(pid, 0)
    print(json.dumps(times))


def run(checkout: Path, args: list[str]) -> str:
    # `-m` from the checkout's root: its own bench and memcli packages come first.
    done = subprocess.run([sys.executable, "-m", *args], cwd=checkout, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def single_agent(reference: Path, runs: int) -> dict[str, dict[str, dict[str, float]]]:
    """bench/service.py through both daemons: {"before"/"after": {operation: p50/p95}}."""
    run(REPO_ROOT, ["bench.service", "--sizes", "10000", "--runs", str(runs), "--first-runs",
                    "0", "--against", str(reference)])
    rows = json.loads((REPO_ROOT / "bench" / "results" / "service.json").read_text())
    out: dict[str, dict[str, dict[str, float]]] = {"before": {}, "after": {}}
    for key, row in rows["sizes"]["10000"].items():
        if not isinstance(row, dict):
            continue
        label, _, way = key.partition(" | ")
        side = "after" if way == "daemon" else "before" if way.startswith("daemon of") else ""
        if side:
            out[side][f"{label} (1 agent)"] = {"p50": row["p50"], "p95": row["p95"]}
        elif key == "python -c pass":
            for side in ("before", "after"):
                out[side]["python -c pass (beside it)"] = {"p50": row["p50"], "p95": row["p95"]}
    return out


def load(checkout: Path, seconds: float) -> dict[str, dict[str, float]]:
    run(checkout, ["bench.service_load", "--think", "1", "--seconds", f"{seconds:g}"])
    rows = json.loads((checkout / "bench" / "results" / "service-load-think1.json").read_text())
    return {f"{k} (10 agents)": {"p50": v["p50"], "p95": v["p95"]}
            for k, v in rows["ops"].items()}


def median_rows(samples: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    keys = list(dict.fromkeys(k for s in samples for k in s))
    return {k: {m: statistics.median(s[k][m] for s in samples if k in s) for m in ("p50", "p95")}
            for k in keys}


def render(res: dict[str, Any]) -> str:
    enc = res["encode"]
    lines = [
        "# Query encodes through onnxruntime in `memcli serve`: before and after", "",
        f"`python -m bench.service_query_onnx --reference <worktree at {res['reference']}> "
        f"--rounds {res['rounds']}`, measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} "
        f"cores shared with other work; load average before/after {res['load_before']} / "
        f"{res['load_after']}. `python -c pass` p50 before each load run: before "
        f"{res['pass_ms']['before']:.1f} ms, after {res['pass_ms']['after']:.1f} ms.", "",
        "## The query encode alone, first call in a forked process", "",
        f"{enc['forks']} forks per round and runtime, alternating; ms, median over rounds of "
        "each round's p50 / p95.", "",
        "| runtime | p50 | p95 |", "|---|---:|---:|"]
    for name, row in enc["rows"].items():
        lines.append(f"| {name} | {row['p50']:.1f} | {row['p95']:.1f} |")
    lines += ["", f"Engine / onnxruntime p50: {enc['ratio']:.2f}x.", "",
              "## Through the daemon", "",
              "Wall ms as the client saw them, median over rounds of each run's p50 / p95. "
              "1 agent: bench/service.py, fresh `memcli` processes through each checkout's "
              "daemon, interleaved. 10 agents: bench/service_load.py with 1 s of think time.",
              "", "| operation | before p50 / p95 | after p50 / p95 | after / before p50 | "
              "after / before p95 |", "|---|---|---|---:|---:|"]
    before, after = res["rows"]["before"], res["rows"]["after"]
    for key, b in before.items():
        a = after.get(key)
        if a is None:
            continue
        lines.append(f"| {key} | {b['p50']:.1f} / {b['p95']:.1f} | {a['p50']:.1f} / "
                     f"{a['p95']:.1f} | {a['p50'] / b['p50']:.2f} | {a['p95'] / b['p95']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", type=Path, help="checkout of the code before")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each load run")
    ap.add_argument("--runs", type=int, default=20, help="service.py's measured rounds")
    ap.add_argument("--forks", type=int, default=30, help="forks per runtime and round")
    ap.add_argument("--encode-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.encode_child:
        encode_child(args.encode_child)
        return 0
    if args.reference is None:
        ap.error("--reference is required")
    reference = args.reference.resolve()
    checkouts = {"before": reference, "after": REPO_ROOT}
    kept = {p: p.read_bytes() for c in checkouts.values() for stem in OWN_FILES
            for p in (c / "bench" / "results" / f"{stem}.json",
                      c / "bench" / "results" / f"{stem}.md") if p.exists()}
    commit = subprocess.run(["git", "-C", str(reference), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or str(reference)
    res: dict[str, Any] = {"rounds": args.rounds, "reference": commit,
                           "load_before": loadavg()}
    encodes: dict[str, list[dict[str, float]]] = {}
    samples: dict[str, list[dict[str, dict[str, float]]]] = {"before": [], "after": []}
    passes: dict[str, list[float]] = {"before": [], "after": []}
    try:
        for r in range(args.rounds):
            log(f"round {r + 1}: the query encode in forks")
            times = json.loads(run(REPO_ROOT, ["bench.service_query_onnx", "--encode-child",
                                               str(args.forks)]))
            for name, values in times.items():
                encodes.setdefault(name, []).append(
                    {"p50": statistics.median(values),
                     "p95": sorted(values)[int(0.95 * (len(values) - 1))]})
            log(f"round {r + 1}: one agent through both daemons")
            rows = single_agent(reference, args.runs)
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for label in order:
                passes[label].append(python_pass_ms())
                log(f"round {r + 1}: 10 agents, think 1 s, {label}")
                samples[label].append({**rows[label], **load(checkouts[label], args.seconds)})
    finally:
        for path, data in kept.items():
            path.write_bytes(data)
    res["load_after"] = loadavg()
    res["pass_ms"] = {k: statistics.median(v) for k, v in passes.items()}
    enc_rows = {name: {m: statistics.median(s[m] for s in runs) for m in ("p50", "p95")}
                for name, runs in encodes.items()}
    res["encode"] = {"forks": args.forks, "rows": enc_rows,
                     "ratio": enc_rows["engine"]["p50"] / enc_rows["onnxruntime"]["p50"]}
    res["rows"] = {label: median_rows(runs) for label, runs in samples.items()}
    res["raw"] = {"encode": encodes, "rows": samples, "pass_ms": passes}
    text = render(res)
    print(text)
    RESULTS.write_text(text + "\n")
    RESULTS.with_suffix(".json").write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
