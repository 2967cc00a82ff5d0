"""Exact and near-duplicate evidence: one bundle item for a sentence said several times.

Acceptance scenario A12 of the Agent Memory System PRD ("dedupe prevention: token stability"):
the same sentence said in three turns must take one evidence slot, not three. Two memories are
duplicates when

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
Signatures are computed only for items about to take a slot (a duplicate of an item that did
not fit would not fit either), and ASCII text skips NFKC (which cannot change it).
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

Signature = tuple[str, frozenset[str], tuple[str, ...]]  # text, token set, prefix


def signature(text: str) -> Signature:
    """(normalised text, token set, prefix-filter tokens) of a memory's text.

    The prefix order is longest word first, then the word (a total order, the same in every
    process): any fixed order is exact, and long words, being rarer, keep the lists a text is
    compared against short ("the" would make every text a candidate of every other)."""
    words = _WORD.findall(
        text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).casefold()
    )
    unique = frozenset(words)
    ordered = sorted(sorted(unique), key=len, reverse=True)  # stable: ties stay alphabetical
    keep = len(ordered) - math.ceil(NEAR_JACCARD * len(ordered)) + 1
    return " ".join(words), unique, tuple(ordered[:keep])


def near(a: frozenset[str], b: frozenset[str]) -> bool:
    """Jaccard >= NEAR_JACCARD, and no digit or negation among the tokens that differ."""
    if not a or not b or min(len(a), len(b)) < NEAR_JACCARD * max(len(a), len(b)):
        return False
    shared = len(a & b)
    if shared < NEAR_JACCARD * (len(a) + len(b) - shared):
        return False
    return not any(t in NEGATIONS or any(c.isdigit() for c in t) for t in a ^ b)


class Collapser:
    """Items kept so far, looked up by exact text, then by near-duplicate token set."""

    def __init__(self) -> None:
        self._exact: dict[str, dict[str, Any]] = {}
        self._by_token: dict[str, list[tuple[int, frozenset[str], dict[str, Any]]]] = {}
        self._count = 0

    def find(self, sig: Signature) -> dict[str, Any] | None:
        text, tokens, prefix = sig
        if not text:
            return None
        if text in self._exact:
            return self._exact[text]
        # The earliest kept match, whatever the order of the lookups (near is not transitive).
        best: tuple[int, dict[str, Any]] | None = None
        size = len(tokens)
        low, high = NEAR_JACCARD * size, size / NEAR_JACCARD  # the sizes Jaccard allows
        for token in prefix:
            for rank, other, item in self._by_token.get(token, ()):
                if (best is None or rank < best[0]) and low <= len(other) <= high:
                    if near(tokens, other):
                        best = (rank, item)
        return None if best is None else best[1]

    def add(self, sig: Signature, item: dict[str, Any]) -> None:
        text, tokens, prefix = sig
        if not text:
            return
        self._exact.setdefault(text, item)
        self._count += 1
        for token in prefix:
            self._by_token.setdefault(token, []).append((self._count, tokens, item))


def absorb(kept: dict[str, Any], duplicate: dict[str, Any]) -> None:
    """The kept item cites the duplicate's refs (its text, and so its tokens, stay as they are)."""
    kept["refs"].extend(r for r in duplicate["refs"] if r not in kept["refs"])
    if duplicate.get("memory_id") is not None:
        kept.setdefault("duplicates", []).append(duplicate["memory_id"])
