"""LoCoMo calibration of a hit's relevance: fit memcli/data/relevance.json and measure it.

    python -m bench.relevance [--data PATH] [--refresh] [--write-weights]

What it does (docs/design/relevance.md tells why):
1. Asks LoCoMo with memcli's default ranking (e5-small, SPLADE, the stages) against the cached
   database of bench/locomo.py (bench/.cache/locomo-e5-small.db; build it with
   `python -m bench.locomo --embedder e5-small --configs hybrid-zscore`): every question in its
   own conversation (top 50 hits, labelled by the evidence), every question against the next
   conversation's memory (unanswerable: top 10), and 200 nonsense queries (top 10). Each hit's
   signals (memcli.retrieval.search.assess) are cached in bench/.cache/relevance-features.json.gz,
   so a refit takes seconds.
2. Fits one logistic regression per set of legs (lexical; +sparse; +dense; +both) with
   scikit-learn, held out by conversation (leave one conversation out: a hit counts in the fold
   of its memory's conversation and of its question's), and measures the out-of-fold
   probabilities: expected calibration error, AUROC of the top hit's relevance between answerable
   and unanswerable questions, the nonsense queries' top relevance, and recall within 1,000
   tokens with a bundle's relevance cut.
3. Writes bench/results/relevance.{md,json}; `--write-weights` also writes the coefficients fitted
   on all of LoCoMo to memcli/data/relevance.json.

Nonsense queries: three words drawn (seed 38) from the vocabulary of the SPLADE tokenizer that
ships in memcli (memcli/weights/splade_tiny/tokenizer.json): whole lower-case words of 5-12
letters that no LoCoMo turn contains, so no query shares a word with the memory it is asked of.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

from bench.locomo_data import CACHE_DIR, DEFAULT_DATA, REPO_ROOT, RESULTS_DIR, questions, sessions
from bench.locomo_db import default_sparse, open_memory
from bench.locomo_report import git_revision
from bench.locomo_score import dia_id_of
from memcli.core.tokens import count_tokens
from memcli.providers.embedders import get_embedder
from memcli.retrieval import search
from memcli.retrieval.stages import RankContext

DB_PATH = CACHE_DIR / "locomo-e5-small.db"
FEATURES_PATH = CACHE_DIR / "relevance-features.json.gz"
TOKENIZER = REPO_ROOT / "memcli" / "weights" / "splade_tiny" / "tokenizer.json"
OWN_TOP, OTHER_TOP = 50, 10
NONSENSE, NONSENSE_WORDS, SEED = 200, 3, 38
FEATURE_VERSION = 2  # bump when what a hit's signals hold changes


def nonsense_queries(data: list[dict[str, Any]], n: int = NONSENSE) -> list[str]:
    """`n` queries of NONSENSE_WORDS words from the shipped tokenizer's vocabulary that no
    LoCoMo turn contains (seeded: the same queries on every run)."""
    said: set[str] = set()
    for sample in data:
        for _, turns in sessions(sample["conversation"]):
            for turn in turns:
                said.update(re.findall(r"[a-z]+", turn["text"].lower()))
                said.update(re.findall(r"[a-z]+", (turn.get("blip_caption") or "").lower()))
    vocab = json.loads(TOKENIZER.read_text(encoding="utf-8"))["model"]["vocab"]
    words = sorted(w for w in vocab if re.fullmatch(r"[a-z]{5,12}", w) and w not in said)
    rng = random.Random(SEED)
    return [" ".join(rng.sample(words, NONSENSE_WORDS)) for _ in range(n)]


def ask(memory: Any, text: str, tenant: str, top: int) -> list[Any]:
    """The query as `Memory.query` ranks it (the tenant's whole memory, no widening), the top
    `top` candidates with their relevance signals."""
    filters = memory.filters(tenant_id=tenant)
    legs = search.run_legs(
        memory.db, memory.embedder, text, filters, memory.retrieval, sparse=memory.sparse
    )
    ranked = search.rank(RankContext(memory.db, filters, text, memory.retrieval), legs)[:top]
    return search.assess(
        memory.db, memory.embedder, memory.sparse, text, filters, memory.retrieval, legs, ranked
    )


def hit_rows(
    memory: Any, cands: list[Any], base: dict[str, Any], evidence: set[str]
) -> list[dict[str, Any]]:
    rows = []
    for rank, cand in enumerate(cands, start=1):
        row = memory.db.execute(
            "SELECT event_id, content FROM memories WHERE id = ?", [cand.id]
        ).fetchone()
        dia = dia_id_of(row[0], base["tenant"])
        s = cand.signals
        rows.append(
            {
                **base,
                "rank": rank,
                "label": int(dia in evidence),
                "dia": dia,
                "tokens": count_tokens(row[1], memory.encoding),
                "coverage": s.coverage,
                "terms": s.terms,
                "sparse": s.sparse,
                "dense": s.dense,
            }
        )
    return rows


def extract(data_path: Path) -> list[dict[str, Any]]:
    """Every hit's signals and label (see the module docstring), asked afresh."""
    data = json.loads(data_path.read_text(encoding="utf-8"))
    ingested = {
        s["sample_id"]: {t["dia_id"] for _, ts in sessions(s["conversation"]) for t in ts}
        for s in data
    }
    qs, _ = questions(data, ingested)
    samples = [s["sample_id"] for s in data]
    other = {s: samples[(i + 1) % len(samples)] for i, s in enumerate(samples)}
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with open_memory(DB_PATH, get_embedder("e5-small"), default_sparse()) as memory:
        for n, q in enumerate(qs):
            evidence = set(q["evidence"])
            base = {
                "q": n,
                "kind": "own",
                "qconv": q["sample_id"],
                "tenant": q["sample_id"],
                "category": q["category"],
                "n_evidence": len(evidence),
            }
            rows += hit_rows(
                memory, ask(memory, q["question"], q["sample_id"], OWN_TOP), base, evidence
            )
            away = other[q["sample_id"]]
            base = {**base, "kind": "other", "tenant": away}
            rows += hit_rows(memory, ask(memory, q["question"], away, OTHER_TOP), base, set())
            if n % 100 == 0:
                print(
                    f"  {n}/{len(qs)} questions, {time.perf_counter() - t0:.0f} s", file=sys.stderr
                )
        for n, text in enumerate(nonsense_queries(data)):
            tenant = samples[n % len(samples)]
            base = {
                "q": len(qs) + n,
                "kind": "nonsense",
                "qconv": tenant,
                "tenant": tenant,
                "category": 0,
                "n_evidence": 0,
                "text": text,
            }
            rows += hit_rows(memory, ask(memory, text, tenant, OTHER_TOP), base, set())
    return rows


def cached_features(data_path: Path, refresh: bool) -> list[dict[str, Any]]:
    if FEATURES_PATH.exists() and not refresh:
        cached = json.loads(gzip.decompress(FEATURES_PATH.read_bytes()))
        if cached.get("version") == FEATURE_VERSION:
            return cached["rows"]
    rows = extract(data_path)
    FEATURES_PATH.write_bytes(
        gzip.compress(json.dumps({"version": FEATURE_VERSION, "rows": rows}).encode())
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    from bench import relevance_fit

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--refresh", action="store_true", help="ask LoCoMo again")
    parser.add_argument(
        "--write-weights",
        action="store_true",
        help="write the fitted coefficients to memcli/data/relevance.json",
    )
    args = parser.parse_args(argv)
    if not DB_PATH.exists():
        print(
            f"no {DB_PATH} (run python -m bench.locomo --embedder e5-small first)", file=sys.stderr
        )
        return 2
    rows = cached_features(Path(args.data), args.refresh)
    report = relevance_fit.evaluate(rows)
    report["meta"] = {
        "command": "python -m bench.relevance",
        "revision": git_revision(),
        "data": args.data,
        "database": str(DB_PATH.relative_to(REPO_ROOT)),
    }
    markdown = relevance_fit.render(report)
    print(markdown)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "relevance.md").write_text(markdown, encoding="utf-8")
    (RESULTS_DIR / "relevance.json").write_text(
        json.dumps(report, indent=2) + "\n", encoding="utf-8"
    )
    if args.write_weights:
        relevance_fit.write_weights(report, REPO_ROOT / "memcli" / "data" / "relevance.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
