"""Credential redaction, measured: kinds caught, false positives on conversation, cost per event.

    python -m bench.secrets --data /path/to/locomo10.json         # table on stdout
    python -m bench.secrets --data /path/to/locomo10.json \
        --json bench/results/secrets.json --md bench/results/secrets.md

Engines, each measured in the same run on the same texts:

- `before`: memcli's redaction at a git revision (`--before`, default `main`), loaded from
  `git show REV:memcli/policy/secrets.py` (the reference the ratios are taken against);
- `memcli`: this checkout's redaction (memcli's own rules, sentences, check-digit numbers and
  gitleaks' rule set);
- `gitleaks`: gitleaks' rules alone, as memcli runs them; `gitleaks+generic`: with the
  `generic-api-key` rule memcli leaves out;
- `detect-secrets`: Yelp's detect-secrets with its default plugins (when installed:
  `pip install detect-secrets`), each text scanned as `detect-secrets scan` scans a file's
  lines (with its default filters).

Kinds caught: of the kinds in tests/support/secrets_corpus.py (real-shaped fake values in their
sentences, `--seeds` draws of each), the kinds whose every draw lost all of its random parts.
False positives: the share of LoCoMo's 5,882 conversation turns a redaction changed (or, for
detect-secrets, reported a finding in). Cost: mean CPU microseconds per text over the LoCoMo
turns (best of `--repeat` passes, the engines' passes interleaved), and the ratio to `before`.
The LoCoMo file is read where it lies (never copied).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.locomo_data import DEFAULT_DATA
from memcli.policy import gitleaks
from tests.support.secrets_corpus import corpus

REPO = Path(__file__).resolve().parent.parent

Redactor = Callable[[str], str]  # text -> what is left of it (for detect-secrets: "" if found)


def turns(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    return [
        turn["text"]
        for sample in data
        for key, session in sample["conversation"].items()
        if key.startswith("session_") and isinstance(session, list)
        for turn in session
    ]


def before(rev: str) -> Redactor:
    """The redaction of revision `rev`, from its own source (it imports nothing of memcli)."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:memcli/policy/secrets.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType("memcli_secrets_before")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:memcli/policy/secrets.py", "exec"), module.__dict__)
    return lambda text: module.redact(text).text


def memcli_now() -> Redactor:
    from memcli.policy.secrets import redact

    return lambda text: redact(text).text


def gitleaks_only(generic: bool) -> Redactor:
    """gitleaks' rules alone, with memcli's prefilter, span merging and markers."""
    import ahocorasick

    from memcli.policy import secrets

    rules, common = gitleaks.rules()
    if generic:
        data = gitleaks.tomllib.loads(gitleaks.RULES_FILE.read_text())
        rules = (
            *rules,
            *(gitleaks._rule(r) for r in data["rules"] if r["id"] == "generic-api-key"),
        )
    automaton = ahocorasick.Automaton()
    wakes: dict[str, list[int]] = {}
    for i, rule in enumerate(rules):
        for word in rule.keywords:
            wakes.setdefault(word, []).append(i)
    for word, orders in wakes.items():
        automaton.add_word(word, tuple(orders))
    automaton.make_automaton()

    def redact(text: str) -> str:
        woken: set[int] = set()
        for _, orders in automaton.iter(text.lower()):
            woken.update(orders)
        markers = secrets._Markers(text)
        found = []
        for order in sorted(woken):
            rule = rules[order]
            check = lambda m, t, r=rule: r.span(m, t, common)  # noqa: E731
            for kind, start, end in secrets._detect(rule.pattern, check, text, markers):
                found.append((start, end, order, kind))
        out, pos = [], 0
        for start, end, kind in secrets._merge(found):
            out += [text[pos:start], secrets.marker(kind)]
            pos = end
        return "".join(out) + text[pos:]

    return redact


def detect_secrets() -> Redactor | None:
    try:
        from detect_secrets.core.scan import _process_line_based_plugins
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    settings = default_settings()
    settings.__enter__()  # held for the whole run: the plugins are read from it

    def redact(text: str) -> str:
        # What `detect-secrets scan` does to each line of a file, with every default filter
        # (its ad hoc `scan_line` searches eagerly and reports every word of prose).
        lines = list(enumerate(text.splitlines() or [""], 1))
        found = [f.secret_value or "" for f in _process_line_based_plugins(lines, "memory.txt")]
        # A finding removes the values it names; the rest of the text stays.
        for value in found:
            if value:
                text = text.replace(value, "[REDACTED]")
        return text

    redact.settings = settings  # type: ignore[attr-defined]  # alive as long as `redact`
    return redact


