"""bench/locomo.py's scoring: each question asked with `Memory.query` in its conversation
(optionally inside its last session), recall@k and recall within a token budget, summarised."""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from bench.locomo_data import BUDGETS, CATEGORIES, KS, TOP_K, config_settings, sessions
from memcli import Memory
from memcli.core.tokens import count_tokens
from memcli.retrieval.text import has_recall_cue

# --------------------------------------------------------------------------- scoring


def dia_id_of(event_id: str | None, sample_id: str) -> str | None:
    prefix = f"{sample_id}:"
    if event_id and event_id.startswith(prefix):
        return event_id[len(prefix) :]
    return None


def ask_conversation(memory: Memory, q: dict[str, Any]) -> tuple[list[Any], bool]:
    """The protocol's query: the whole conversation (its tenant). (hits, widened)"""
    result = memory.query(
        q["question"],
        filters=memory.filters(tenant_id=q["sample_id"]),
        top_k=TOP_K,
        record_access=False,
    )
    return result.hits, False


def evaluate(
    memory: Memory,
    qs: list[dict[str, Any]],
    config: str,
    ask: Callable[[Memory, dict[str, Any]], tuple[list[Any], bool]] = ask_conversation,
) -> dict[str, Any]:
    """Ask every question under one configuration; per-question recalls and latencies."""
    memory.retrieval = config_settings(config)
    rows = []
    latencies = []
    for n, q in enumerate(qs, start=1):
        t = time.perf_counter()
        hits, widened = ask(memory, q)
        latencies.append((time.perf_counter() - t) * 1000)
        ranked = [dia_id_of(h.event_id, q["sample_id"]) for h in hits]
        evidence = set(q["evidence"])
        row: dict[str, Any] = {"category": q["category"], "widened": widened}
        for k in KS:
            row[f"r@{k}"] = len(evidence & set(ranked[:k])) / len(evidence)
        costs = [count_tokens(h.text, memory.encoding) for h in hits]
        for budget in BUDGETS:
            taken: set[str | None] = set()
            used = 0
            for dia_id, cost in zip(ranked, costs, strict=True):
                if used + cost > budget:
                    break  # rank order: a lower hit never jumps over a higher one
                used += cost
                taken.add(dia_id)
            row[f"b{budget}"] = len(evidence & taken) / len(evidence)
        # When all hits fit, the budget figure is capped by top_k rather than by tokens.
        row["tokens_top_k"] = sum(costs)
        row["ranked"] = ranked  # for comparing two engines' rankings question by question
        rows.append(row)
        if n % 250 == 0:
            print(f"  {config}: {n}/{len(qs)} questions", file=sys.stderr)
    return {"rows": rows, "latencies_ms": latencies}


def mean_pct(values: list[float]) -> float:
    return round(100 * sum(values) / len(values), 1) if values else float("nan")


def summarise(run: dict[str, Any]) -> dict[str, Any]:
    rows = run["rows"]
    metrics = [f"r@{k}" for k in KS] + [f"b{b}" for b in BUDGETS]
    by_cat: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_cat[row["category"]].append(row)
    lat = sorted(run["latencies_ms"])
    return {
        "overall": {m: mean_pct([r[m] for r in rows]) for m in metrics},
        "by_category": {
            CATEGORIES.get(c, str(c)): {
                "n": len(rs),
                **{m: mean_pct([r[m] for r in rs]) for m in metrics},
            }
            for c, rs in sorted(by_cat.items())
        },
        "budget_capped_by_top_k": {
            str(b): round(sum(r["tokens_top_k"] <= b for r in rows) / len(rows), 3) for b in BUDGETS
        },
        "mean_tokens_top_k": round(statistics.mean(r["tokens_top_k"] for r in rows), 1),
        "widened_share": round(sum(r["widened"] for r in rows) / len(rows), 3),
        "latency_ms": {
            "mean": round(statistics.mean(lat), 2),
            "p50": round(lat[len(lat) // 2], 2),
            "p95": round(lat[min(len(lat) - 1, math.ceil(0.95 * len(lat)) - 1)], 2),
        },
    }


# --------------------------------------------------------------------------- session-scoped

# How a question asked inside the conversation's last session may widen to the user:
#   none       never (`widen=False`): the last session only
#   all-legs   memcli's earlier rule: a recall cue, or fewer than `min_session_hits`
#              ranked hits over every leg (emulated: the session pass, then the user pass)
#   full-text  the rule now (the evolution plan): a recall cue, or fewer than `min_session_hits`
#              full-text (lexical + trigram) hits in the session (`Memory.query` as shipped)
SESSION_RULES = ("none", "all-legs", "full-text")


def last_sessions(data: list[dict[str, Any]], max_sessions: int | None) -> dict[str, str]:
    """Each conversation's last ingested session id."""
    last = {}
    for sample in data:
        number = sessions(sample["conversation"])[:max_sessions][-1][0]
        last[sample["sample_id"]] = f"{sample['sample_id']}:session_{number}"
    return last


def session_ask(
    rule: str, last: dict[str, str]
) -> Callable[[Memory, dict[str, Any]], tuple[list[Any], bool]]:
    """The question asked with the session set to its conversation's last session."""

    def ask(memory: Memory, q: dict[str, Any]) -> tuple[list[Any], bool]:
        session = memory.filters(tenant_id=q["sample_id"], session_id=last[q["sample_id"]])
        if rule == "full-text":
            result = memory.query(q["question"], filters=session, top_k=TOP_K, record_access=False)
            return result.hits, result.scope == "user"
        result = memory.query(
            q["question"], filters=session, top_k=TOP_K, widen=False, record_access=False
        )
        thin = len(result.hits) < memory.retrieval.min_session_hits  # top_k 50 > 3: = ranked
        if rule == "all-legs" and (has_recall_cue(q["question"]) or thin):
            user = memory.filters(tenant_id=q["sample_id"], user_id=q["sample_id"])
            result = memory.query(
                q["question"], filters=user, top_k=TOP_K, widen=False, record_access=False
            )
            return result.hits, True
        return result.hits, False

    return ask


