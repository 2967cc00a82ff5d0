"""Paraphrase or contradiction: wrong merges and missed merges on a labelled set of fact pairs.

    python -m bench.dedup_pairs                              # this checkout, e5-small
    python -m bench.dedup_pairs --before PATH.json           # and a table against an older run

The pairs are tests/fixtures/dedup/pairs.jsonl: 64 contradicting pairs (a negation, a number or
date, a name or a tense changed) and 62 paraphrases (words added or dropped, contractions, word
order, other words for the same thing), each a stored fact and a new one. Two paths decide:

- `remember`: through the library on a real SQLite file (one user per pair): remember the
  stored fact, then the new one; the answer's status is merged, superseded (created with
  `supersedes`), proposed (consent) or created;
- consolidation's model-free step (`dedup.classify`, default lifecycle settings): the stored
  fact with its e5-small vector against the new one: merge, supersede, ask the model (a pair
  check), or add.

A wrong merge is a contradiction merged; a missed merge is a paraphrase not merged (on the
consolidation path, a paraphrase sent to the model is counted apart: the model may merge it).

The code before a change is measured by running this file with that code first on the path:

    git archive <commit> | tar -x -C /tmp/before && cp bench/dedup_pairs.py /tmp/before/bench/
    (cd /tmp/before && python -m bench.dedup_pairs \
        --pairs $OLDPWD/tests/fixtures/dedup/pairs.jsonl --label <commit> \
        --json $OLDPWD/bench/results/dedup-pairs-before.json --no-report)
    python -m bench.dedup_pairs --before bench/results/dedup-pairs-before.json

Results: bench/results/dedup-pairs.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memcli import Memory
from memcli.config import LifecycleSettings
from memcli.derived.textrules import tokens
from memcli.lifecycle import dedup
from memcli.lifecycle.remember import remember
from memcli.providers.embedders import get_embedder

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "tests" / "fixtures" / "dedup" / "pairs.jsonl"
RESULTS = ROOT / "bench" / "results"


def remember_path(pairs: list[dict[str, Any]], cfg: LifecycleSettings) -> list[str]:
    out = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        Memory.open(Path(tmp) / "pairs.db", embedder=get_embedder("hash")) as memory,
    ):
        for i, pair in enumerate(pairs):
            user = f"pair{i}"
            remember(memory, cfg, text=pair["stored"], user_id=user)
            got = remember(memory, cfg, text=pair["new"], user_id=user)
            if got["status"] == "merged":
                out.append("merge")
            elif got.get("supersedes"):
                out.append("supersede")
            elif got["status"] == "pending":
                out.append("propose")
            else:
                out.append("add")
    return out


def classify_path(pairs: list[dict[str, Any]], cfg: LifecycleSettings, embedder: str) -> list[str]:
    model = get_embedder(embedder)
    texts = [t for p in pairs for t in (p["stored"], p["new"])]
    vectors = model.embed_documents(texts).astype("float32")
    out = []
    for i, pair in enumerate(pairs):
        stored = dedup.Stored(
            i,
            pair["stored"],
            "fact",
            "knowledge",
            {},
            "2025-01-01T00:00:00Z",
            tokens(pair["stored"]),
            vectors[2 * i],
        )
        fact = dedup.NewFact("fact", "knowledge", pair["new"], 0.5, [1])
        fact.vector = vectors[2 * i + 1]
        dedup.classify(fact, [stored], cfg)
        if fact.action in ("merge", "supersede"):
            out.append(fact.action)
        else:
            out.append("ask" if fact.checks else "add")
    return out


def score(pairs: list[dict[str, Any]], actions: list[str]) -> dict[str, Any]:
    contra = [(p, a) for p, a in zip(pairs, actions, strict=True) if p["label"] == "contradicts"]
    para = [(p, a) for p, a in zip(pairs, actions, strict=True) if p["label"] == "paraphrase"]
    return {
        "contradictions": len(contra),
        "wrong_merges": sum(a == "merge" for _, a in contra),
        "wrong_merges_by_cue": dict(
            sorted(Counter(p["cue"] for p, a in contra if a == "merge").items())
        ),
        "contradictions_superseded": sum(a in ("supersede", "propose") for _, a in contra),
        "contradictions_asked": sum(a == "ask" for _, a in contra),
        "paraphrases": len(para),
        "missed_merges": sum(a != "merge" for _, a in para),
        "missed_merges_asked": sum(a == "ask" for _, a in para),
        "missed_merges_by_cue": dict(
            sorted(Counter(p["cue"] for p, a in para if a != "merge").items())
        ),
        "paraphrases_superseded": sum(a in ("supersede", "propose") for _, a in para),
    }


def run(pairs_path: Path, embedder: str, label: str) -> dict[str, Any]:
    pairs = [json.loads(line) for line in pairs_path.read_text(encoding="utf-8").splitlines()]
    cfg = LifecycleSettings()
    remembered = remember_path(pairs, cfg)
    classified = classify_path(pairs, cfg, embedder)
    return {
        "label": label,
        "measured": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "embedder": embedder,
        "pairs": len(pairs),
        "remember": score(pairs, remembered),
        "consolidate": score(pairs, classified),
        "actions": {"remember": remembered, "consolidate": classified},
    }


ROWS = [
    ("wrong merges (contradictions merged)", "wrong_merges", "contradictions"),
    ("contradictions superseded (or proposed)", "contradictions_superseded", "contradictions"),
    ("contradictions sent to the model", "contradictions_asked", "contradictions"),
    ("missed merges (paraphrases not merged)", "missed_merges", "paraphrases"),
    ("of which sent to the model", "missed_merges_asked", "paraphrases"),
    ("paraphrases superseded", "paraphrases_superseded", "paraphrases"),
]


def report(after: dict[str, Any], before: dict[str, Any] | None) -> str:
    lines = [
        "# Paraphrase or contradiction: wrong and missed merges",
        "",
        f"Measured {after['measured']} with `python -m bench.dedup_pairs"
        + (" --before bench/results/dedup-pairs-before.json`" if before else "`")
        + f" ({after['pairs']} labelled pairs, tests/fixtures/dedup/pairs.jsonl; embedder "
        f"`{after['embedder']}` on the consolidation path)."
        + (
            f" Before: the same file run on commit {before['label']} (see the module docstring)."
            if before
            else ""
        ),
        "",
    ]
    for path, title in (
        ("remember", "`remember` (model-free)"),
        ("consolidate", "consolidation's model-free step (`dedup.classify`)"),
    ):
        lines += [
            f"## {title}",
            "",
            "| | " + ("before | after |" if before else "now |"),
            "|---|" + ("---|---|" if before else "---|"),
        ]
        for name, key, total in ROWS:
            cells = []
            for run_ in [before, after] if before else [after]:
                s = run_[path]
                cells.append(f"{s[key]} / {s[total]}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        for key in ("wrong_merges_by_cue", "missed_merges_by_cue"):
            parts = []
            for run_, tag in [(before, "before"), (after, "after")] if before else [(after, "now")]:
                parts.append(f"{tag}: {json.dumps(run_[path][key])}")
            lines.append("")
            lines.append(f"{key.replace('_', ' ')}: " + "; ".join(parts))
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=Path, default=PAIRS)
    parser.add_argument("--embedder", default="e5-small")
    parser.add_argument("--label", default="after")
    parser.add_argument("--json", type=Path, default=RESULTS / "dedup-pairs.json")
    parser.add_argument("--before", type=Path, help="an earlier run's JSON, to compare with")
    parser.add_argument("--no-report", action="store_true", help="write the JSON only")
    args = parser.parse_args()
    after = run(args.pairs, args.embedder, args.label)
    before = json.loads(args.before.read_text(encoding="utf-8")) if args.before else None
    args.json.write_text(
        json.dumps({"after": after, "before": before} if before else after, indent=1) + "\n",
        encoding="utf-8",
    )
    if not args.no_report:
        text = report(after, before)
        (RESULTS / "dedup-pairs.md").write_text(text, encoding="utf-8")
        print(text)


if __name__ == "__main__":
    main()
