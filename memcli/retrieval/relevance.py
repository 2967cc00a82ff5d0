"""How relevant a hit is: the calibrated probability (0-1) that a memory is evidence for the
query, from what that memory alone says about the query.

A hit's `score` orders the hits of one query: the legs are fused as z-scores within the query,
so the top hit of any query scores about the same, a nonsense query's as an exact match's.
`relevance` answers another question, "is this evidence?", and must mean the same across
queries: it reads only signals that do not depend on the query's other hits, each against its
own fixed scale:

  coverage  the share of the query's terms (stopwords dropped, stemmed) and CJK grams that the
            memory's text holds
  terms     log(1 + the query's term count): holding all of five terms says more than all of one
  sparse    its SPLADE dot product, log(1 + x)
  dense     the cosine of its vector to the query's (e5-small's)

A logistic regression over these, fitted on LoCoMo with conversations held out (bench/relevance.py,
docs/design/relevance.md), ships as data (memcli/data/relevance.json) and is applied here with
plain arithmetic. Nothing reads the memory's length or its place in a conversation.

Two signals were tried and left out (the measurements are in the design note). BM25 is not on a
fixed scale: its idf depends on the corpus, so an exact match in a new memory of five notes read
0.15 where the same match among LoCoMo's 5,882 turns read 0.8. The entity leg's score took a
negative weight once the cosine was in (the names it matches are query terms, which coverage
counts already). Both legs still rank.

The sparse and dense signals exist only for the models they were fitted with: with another
embedder (or none), or for a memory whose vector the indexer has not written yet, the hit is
judged by the model fitted without that leg (`variant`), which is less sure, not wrong.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import snowballstemmer

from memcli.core.request_base import bound_query
from memcli.retrieval import text as qtext

# The signals of one hit that are always there, and the legs that may be missing.
BASE_FEATURES = ("coverage", "terms")
OPTIONAL_LEGS = ("sparse", "dense")
_WORD = re.compile(r"\w+", re.UNICODE)
_STEMMER = snowballstemmer.stemmer("english")


@dataclass(frozen=True)
class Signals:
    """What one memory says about one query; `sparse`/`dense` None: that leg cannot judge it
    (not run, another model than the calibrated one, or the memory not indexed yet)."""

    coverage: float = 0.0
    terms: int = 0
    sparse: float | None = None
    dense: float | None = None


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_STEMMER.stemWord(word))


@dataclass(frozen=True)
class QueryTerms:
    """The query's terms (stemmed, as `lexical_query` picks them) and its CJK grams."""

    stems: frozenset[str]
    grams: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.stems) + len(self.grams)


def query_terms(text: str) -> QueryTerms:
    query = qtext.lexical_query(bound_query(text))
    return QueryTerms(frozenset(_stem(t) for t in query.terms), query.grams)


def coverage(terms: QueryTerms, content: str) -> float:
    """The share of the query's terms and grams found in `content` (0 when it has none)."""
    if not terms.count:
        return 0.0
    lowered = content.lower()
    found = sum(1 for gram in terms.grams if gram.lower() in lowered)
    if terms.stems:
        words = {_stem(w) for w in _WORD.findall(lowered)}
        found += len(terms.stems & words)
    return found / terms.count


def _finite(value: float | None) -> float:
    """A signal as a number: NaN, infinities and negatives (no match) count as 0."""
    if value is None or not math.isfinite(value) or value < 0:
        return 0.0
    return float(value)


def features(signals: Signals) -> dict[str, float]:
    """The model's inputs, each on its fixed scale (no input depends on other hits)."""
    out = {
        "coverage": min(1.0, _finite(signals.coverage)),
        "terms": math.log1p(max(0, signals.terms)),
    }
    if signals.sparse is not None:
        out["sparse"] = math.log1p(_finite(signals.sparse))
    if signals.dense is not None:
        dense = signals.dense if math.isfinite(signals.dense) else 0.0
        out["dense"] = max(-1.0, min(1.0, dense))
    return out


def variant(signals: Signals) -> str:
    """The name of the fitted model for the legs this hit has: `lexical`, `lexical+sparse`,
    `lexical+dense` or `lexical+sparse+dense`."""
    return "+".join(
        ["lexical", *(leg for leg in OPTIONAL_LEGS if getattr(signals, leg) is not None)]
    )


@dataclass(frozen=True)
class Calibration:
    """The fitted coefficients: one logistic model per `variant`, and the models whose
    scores the sparse and dense coefficients were fitted on."""

    models: dict[str, dict[str, Any]]
    embedder: str | None
    sparse: str | None

    def probability(self, signals: Signals) -> float:
        model = self.models.get(variant(signals)) or self.models["lexical"]
        inputs = features(signals)
        z = float(model["intercept"]) + sum(
            float(weight) * inputs.get(name, 0.0) for name, weight in model["weights"].items()
        )
        z = max(-60.0, min(60.0, z))  # exp stays finite
        return 1.0 / (1.0 + math.exp(-z))


@cache
def shipped() -> Calibration:
    """The calibration that ships with memcli (memcli/data/relevance.json)."""
    raw = resources.files("memcli").joinpath("data", "relevance.json").read_text("utf-8")
    return from_json(json.loads(raw))


def from_json(data: dict[str, Any]) -> Calibration:
    return Calibration(
        models=data["models"], embedder=data.get("embedder"), sparse=data.get("sparse")
    )


def relevance(signals: Signals, calibration: Calibration | None = None) -> float:
    """The hit's relevance, rounded as output shows it."""
    return round((calibration or shipped()).probability(signals), 4)