def caught(redact: Redactor, seeds: int) -> tuple[int, int, list[str]]:
    kinds: dict[str, bool] = {}
    for seed in range(seeds):
        for planted in corpus(seed):
            left = redact(planted.text)
            ok = not any(needle in left for needle in planted.needles)
            kinds[planted.kind] = kinds.get(planted.kind, True) and ok
    missed = sorted(k for k, ok in kinds.items() if not ok)
    return len(kinds) - len(missed), len(kinds), missed


def cost(redact: Redactor, texts: list[str]) -> float:
    """Mean CPU microseconds per text over one pass (process time: what redaction adds to an
    import's CPU, less disturbed than wall time by the other work of a shared machine)."""
    t0 = time.process_time()
    for text in texts:
        redact(text)
    return (time.process_time() - t0) / len(texts) * 1e6


def measure(data: Path, rev: str, seeds: int, repeat: int) -> dict[str, Any]:
    texts = turns(data)
    engines: dict[str, Redactor | None] = {
        "before": before(rev),
        "memcli": memcli_now(),
        "gitleaks": gitleaks_only(generic=False),
        "gitleaks+generic": gitleaks_only(generic=True),
        "detect-secrets": detect_secrets(),
    }
    out: dict[str, Any] = {"turns": len(texts), "before": rev, "seeds": seeds, "engines": {}}
    for name, redact in engines.items():
        if redact is None:
            out["engines"][name] = {"skipped": "not installed"}
            continue
        print(f"-- {name}", file=sys.stderr, flush=True)
        touched = [i for i, t in enumerate(texts) if redact(t) != t]
        got, of, missed = caught(redact, seeds)
        out["engines"][name] = {
            "kinds_caught": got,
            "kinds": of,
            "missed": missed,
            "turns_touched": len(touched),
            "touched_share": len(touched) / len(texts),
            "touched_turns": touched[:20],
            "us_per_turn": float("inf"),
        }
    # Timed passes alternate between engines, so a busy moment of the machine falls on all of
    # them; each keeps its best pass. detect-secrets takes ~100x longer: one pass ranks it.
    for rep in range(repeat):
        for name, redact in engines.items():
            row = out["engines"][name]
            if redact is not None and (rep == 0 or name != "detect-secrets"):
                row["us_per_turn"] = min(row["us_per_turn"], cost(redact, texts))
    ref = out["engines"]["before"]["us_per_turn"]
    for row in out["engines"].values():
        if "us_per_turn" in row:
            row["ratio_to_before"] = row["us_per_turn"] / ref
    return out


def table(out: dict[str, Any]) -> str:
    lines = [
        f"{out['turns']} LoCoMo turns; corpus kinds x {out['seeds']} draws; "
        f"before = {out['before']}",
        "",
        "| engine | kinds caught | LoCoMo turns touched | us per turn | vs before |",
        "|---|---|---|---|---|",
    ]
    for name, row in out["engines"].items():
        if "skipped" in row:
            lines.append(f"| {name} | {row['skipped']} | | | |")
            continue
        lines.append(
            f"| {name} | {row['kinds_caught']} of {row['kinds']} | {row['turns_touched']} "
            f"({row['touched_share']:.2%}) | {row['us_per_turn']:.1f} | "
            f"{row['ratio_to_before']:.2f} |"
        )
    lines.append("")
    for name, row in out["engines"].items():
        if row.get("missed"):
            lines.append(f"- {name} misses: {', '.join(row['missed'])}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10.json")
    parser.add_argument("--before", default="main", help="the git revision measured as before")
    parser.add_argument("--seeds", type=int, default=20, help="draws of each corpus kind")
    parser.add_argument("--repeat", type=int, default=5, help="timed passes (best is kept)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--md", type=Path, help="write the table here")
    args = parser.parse_args()
    out = measure(args.data, args.before, args.seeds, args.repeat)
    text = table(out)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    if args.md:
        args.md.write_text(
            f"# Credential redaction\n\n```\npython -m bench.secrets --data "
            f"{args.data.name}\n```\n\n{text}\n"
        )


if __name__ == "__main__":
    main()
