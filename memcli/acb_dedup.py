"""Exact and near-duplicate evidence: one bundle item for a sentence said several times.

Seed 003 A12 ("dedupe prevention: token stability"): the same sentence said in three turns must
take one evidence slot, not three. Two memories are duplicates when

- their normalised texts are equal (NFKC, case-folded, word tokens joined by one space: case,
  punctuation and spacing differences collapse), or
- their word-token sets have a Jaccard similarity >= 0.9 and the tokens that differ hold no
  digit and no negation. 0.9 means one differing token per ~10 distinct ones, so a short
  sentence only collapses when equal after normalisation; the digit and negation guards keep
  "the budget is 40" apart from "the budget is 45" and "we will ship on friday" apart from "we
  will not ship on friday" however long the sentence is (those are the one-word edits that
  change what a sentence says).

The kept item is the best-ranked one; it cites the refs of every duplicate. Candidates are
found with a prefix filter (for Jaccard >= t, two sets share a token among the first
|A| - ceil(t |A|) + 1 of each in one fixed order), so a bundle never compares all pairs.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

NEAR_JACCARD = 0.9
_WORD = re.compile(r"\w+")
# Word tokens split "don't" into "don" and "t": the lone "t" stands for every n't.
NEGATIONS = frozenset("no not never none nothing nobody nor neither without cannot t".split())

Signature = tuple[str, frozenset[str]]


def signature(text: str) -> Signature:
    """(normalised text, token set) of a memory's text."""
    tokens = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    return " ".join(tokens), frozenset(tokens)


def _prefix(tokens: frozenset[str]) -> list[str]:
    ordered = sorted(tokens)
    return ordered[: len(ordered) - math.ceil(NEAR_JACCARD * len(ordered)) + 1]


def near(a: frozenset[str], b: frozenset[str]) -> bool:
    if not a or not b or min(len(a), len(b)) < NEAR_JACCARD * max(len(a), len(b)):
        return False
    if len(a & b) < NEAR_JACCARD * len(a | b):
        return False
    return not any(t in NEGATIONS or any(c.isdigit() for c in t) for t in a ^ b)


class Collapser:
    """Items kept so far, looked up by exact text, then by near-duplicate token set."""

    def __init__(self) -> None:
        self._exact: dict[str, dict[str, Any]] = {}
        self._by_token: dict[str, list[tuple[frozenset[str], dict[str, Any]]]] = {}

    def find(self, sig: Signature) -> dict[str, Any] | None:
        text, tokens = sig
        if not text:
            return None
        if text in self._exact:
            return self._exact[text]
        seen: set[int] = set()
        for token in _prefix(tokens):
            for other, item in self._by_token.get(token, ()):
                if id(item) not in seen:
                    seen.add(id(item))
                    if near(tokens, other):
                        return item
        return None

    def add(self, sig: Signature, item: dict[str, Any]) -> None:
        text, tokens = sig
        if not text:
            return
        self._exact.setdefault(text, item)
        for token in _prefix(tokens):
            self._by_token.setdefault(token, []).append((tokens, item))


def absorb(kept: dict[str, Any], duplicate: dict[str, Any]) -> None:
    """The kept item cites the duplicate's refs (its text, and so its tokens, stay as they are)."""
    kept["refs"].extend(r for r in duplicate["refs"] if r not in kept["refs"])
    if duplicate.get("memory_id") is not None:
        kept.setdefault("duplicates", []).append(duplicate["memory_id"])
