"""bench/locomo.py's markdown reports (bench/results/locomo-<embedder>*.md) and result files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.locomo_data import BUDGETS, DRAGON, ENGINE_TITLE, KS, REPO_ROOT, TOP_K


def _metric_heads() -> str:
    return " | ".join([f"R@{k}" for k in KS] + [f"{b} tok" for b in BUDGETS])


def _recall_row(name: str, res: dict[str, Any], *extra: str) -> str:
    """A table row: R@k, recall within each token budget, any extra cells, mean query ms."""
    o = res["overall"]
    cells = [f"{o[f'r@{k}']:.1f}" for k in KS] + [f"{o[f'b{b}']:.1f}" for b in BUDGETS]
    return f"| {name} | " + " | ".join([*cells, *extra, f"{res['latency_ms']['mean']:.1f}"]) + " |"


def render_session_markdown(meta: dict[str, Any], results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "## Session-scoped questions (session = the conversation's last session)",
        "",
        "Each question asked with `session_id` set to its conversation's last session, under"
        " each widening rule: `none` (the session only), `all-legs` (memcli's earlier rule:"
        " a recall cue or fewer than 3 ranked hits over every leg), `full-text` (now, the"
        " evolution plan: a recall cue or fewer than 3 lexical/trigram hits in the session)."
        " `widened`: share of questions that widened to the user.",
        "",
        f"| config / rule | {_metric_heads()} | widened | query ms |",
        "|---" * (len(KS) + len(BUDGETS) + 3) + "|",
    ]
    for name, res in results.items():
        lines.append(_recall_row(name, res, f"{100 * res['widened_share']:.0f}%"))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- report


def git_revision() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "memcli"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{rev}{' + uncommitted memcli changes' if dirty else ''}"


def render_markdown(meta: dict[str, Any], results: dict[str, dict[str, Any]]) -> str:
    ing = meta["ingest"]
    lines = [
        f"# LoCoMo evidence recall: memcli{ENGINE_TITLE.get(meta.get('engine'), '')},"
        f" embedder `{meta['embedder']}`, sparse `{meta['sparse']}`",
        "",
        f"Measured {meta['date']} with `{meta.get('command', 'python -m bench.locomo')}`"
        f" (memcli {meta['revision']}; {meta['machine']};"
        f" OMP_WAIT_POLICY={meta['omp_wait_policy']}).",
        f"{meta['counts']['questions']:,} questions with evidence out of "
        f"{meta['counts']['qa_items']:,} QA items ({meta['counts']['questions_without_evidence']}"
        f" without usable evidence, {meta['counts']['evidence_ids_dropped']} unusable evidence"
        f" ids dropped); {ing['turns']:,} turns ingested as {ing['memories']:,} memories"
        f" ({ing['rejected']} rejected) in {ing['ingest_s']} s wall time"
        f" ({ing.get('ingest_cpu_s', '?')} s CPU, 1-minute load average"
        f" {ing.get('load_avg_1m', '?')})"
        f"{' (cached database; figures of its build)' if ing.get('cached') else ''}.",
        "Recall in %; the question's evidence turns found in the top k hits (R@k) or in the hits"
        " that fit a token budget (cl100k tokens of the hit texts, rank order, top "
        f"{TOP_K} hits at most). Latency: mean wall time of one `Memory.query` call (1-minute"
        f" load average {meta['load_avg_queries']} at the end of the queries).",
        "",
        f"| config | {_metric_heads()} | query ms |",
        "|---" * (len(KS) + len(BUDGETS) + 2) + "|",
    ]
    for name, res in results.items():
        lines.append(_recall_row(name, res))
    lines.append(
        "| DRAGON (paper, Table 3) | "
        + " | ".join(f"{DRAGON[k]:.1f}" if k in DRAGON else "" for k in KS)
        + " |" * (len(BUDGETS) + 2)
    )
    lines += ["", f"## By category ({' / '.join(f'R@{k}' for k in KS)})", ""]
    cats = next(iter(results.values()))["by_category"]
    lines.append("| config | " + " | ".join(f"{c} (n={v['n']})" for c, v in cats.items()) + " |")
    lines.append("|---" * (len(cats) + 1) + "|")
    for name, res in results.items():
        cells = [" / ".join(f"{v[f'r@{k}']:.1f}" for k in KS) for v in res["by_category"].values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    capped = {name: res["budget_capped_by_top_k"]["2000"] for name, res in results.items()}
    lines += [
        "",
        f"Share of questions whose top {TOP_K} hits total at most 2,000 tokens (the 2,000-token"
        " figure is then capped by top_k, not by the budget): "
        + ", ".join(f"{n} {100 * v:.0f}%" for n, v in capped.items())
        + ".",
        "",
    ]
    return "\n".join(lines)


def write_result(out: Path, markdown: str, meta: dict[str, Any], results: dict[str, Any]) -> None:
    out.with_suffix(".md").write_text(markdown, encoding="utf-8")
    out.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2) + "\n", encoding="utf-8"
    )
    print(f"wrote {out.relative_to(REPO_ROOT)}.md and .json", file=sys.stderr)


