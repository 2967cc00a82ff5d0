"""Hybrid search: run each leg, fuse their scores, then apply the ranking stages in order.

Legs (each returns ranked (memory id, score) lists, filtered in SQL):
  lexical  FTS5 BM25 (porter, stopwords dropped, OR of quoted terms; context column at 0.5)
  trigram  FTS5 trigram over CJK 3-grams (scripts without spaces)
  dense    cosine similarity of the embedder's vectors
  entity   memories linked to entities the query names
Fusion: z-score (default, measured better than RRF on LoCoMo; see README) or weighted RRF.
Stages: small functions over the candidate list, each recording its boost for --explain.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memcli.entities import query_entity_keys
from memcli.retrieval import text as qtext
from memcli.store import search as sql

if TYPE_CHECKING:
    from memcli.config import RetrievalSettings
    from memcli.providers.embedders import Embedder
    from memcli.store.connection import Database
    from memcli.store.filters import Filters


@dataclass
class Candidate:
    id: int
    legs: dict[str, tuple[int, float]] = field(default_factory=dict)  # leg -> (rank, score)
    fused: float = 0.0
    boosts: dict[str, float] = field(default_factory=dict)
    score: float = 0.0
    row: dict[str, Any] = field(default_factory=dict)


def run_legs(db: Database, embedder: Embedder | None, text: str, filters: Filters,
             settings: RetrievalSettings, timings: dict[str, float] | None = None
             ) -> dict[str, list[tuple[int, float]]]:
    n = settings.candidates_per_leg
    weights = settings.leg_weights
    legs: dict[str, list[tuple[int, float]]] = {}

    def timed(name: str, fn: Callable[[], list[tuple[int, float]]]) -> None:
        if weights.get(name, 0) <= 0:
            return
        t0 = time.perf_counter()
        legs[name] = fn()
        if timings is not None:
            timings[name] = (time.perf_counter() - t0) * 1000

    match = qtext.fts_match(text)
    if match:
        timed("lexical", lambda: sql.lexical(db, match, filters, n))
    tri = qtext.trigram_match(text)
    if tri:
        timed("trigram", lambda: sql.trigram(db, tri, filters, n))
    keys = query_entity_keys(text)
    if keys:
        timed("entity", lambda: sql.entity(db, keys, filters, n))
    if embedder is not None and db.vec_enabled:
        def dense() -> list[tuple[int, float]]:
            vector = embedder.embed_query(text)
            return sql.dense(db, vector.astype("float32").tobytes(), filters, n)
        timed("dense", dense)
    return legs


def fuse(legs: dict[str, list[tuple[int, float]]], settings: RetrievalSettings
         ) -> dict[int, Candidate]:
    candidates: dict[int, Candidate] = {}
    for leg, hits in legs.items():
        for rank, (mid, score) in enumerate(hits, start=1):
            candidates.setdefault(mid, Candidate(mid)).legs[leg] = (rank, score)
    for leg, hits in legs.items():
        if not hits:
            continue
        weight = settings.leg_weights.get(leg, 1.0)
        if settings.fusion == "rrf":
            for cand in candidates.values():
                if leg in cand.legs:
                    cand.fused += weight / (settings.rrf_k + cand.legs[leg][0])
            continue
        scores = [s for _, s in hits]
        mean = sum(scores) / len(scores)
        std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
        # A candidate missing from this leg gets the leg's minimum, as if ranked last.
        floor = (min(scores) - mean) / std if std > 0 else 0.0
        for cand in candidates.values():
            if leg in cand.legs:
                z = (cand.legs[leg][1] - mean) / std if std > 0 else 1.0
            else:
                z = floor
            cand.fused += weight * z
    return candidates


def _age_days(ts: str, now: datetime) -> float:
    try:
        then = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (now - then).total_seconds() / 86400)


def recency_importance(cands: list[Candidate], settings: RetrievalSettings,
                       now: datetime) -> None:
    """final = alpha*relevance + beta*recency + gamma*importance (relevance min-max to [0,1])."""
    if not cands:
        return
    lo = min(c.fused for c in cands)
    hi = max(c.fused for c in cands)
    span = hi - lo
    half_life = max(settings.recency_half_life_days, 1e-6)
    for cand in cands:
        relevance = (cand.fused - lo) / span if span > 0 else 1.0
        recency = 0.5 ** (_age_days(cand.row["event_time"], now) / half_life)
        importance = float(cand.row["importance"])
        cand.boosts["relevance"] = round(settings.alpha * relevance, 6)
        cand.boosts["recency"] = round(settings.beta * recency, 6)
        cand.boosts["importance"] = round(settings.gamma * importance, 6)
        total = settings.alpha + settings.beta + settings.gamma
        cand.score = (settings.alpha * relevance + settings.beta * recency
                      + settings.gamma * importance) / (total or 1.0)


# Ranking stages applied in order after fusion; issue-level additions append here.
Stage = Callable[[list[Candidate], "RetrievalSettings", datetime], None]
STAGES: list[Stage] = [recency_importance]


def rank(db: Database, legs: dict[str, list[tuple[int, float]]],
         settings: RetrievalSettings, now: datetime | None = None) -> list[Candidate]:
    from memcli.store.memories import get_memories

    pool = fuse(legs, settings)
    rows = get_memories(db, list(pool))
    cands = [c for c in pool.values() if c.id in rows]
    for cand in cands:
        cand.row = rows[cand.id]
    now = now or datetime.now(UTC)
    for stage in STAGES:
        stage(cands, settings, now)
    cands.sort(key=lambda c: (-c.score, -c.fused, c.id))
    return cands
