"""LoCoMo per category, with ranking parameters chosen by conversation-held-out cross-validation.

    python -m bench.locomo_cv [--embedder e5-small] [--data PATH] [--out NAME]

What it measures, how, and the results: bench/README.md, "A ranking change, per category and
cross-validated".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.locomo_data import (
    CACHE_DIR,
    CATEGORIES,
    DEFAULT_DATA,
    RESULTS_DIR,
    TOP_K,
    questions,
    sessions,
)
from bench.locomo_db import cached_database, default_sparse, open_memory
from bench.locomo_report import git_revision
from bench.locomo_score import dia_id_of
from memcli import Memory
from memcli.config import RetrievalSettings
from memcli.core.request_base import bound_query
from memcli.core.tokens import count_tokens
from memcli.providers.embedders import get_embedder
from memcli.retrieval import search
from memcli.retrieval.stages import RankContext

KS = (5, 10, 25, 50)
BUDGET = 1000
METRICS = [f"r@{k}" for k in KS] + [f"b{BUDGET}"]
LEG_SETTINGS = {
    "leg_weights",
    "candidates_per_leg",
    "context_weight",
    "sparse_max_df",
    "sparse_max_df_ratio",
}

# The variants compared: a name, and its settings for each value of its one parameter (one
# value: nothing to choose, no cross-validation needed). Everything else stays at the default.
Variant = tuple[str, dict[str, dict[str, Any]]]
VARIANTS: list[Variant] = [
    ("default", {"-": {}}),
    ("no date match", {"-": {"date_boost": 1.0}}),
    ("date match x w", {f"{w}": {"date_boost": w} for w in (1.5, 1.2, 2.0, 3.0)}),
]


def legs_cache(memory: Memory, qs: list[dict[str, Any]], db_path: Path) -> list[Any]:
    """Every question's legs under the default settings, computed once per database."""
    settings = RetrievalSettings()
    # What the legs depend on: the database, the questions, and the settings the legs read
    # (a ranking setting added or changed must not recompute them).
    legs_settings = settings.model_dump(include=LEG_SETTINGS)
    key = hashlib.sha256(
        (
            db_path.with_suffix(".json").read_text()
            + json.dumps(legs_settings, sort_keys=True)
            + json.dumps([q["question"] for q in qs])
        ).encode()
    ).hexdigest()[:16]
    path = CACHE_DIR / f"{db_path.stem}-legs-{key}.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())
    out = []
    t = time.perf_counter()
    for n, q in enumerate(qs, start=1):
        filters = memory.filters(tenant_id=q["sample_id"])
        legs = search.run_legs(
            memory.db,
            memory.embedder,
            bound_query(q["question"]),
            filters,
            settings,
            sparse=memory.sparse,
        )
        out.append((dict(legs), legs.indexed))
        if n % 250 == 0:
            print(f"  legs: {n}/{len(qs)} ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    path.write_bytes(pickle.dumps(out))
    return out


def turn_table(memory: Memory) -> dict[int, tuple[str | None, int]]:
    """memory id -> (LoCoMo dia id, tokens of its text)."""
    rows = memory.db.execute("SELECT id, event_id, tenant_id, content FROM memories")
    return {int(i): (dia_id_of(e, t), count_tokens(c, memory.encoding)) for i, e, t, c in rows}


def replay(
    memory: Memory,
    qs: list[dict[str, Any]],
    legs: list[Any],
    turns: dict[int, tuple[str | None, int]],
    settings: RetrievalSettings,
) -> list[dict[str, float]]:
    """Each question's recalls under `settings`, ranked from its cached legs."""
    rows = []
    for q, (hits, indexed) in zip(qs, legs, strict=True):
        filters = memory.filters(tenant_id=q["sample_id"])
        replayed = search.Legs(hits)
        replayed.indexed = indexed
        text = bound_query(q["question"])
        ranked = search.rank(RankContext(memory.db, filters, text, settings), replayed)[:TOP_K]
        ids = [turns[c.id][0] for c in ranked]
        evidence = set(q["evidence"])
        row = {f"r@{k}": len(evidence & set(ids[:k])) / len(evidence) for k in KS}
        used, taken = 0, set()
        for c in ranked:
            used += turns[c.id][1]
            if used > BUDGET:
                break
            taken.add(turns[c.id][0])
        row[f"b{BUDGET}"] = len(evidence & taken) / len(evidence)
        rows.append(row)
    return rows


def summary(rows: list[dict[str, float]], qs: list[dict[str, Any]]) -> dict[str, Any]:
    by_cat: dict[str, list[dict[str, float]]] = defaultdict(list)
    for q, row in zip(qs, rows, strict=True):
        by_cat["all"].append(row)
        by_cat[CATEGORIES[q["category"]]].append(row)
    return {
        cat: {"n": len(rs), **{m: round(100 * sum(r[m] for r in rs) / len(rs), 1) for m in METRICS}}
        for cat, rs in by_cat.items()
    }


def cross_validate(
    qs: list[dict[str, Any]], per_value: dict[str, list[dict[str, float]]]
) -> tuple[list[dict[str, float]], dict[str, str]]:
    """Leave one conversation out: each conversation's rows under the value with the best
    R@10 on the other nine. (rows, conversation -> value picked)."""
    convs = sorted({q["sample_id"] for q in qs})
    picked: dict[str, str] = {}
    rows: list[dict[str, float] | None] = [None] * len(qs)
    for held in convs:
        train = [i for i, q in enumerate(qs) if q["sample_id"] != held]
        # On a tie the value listed first (the default) is kept.
        order = list(per_value)
        best = max(
            order, key=lambda v: (sum(per_value[v][i]["r@10"] for i in train), -order.index(v))
        )
        picked[held] = best
        for i, q in enumerate(qs):
            if q["sample_id"] == held:
                rows[i] = per_value[best][i]
    return [r for r in rows if r is not None], picked


def run_variants(
    memory: Memory,
    qs: list[dict[str, Any]],
    legs: list[Any],
    turns: dict[int, tuple[str | None, int]],
    variants: list[Variant],
    log: Callable[[str], None],
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, values in variants:
        per_value = {}
        for value, update in values.items():
            t = time.perf_counter()
            per_value[value] = replay(memory, qs, legs, turns, RetrievalSettings(**update))
            log(
                f"  {name} {value}: R@10 {summary(per_value[value], qs)['all']['r@10']}"
                f" ({time.perf_counter() - t:.0f} s)"
            )
        rows, picked = cross_validate(qs, per_value)
        results[name] = {
            "cv": summary(rows, qs),
            "picked": picked,
            "per_value": {v: summary(r, qs) for v, r in per_value.items()},
        }
    return results


def render(meta: dict[str, Any], results: dict[str, Any]) -> str:
    cats = ["all", *CATEGORIES.values()]
    n = next(iter(results.values()))["cv"]
    heads = " | ".join(f"{c} (n={n[c]['n']})" for c in cats)
    lines = [
        f"# LoCoMo per category, parameters cross-validated by conversation ({meta['embedder']})",
        "",
        f"Measured {meta['date']} with `{meta['command']}` (memcli {meta['revision']}).",
        "Cells: R@5 / R@10 / R@25 / R@50 / recall within 1,000 tokens, in %. A variant with"
        " several values is scored leave-one-conversation-out: the value is picked on the other"
        " nine conversations (best R@10) and scored on the held-out one.",
        "",
        f"| variant | {heads} |",
        "|---" * (len(cats) + 1) + "|",
    ]
    for name, res in results.items():
        cells = [" / ".join(f"{res['cv'][c][m]:.1f}" for m in METRICS) for c in cats]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Values picked per held-out conversation, and each value's all-question R@10"
        " (not cross-validated):",
        "",
    ]
    for name, res in results.items():
        if len(res["per_value"]) > 1:
            picks = ", ".join(f"{c} {v}" for c, v in res["picked"].items())
            each = ", ".join(f"{v}: {s['all']['r@10']}" for v, s in res["per_value"].items())
            lines.append(f"- {name}: {picks} ({each})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embedder", default="e5-small", choices=("e5-small", "minilm", "hash"))
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--out", default=None, help="result file name (default locomo-cv-<embedder>)")
    ap.add_argument("--only", default="", help="comma-separated variant names to run")
    args = ap.parse_args(argv)
    data_path = Path(args.data)
    data = json.loads(data_path.read_text(encoding="utf-8"))
    embedder = get_embedder(args.embedder)
    sparse = default_sparse()
    db_path, _ = cached_database(data_path, embedder, sparse, args.embedder, data, False)
    ingested = {
        s["sample_id"]: {t["dia_id"] for _, turns in sessions(s["conversation"]) for t in turns}
        for s in data
    }
    qs, _ = questions(data, ingested)
    only = {v.strip() for v in args.only.split(",") if v.strip()}
    variants = [v for v in VARIANTS if not only or v[0] in only]
    with open_memory(db_path, embedder, sparse) as memory:
        legs = legs_cache(memory, qs, Path(db_path))
        turns = turn_table(memory)
        results = run_variants(
            memory, qs, legs, turns, variants, lambda line: print(line, file=sys.stderr)
        )
    meta = {
        "embedder": embedder.model_id,
        "revision": git_revision(),
        "date": time.strftime("%Y-%m-%d"),
        "questions": len(qs),
        "command": f"python -m bench.locomo_cv --embedder {args.embedder}",
    }
    markdown = render(meta, results)
    print(markdown)
    if not only:
        out = RESULTS_DIR / (args.out or f"locomo-cv-{args.embedder}")
        out.with_suffix(".md").write_text(markdown, encoding="utf-8")
        out.with_suffix(".json").write_text(
            json.dumps({"meta": meta, "results": results}, indent=2) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
