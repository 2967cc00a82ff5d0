"""Does one batch of N query texts cost less than N single encodes? e5-small and SPLADE-tiny.

    python -m bench.query_batch [--rounds 20]

The daemon's query encodes run on one thread per model (e5-small on one OpenMP thread, SPLADE on
one BLAS thread), so this measures the same: per query text, the ms of N `embed_query` /
`encode_query` calls against one `embed_queries` / `encode_queries` call of N texts, for N = 1,
2, 4, 8, interleaved round by round so a busy machine slows every variant alike. Texts are the
load benchmark's queries (bench/service_load.py). Reported: medians over rounds and the ratio
batch / singles. Writes bench/results/query-batch.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `memcli` sets it

RESULTS = REPO_ROOT / "bench" / "results" / "query-batch.md"
WORDS = ("deploy", "budget", "lisbon", "postgres", "review", "invoice", "migration", "roadmap")
SIZES = (1, 2, 4, 8)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    from memcli.providers.embedders import E5SmallEmbedder
    from memcli.providers.splade import SpladeEncoder

    texts = [f"what about the {w} item?" if i % 2 else f"{w} item" for i, w in enumerate(WORDS)]
    e5, splade = E5SmallEmbedder(), SpladeEncoder()
    e5.load()
    splade.load()
    variants = {
        "e5-small singles": lambda b: [e5.embed_query(t) for t in b],
        "e5-small batch": e5.embed_queries,
        "SPLADE singles": lambda b: [splade.encode_query(t) for t in b],
        "SPLADE batch": splade.encode_queries,
    }
    ms: dict[tuple[str, int], list[float]] = {}
    for fn in variants.values():  # warm-up
        fn(texts)
    for _ in range(args.rounds):
        for n in SIZES:
            for name, fn in variants.items():
                t0 = time.perf_counter()
                fn(texts[:n])
                ms.setdefault((name, n), []).append((time.perf_counter() - t0) * 1000 / n)
    med = {k: statistics.median(v) for k, v in ms.items()}
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = ["# One batch of N query texts against N single encodes", "",
             f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores, one thread per "
             f"model as in the daemon, {args.rounds} rounds interleaved; load average after: "
             f"{load}. ms per query text (median over rounds).", "",
             "| N | e5-small singles | e5-small batch | batch / singles | SPLADE singles "
             "| SPLADE batch | batch / singles |", "|---|---|---|---|---|---|---|"]
    for n in SIZES:
        e_s, e_b = med[("e5-small singles", n)], med[("e5-small batch", n)]
        s_s, s_b = med[("SPLADE singles", n)], med[("SPLADE batch", n)]
        lines.append(f"| {n} | {e_s:.1f} | {e_b:.1f} | {e_b / e_s:.2f} | {s_s:.1f} | {s_b:.1f} "
                     f"| {s_b / s_s:.2f} |")
    text = "\n".join(lines)
    print(text)
    RESULTS.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
