"""LoCoMo ablation: memcli's retrieval stages added one at a time (issue: retrieval quality).

    python -m bench.ablation [--embedder e5-small] [--data ../shared/data/locomo10.json]

Reuses bench/locomo.py (protocol, cached database, scoring) and changes only RetrievalSettings,
cumulatively, from the foundation's plain hybrid to today's default. Porter stemming and
stopword removal are baked into the FTS index, so they are on in every row (RETRIEVAL.md has
their effect: +5 R@10 for lexical alone). Writes bench/results/ablation-<embedder>.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.locomo_data import (
    BUDGETS,
    CACHE_DIR,
    DEFAULT_DATA,
    KS,
    RESULTS_DIR,
    questions,
    sessions,
)
from bench.locomo_db import cached_database, default_sparse, open_memory
from bench.locomo_score import evaluate, summarise
from memcli.config import RetrievalSettings
from memcli.core.tokens import count_tokens
from memcli.providers.embedders import get_embedder

NO_STAGES = {"neighbour_weight": 0.0, "session_weight": 0.0, "time_boost": 1.0,
             "speaker_boost": 1.0}
NO_SPARSE = {"lexical": 1.0, "sparse": 0.0, "dense": 1.0, "entity": 0.5, "trigram": 0.5}

# Cumulative: each row keeps everything above it.
STEPS: list[tuple[str, dict]] = [
    ("foundation: lexical+dense+entity+trigram, RRF", {
        "fusion": "rrf", "context_weight": 0.0, "leg_weights": NO_SPARSE, **NO_STAGES}),
    ("+ z-score fusion", {
        "fusion": "zscore", "context_weight": 0.0, "leg_weights": NO_SPARSE, **NO_STAGES}),
    ("+ contextual key (previous turn column, 0.5)", {
        "fusion": "zscore", "leg_weights": NO_SPARSE, **NO_STAGES}),
    ("+ SPLADE-tiny sparse leg", {"fusion": "zscore", **NO_STAGES}),
    ("+ neighbour propagation 0.5", {
        "fusion": "zscore", **{**NO_STAGES, "neighbour_weight": 0.5}}),
    ("+ session boost 0.25", {
        "fusion": "zscore", "time_boost": 1.0, "speaker_boost": 1.0}),
    ("+ when x1.3, speaker x1.1 (= default)", {}),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embedder", default="e5-small")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    args = ap.parse_args()
    data_path = Path(args.data)
    data = json.loads(data_path.read_text(encoding="utf-8"))
    embedder = get_embedder(args.embedder)
    sparse = default_sparse()
    # Reuse bench/locomo.py's cached database as it is: the ablation changes only ranking
    # settings, never what was stored (build it first with bench/locomo.py).
    db_path = CACHE_DIR / f"locomo-{args.embedder}.db"
    if not db_path.exists():
        db_path, _ = cached_database(data_path, embedder, sparse, args.embedder, data, False)
    ingested = {s["sample_id"]: {t["dia_id"] for _, turns in sessions(s["conversation"])
                                 for t in turns} for s in data}
    qs, _ = questions(data, ingested)
    settings = {label: RetrievalSettings(**update) for label, update in STEPS}
    lines = ["| stage (cumulative) | R@5 | R@10 | R@25 | R@50 | 500 tok | 1000 tok | 2000 tok |",
             "|---|---|---|---|---|---|---|---|"]
    with open_memory(db_path, embedder, sparse) as memory:
        count_tokens("warm up", memory.encoding)
        for label, _ in STEPS:
            t = time.perf_counter()
            s = summarise(evaluate(memory, qs, label, settings=settings[label]))["overall"]
            cells = [s[f"r@{k}"] for k in KS] + [s[f"b{b}"] for b in BUDGETS]
            lines.append(f"| {label} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
            print(lines[-1], f"({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    lines.append("| DRAGON (paper, Table 3) | 56.7 | 66.2 | 76.7 | 82.7 | | | |")
    table = (f"# LoCoMo ablation, embedder `{embedder.model_id}`\n\n"
             f"{len(qs)} questions; protocol as bench/locomo.py.\n\n" + "\n".join(lines) + "\n")
    out = RESULTS_DIR / f"ablation-{args.embedder}.md"
    out.write_text(table, encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
