"""Ranking stages after fusion: small functions over the candidate pool, applied in order.

Each stage records what it added in `Candidate.boosts`, so `--explain` can show it. Defaults and
the measurements behind them are in README.md ("Retrieval").
  neighbours  conversation evidence clusters: a turn next to a strong match is often the answer,
              so f(i) += w * max(f(i-1), f(i+1)) within a session, for every candidate (the
              neighbours of the top `neighbour_pool` join the pool)
  session     questions tend to concern one session: f(i) += w * best f in the turn's session
  when        "when ..." questions: turns that hold a date or time expression get x w
  date        a question naming a date (day or month): turns from that date to a week after get
              x w (people tell of a day in the sessions that follow it)
  speaker     turns by a speaker the question names (any word of a "First Last" name) get x w
  recency / importance  final = alpha*fused + beta*recency + gamma*importance
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memcli.retrieval import dates
from memcli.store import search_sql

if TYPE_CHECKING:
    from memcli.config import RetrievalSettings
    from memcli.store.connection import Database
    from memcli.store.filters import Filters


@dataclass
class Candidate:
    """One memory being ranked. Scores and boosts are kept unrounded (a pool is hundreds of
    candidates); output rounds the few it shows, with `shown_boosts`."""

    id: int
    legs: dict[str, tuple[int, float]] = field(default_factory=dict)  # leg -> (rank, score)
    fused: float = 0.0
    boosts: dict[str, float] = field(default_factory=dict)
    score: float = 0.0
    row: dict[str, Any] = field(default_factory=dict)
    # The calibrated probability that it is evidence (memcli.retrieval.relevance), set for the
    # candidates a caller shows (memcli.retrieval.search.assess).
    relevance: float | None = None
    signals: Any = None  # what it was judged on (memcli.retrieval.relevance.Signals)

    def shown_boosts(self) -> dict[str, float]:
        """The boosts as output shows them (6 decimals)."""
        return {k: round(v, 6) for k, v in self.boosts.items()}


@dataclass
class RankContext:
    db: Database
    filters: Filters
    text: str
    settings: RetrievalSettings
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


def _shift(cands: list[Candidate]) -> None:
    """Make fused scores positive so that propagation only ever adds.

    The floor sits one unit below the weakest candidate, so even the weakest matched turn keeps
    a score above a neighbour that matched nothing (which enters the pool at 0).
    """
    if cands:
        lo = min(c.fused for c in cands)
        if lo <= 0 or lo > 1:
            for cand in cands:
                cand.fused -= lo - 1.0


def neighbours(cands: list[Candidate], ctx: RankContext) -> list[Candidate]:
    weight = ctx.settings.neighbour_weight
    if weight <= 0 or not cands:
        return cands
    _shift(cands)
    # Every candidate is linked to its neighbours (a weak match next to a strong one gains),
    # but only the top ones bring neighbours that matched nothing into the pool.
    links = search_sql.session_neighbours(ctx.db, [c.id for c in cands], ctx.filters)
    top = sorted(cands, key=lambda c: -c.fused)[: ctx.settings.neighbour_pool]
    pool = {c.id: c for c in cands}
    new_ids = {n for c in top for n in links.get(c.id, ()) if n is not None and n not in pool}
    for mid in new_ids:
        pool[mid] = Candidate(mid)
    if new_ids:
        links.update(search_sql.session_neighbours(ctx.db, list(new_ids), ctx.filters))
    base = {mid: c.fused for mid, c in pool.items()}
    for mid, cand in pool.items():
        prev_id, next_id = links.get(mid, (None, None))
        best = max(base.get(prev_id, 0.0) if prev_id else 0.0,
                   base.get(next_id, 0.0) if next_id else 0.0)
        if best > 0:
            cand.boosts["neighbours"] = weight * best
            cand.fused += weight * best
    return list(pool.values())


def session(cands: list[Candidate], ctx: RankContext) -> list[Candidate]:
    weight = ctx.settings.session_weight
    if weight <= 0:
        return cands
    _shift(cands)
    best: dict[Any, float] = {}
    for cand in cands:
        key = cand.row.get("session_id")
        if key is not None:
            best[key] = max(best.get(key, 0.0), cand.fused)
    for cand in cands:
        key = cand.row.get("session_id")
        if key is not None and best[key] > 0:
            cand.boosts["session"] = weight * best[key]
            cand.fused += weight * best[key]
    return cands


_WHEN = re.compile(r"^\s*(when|what (time|date|year|month|day)|how long ago)\b", re.I)
_TIME_EXPR = re.compile(
    r"\b(\d{4}|\d{1,2}:\d{2}|yesterday|today|tomorrow|tonight|last (week|month|year|night|"
    r"weekend)|next (week|month|year|weekend)|ago|monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday|january|february|march|april|may|june|july|august|september|october|"
    r"november|december|weekend|morning|evening|\d+ (days?|weeks?|months?|years?))\b", re.I)


def when_question(cands: list[Candidate], ctx: RankContext) -> list[Candidate]:
    factor = ctx.settings.time_boost
    if factor == 1.0 or not _WHEN.search(ctx.text):
        return cands
    _shift(cands)
    for cand in cands:
        if _TIME_EXPR.search(cand.row.get("content", "")):
            cand.boosts["when"] = factor
            cand.fused *= factor
    return cands


def date_match(cands: list[Candidate], ctx: RankContext) -> list[Candidate]:
    factor = ctx.settings.date_boost
    spans = dates.named_spans(ctx.text) if factor != 1.0 else []
    if not spans:
        return cands
    _shift(cands)
    for cand in cands:
        day = dates.day_of(cand.row.get("event_time") or "")
        if day is not None and any(first <= day <= last for first, last in spans):
            cand.boosts["date"] = factor
            cand.fused *= factor
    return cands


def speaker(cands: list[Candidate], ctx: RankContext) -> list[Candidate]:
    factor = ctx.settings.speaker_boost
    if factor == 1.0:
        return cands
    words = {w.lower() for w in re.findall(r"\w+", ctx.text)}
    _shift(cands)
    for cand in cands:
        # Any word of the speaker's name: "Jane Doe" is named by "what did Jane say".
        actor = re.findall(r"\w+", (cand.row.get("actor_id") or "").lower())
        if any(len(word) > 1 and word in words for word in actor):
            cand.boosts["speaker"] = factor
            cand.fused *= factor
    return cands


def _age_days(ts: str, now: datetime) -> float:
    try:
        then = datetime.fromisoformat(ts)  # Python 3.11+ reads the trailing "Z"
    except ValueError:
        return 0.0
    return max(0.0, (now - then).total_seconds() / 86400)


def recency_importance(cands: list[Candidate], ctx: RankContext) -> list[Candidate]:
    """final = (alpha*fused + beta*recency + gamma*importance) / (alpha+beta+gamma)."""
    s = ctx.settings
    if not cands:
        return cands
    lo = min(c.fused for c in cands)
    span = max(c.fused for c in cands) - lo
    half_life = max(s.recency_half_life_days, 1e-6)
    total = (s.alpha + s.beta + s.gamma) or 1.0
    for cand in cands:
        relevance = (cand.fused - lo) / span if span > 0 else 1.0
        recency = 0.5 ** (_age_days(cand.row["event_time"], ctx.now) / half_life)
        importance = float(cand.row["importance"])
        cand.boosts["relevance"] = s.alpha * relevance / total
        cand.boosts["recency"] = s.beta * recency / total
        cand.boosts["importance"] = s.gamma * importance / total
        cand.score = (s.alpha * relevance + s.beta * recency + s.gamma * importance) / total
    return cands


# Stages that need memory rows run after rows are loaded; `neighbours` may add candidates.
POOL_STAGES = [neighbours]
ROW_STAGES = [session, when_question, date_match, speaker, recency_importance]
# The memory columns ROW_STAGES read (a stage reading another one must add it here).
RANK_COLUMNS = ("id", "session_id", "content", "actor_id", "event_time", "importance")
