"""Credentials found by gitleaks' rule set, read as data.

gitleaks keeps the most complete open rule set for credentials (222 rules: cloud keys, CI tokens,
package registries, chat webhooks...), maintained as one file by its community. memcli ships
that file unchanged (`rules/gitleaks.toml`, MIT; `rules/NOTICE` names the commit) and applies it
the way gitleaks does:

- a rule runs only when one of its keywords occurs in the lower-cased text (one Aho-Corasick pass
  finds every keyword at once, as in gitleaks' own prefilter);
- the secret is the rule's `secretGroup`, or else its first non-empty group, or else the match;
- a secret whose Shannon entropy is at or below the rule's `entropy` is dropped;
- the global and the rule's allowlists drop known placeholders (their regexes against the
  secret, the match or the line, and their stop words). Allowlists tied to file paths or commits
  never apply here: a memory has neither.

The regexes are Go RE2 syntax (scoped inline flags, `[[:alnum:]]`, `\\z`): Python's `re` rejects
25 of them and silently misreads `[[:alnum:]]`, so they are compiled with `regex`, which reads
all of them as RE2 does, each on its first use.

One change is made when a rule is compiled, because memories are prose rather than source code:
gitleaks ends a token at a quote, a blank, `;` or the end of the text, and memcli also ends it at
sentence punctuation (`.`, `,`, `:`, `!`, `?`, closing brackets), so "my npm token is npm_....".
is found. Rules left out are in `SKIPPED`, with the reason.
"""

from __future__ import annotations

import math
import tomllib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["SKIPPED", "Rule", "entropy", "rules"]

RULES_FILE = Path(__file__).with_name("rules") / "gitleaks.toml"

SKIPPED = {
    # Any `key|token|secret|auth|access ... = <10+ characters>` above 3.5 bits of entropy: of the
    # corpus it adds only labelled values, which memcli's own rule finds already, for about 15 %
    # more time (bench/results/secrets.md).
    "generic-api-key": "covered by memcli's labelled values",
    "pkcs12-file": "matches file paths only",
}

# gitleaks' end of a token in source code, and the same with sentence punctuation added.
_CODE_END = r"""(?:[\x60'"\s;]|\\[nr]|$)"""
_PROSE_END = r"""(?:[\x60'"\s;.,:!?)\]}>]|\\[nr]|$)"""


def entropy(value: str) -> float:
    """Shannon entropy of `value` in bits per character (gitleaks' `shannonEntropy`)."""
    if not value:
        return 0.0
    size = len(value)
    return -sum(n / size * math.log2(n / size) for n in Counter(value).values())


def _compile(source: str) -> Any:
    # `regex` costs ~10 ms to import: only a process that redacts something pays it, not every
    # command that imports the write path.
    import regex  # noqa: PLC0415 - with the rules, on the first redaction

    return regex.compile(source)


class _Lazy:
    """A regex compiled on its first search: most rules never see their keyword."""

    __slots__ = ("_compiled", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self._compiled: Any = None

    def search(self, text: str, pos: int = 0) -> Any:
        if self._compiled is None:
            self._compiled = _compile(self.source)
        return self._compiled.search(text, pos)


@dataclass(frozen=True, slots=True)
class _Allow:
    """One allowlist: it drops a finding when its regexes or its stop words say so."""

    target: str  # "secret", "match" or "line": what the regexes are matched against
    regexes: tuple[Any, ...]
    stopwords: tuple[str, ...]
    every: bool  # condition AND: every check given must hold
    elsewhere: bool  # also names paths or commits, which a memory never has

    def allows(self, secret: str, match: str, line: str) -> bool:
        target = match if self.target == "match" else line if self.target == "line" else secret
        by_regex = any(r.search(target) for r in self.regexes)
        lowered = secret.lower()
        by_word = any(w in lowered for w in self.stopwords)
        if not self.every:
            return by_regex or by_word
        if self.elsewhere:
            return False  # a path or commit condition that cannot hold
        checks = ([by_regex] if self.regexes else []) + ([by_word] if self.stopwords else [])
        return bool(checks) and all(checks)


def _allow(spec: dict[str, Any]) -> _Allow:
    return _Allow(
        target=spec.get("regexTarget", "secret"),
        regexes=tuple(_compile(r) for r in spec.get("regexes", ())),
        stopwords=tuple(w.lower() for w in spec.get("stopwords", ())),
        every=spec.get("condition", "OR").upper() == "AND",
        elsewhere=bool(spec.get("paths") or spec.get("commits")),
    )


@dataclass(frozen=True, slots=True)
class Rule:
    """One gitleaks rule, ready to run: `kind` is its id in memcli's marker spelling."""

    kind: str
    keywords: tuple[str, ...]
    pattern: _Lazy
    entropy: float
    group: int
    allowlists: tuple[_Allow, ...]

    def span(self, m: Any, text: str, common: Iterable[_Allow]) -> tuple[str, int, int] | None:
        """The secret `m` holds, as (kind, start, end), or None when gitleaks would drop it."""
        group = self.group or next((i for i, g in enumerate(m.groups(), 1) if g), 0)
        secret = m.group(group)
        if self.entropy and entropy(secret) <= self.entropy:
            return None
        start, end = m.span(group)
        line = text[text.rfind("\n", 0, m.start()) + 1 : _line_end(text, m.end())]
        for allow in (*common, *self.allowlists):
            if allow.allows(secret, m.group(), line):
                return None
        return self.kind, start, end


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


def _rule(spec: dict[str, Any]) -> Rule:
    return Rule(
        kind=spec["id"].replace("-", "_"),
        keywords=tuple(k.lower() for k in spec.get("keywords", ())),
        pattern=_Lazy(spec["regex"].replace(_CODE_END, _PROSE_END)),
        entropy=float(spec.get("entropy", 0.0)),
        group=int(spec.get("secretGroup", 0)),
        allowlists=tuple(_allow(a) for a in spec.get("allowlists", ())),
    )


@cache
def rules() -> tuple[tuple[Rule, ...], tuple[_Allow, ...]]:
    """The rules memcli runs (every rule with a regex, less `SKIPPED`) and the global allowlist.

    Read once per process, on the first redaction (about 20 ms of CPU, half of it the TOML
    parse).
    """
    with RULES_FILE.open("rb") as f:
        data = tomllib.load(f)
    kept = tuple(_rule(r) for r in data["rules"] if "regex" in r and r["id"] not in SKIPPED)
    common = data.get("allowlist")
    return kept, ((_allow(common),) if common else ())
