"""Credential redaction, measured: kinds caught, false positives on conversation, cost per turn.

    python -m bench.secrets --data /path/to/locomo10.json     # a table on stdout
    python -m bench.secrets --data /path/to/locomo10.json --json out.json

Run it after updating the shipped gitleaks rules (memcli/policy/rules/NOTICE). Kinds caught:
of the kinds in tests/support/secrets_corpus.py (real-shaped fake values in their sentences,
`--seeds` draws of each), the kinds whose every draw lost all of its random parts. False
positives: the LoCoMo conversation turns (5,882) that redaction changed. Cost: mean CPU
microseconds per turn, the best of `--repeat` passes. The LoCoMo file is read where it lies
(never copied). The comparison with gitleaks' rules alone and detect-secrets that chose this
design is bench/results/secrets.md (bench/results/experiments.md names its code's commit).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.locomo_data import DEFAULT_DATA
from memcli.policy.secrets import redact
from tests.support.secrets_corpus import corpus


def turns(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    return [turn["text"] for sample in data
            for key, session in sample["conversation"].items()
            if key.startswith("session_") and isinstance(session, list) for turn in session]


def caught(seeds: int) -> tuple[int, int, list[str]]:
    kinds: dict[str, bool] = {}
    for seed in range(seeds):
        for planted in corpus(seed):
            left = redact(planted.text).text
            ok = not any(needle in left for needle in planted.needles)
            kinds[planted.kind] = kinds.get(planted.kind, True) and ok
    missed = sorted(k for k, ok in kinds.items() if not ok)
    return len(kinds) - len(missed), len(kinds), missed


def cost(texts: list[str]) -> float:
    """Mean CPU microseconds per text over one pass (process time: what redaction adds to an
    import's CPU, less disturbed than wall time by the other work of a shared machine)."""
    t0 = time.process_time()
    for text in texts:
        redact(text)
    return (time.process_time() - t0) / len(texts) * 1e6


def measure(data: Path, seeds: int, repeat: int) -> dict[str, Any]:
    texts = turns(data)
    touched = [i for i, text in enumerate(texts) if redact(text).text != text]
    got, of, missed = caught(seeds)
    return {"turns": len(texts), "seeds": seeds, "kinds_caught": got, "kinds": of,
            "missed": missed, "turns_touched": len(touched), "touched_turns": touched[:20],
            "us_per_turn": min(cost(texts) for _ in range(repeat))}


def table(out: dict[str, Any]) -> str:
    lines = [f"{out['turns']} LoCoMo turns; corpus kinds x {out['seeds']} draws", "",
             "| kinds caught | LoCoMo turns touched | us per turn |", "|---|---|---|",
             f"| {out['kinds_caught']} of {out['kinds']} | {out['turns_touched']} "
             f"({out['turns_touched'] / out['turns']:.2%}) | {out['us_per_turn']:.1f} |"]
    if out["missed"]:
        lines += ["", f"Missed: {', '.join(out['missed'])}"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10.json")
    parser.add_argument("--seeds", type=int, default=20, help="draws of each corpus kind")
    parser.add_argument("--repeat", type=int, default=5, help="timed passes (best is kept)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if not args.data.is_file():
        print(f"bench.secrets: no LoCoMo file at {args.data} (--data PATH)", file=sys.stderr)
        return 2
    out = measure(args.data, args.seeds, args.repeat)
    print(table(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    return 0 if not out["missed"] else 1


if __name__ == "__main__":
    sys.exit(main())
