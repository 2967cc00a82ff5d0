"""Two-level deduplication of new facts, and the batched same-fact / contradiction check.

Level 1, inside a batch: exact duplicates (normalised text) and obvious near-duplicates collapse
into the first one, which cites the sources of all of them.

Level 2, against the store (the user's active facts, decisions and tasks):
- near-duplicate (Jaccard >= 0.75 where one text only adds or drops words, or cosine >= the
  merge band) with no cue of a contradiction (a negation, number, date, name or tense that
  differs: `memcli.derived.contradiction`): merge, no model needed;
- the same statement with its negation or its tense changed ("Sam will not attend" against
  "Sam will attend", "lived" against "lives"): a contradiction, superseded without a model;
- uncertain (Jaccard >= 0.3 or cosine >= the check band, or a near-duplicate with a swapped
  word, number or name): one batched model prompt per 5-10 pairs answers same | contradicts |
  unrelated for each; verdicts are cached by pair fingerprint for 14 days;
- otherwise: a new fact.
Without a model, uncertain pairs are simply added: no supersession by guesswork.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, model_validator

from memcli.core.records import format_ts
from memcli.derived.contradiction import contradicts
from memcli.derived.textrules import (
    content_differs,
    contradiction_cue,
    fingerprint,
    jaccard,
    normalise,
    safe_merge,
    tokens,
)
from memcli.lifecycle.profile_fields import field_value
from memcli.store import lifecycle_sql

if TYPE_CHECKING:
    from memcli.config import LifecycleSettings
    from memcli.derived.llm_usage import Model
    from memcli.store.connection import Database

Verdict = Literal["same", "contradicts", "unrelated"]


@dataclass
class Stored:
    id: int
    text: str
    kind: str
    category: str | None
    attributes: dict[str, Any]
    created_at: str
    tokens: frozenset[str]
    vector: Any = None


@dataclass
class NewFact:
    kind: str
    category: str
    text: str
    importance: float
    sources: list[int]
    tokens: frozenset[str] = frozenset()
    vector: Any = None
    action: str = "add"  # add | merge | supersede | propose
    target: int | None = None  # merge target
    supersedes: list[int] = field(default_factory=list)
    reason: str = ""
    checks: list[tuple[Stored, float]] = field(default_factory=list)
    profile_field: str | None = None
    cue: str | None = None  # a sure contradiction's cue (SURE_CUES), when one supersedes

    def __post_init__(self) -> None:
        if not self.tokens:
            self.tokens = tokens(self.text)


def load_store(
    db: Database, tenant_id: str, user_id: str | None, with_vectors: bool
) -> list[Stored]:
    rows = lifecycle_sql.active_semantic(db, tenant_id, user_id)
    vectors = (
        lifecycle_sql.vectors_for(db, [r["id"] for r in rows]) if with_vectors and rows else {}
    )
    out = []
    for r in rows:
        blob = vectors.get(r["id"])
        out.append(
            Stored(
                r["id"],
                r["content"],
                r["kind"],
                r["category"],
                r["attributes"],
                r["created_at"],
                tokens(r["content"]),
                blob,
            )
        )
    return out


# Cues a model-free supersession trusts in consolidation: the same sentence negated or moved in
# time. A changed number, date or name may be another event ("ran 5 km on Monday" / "ran 10 km
# on Tuesday"), so consolidation asks its model about those.
SURE_CUES = frozenset({"negation", "tense"})


def proposed_value(field: str, fact: NewFact) -> str:
    """The value a fact proposes for a sensitive field: the field's value it states, or the
    whole sentence when it negates the old value or moves it in time ("Priya no longer lives
    in Madrid" names Madrid, which is no change of city)."""
    value = None if fact.cue in SURE_CUES else field_value(field, fact.text)
    return value or fact.text


def compare(
    new: str, new_tokens: frozenset[str], old: str, old_tokens: frozenset[str], jaccard_merge: float
) -> tuple[Literal["same", "contradicts"], str] | None:
    """What words alone tell of a new text against a stored one: ("same", why) for an exact
    or near duplicate (merge), ("contradicts", cue) for the same statement with a negation,
    a number or date, a name or a tense changed (the new one supersedes), else None."""
    if normalise(new) == normalise(old):
        return "same", "remembered again"
    j = jaccard(new_tokens, old_tokens)
    if j >= jaccard_merge and safe_merge(new, old, new_tokens, old_tokens):
        return "same", f"near-duplicate (jaccard {j:.2f})"
    cue = contradicts(new, old, normalise(new).split(), normalise(old).split())
    return ("contradicts", cue) if cue else None


def dedup_batch(facts: list[NewFact], jaccard_merge: float) -> tuple[list[NewFact], int]:
    """Collapse exact and near duplicates within one batch; returns (kept, dropped count)."""
    kept: list[NewFact] = []
    seen: dict[str, NewFact] = {}
    dropped = 0
    for fact in facts:
        key = normalise(fact.text)
        twin = seen.get(key) or next(
            (
                k
                for k in kept
                if jaccard(k.tokens, fact.tokens) >= jaccard_merge
                and safe_merge(k.text, fact.text, k.tokens, fact.tokens)
            ),
            None,
        )
        if twin is not None:
            twin.sources += [s for s in fact.sources if s not in twin.sources]
            twin.importance = max(twin.importance, fact.importance)
            dropped += 1
            continue
        seen[key] = fact
        kept.append(fact)
    return kept, dropped


def _cosines(new_vector: Any, stored: list[Stored]) -> list[float]:
    import numpy as np  # noqa: PLC0415 - only when vectors are compared

    if new_vector is None:
        return [0.0] * len(stored)
    out = []
    for s in stored:
        if s.vector is None:
            out.append(0.0)
            continue
        if not isinstance(s.vector, np.ndarray):
            s.vector = np.frombuffer(s.vector, dtype="float32")
        out.append(float(np.dot(new_vector, s.vector)) if len(s.vector) == len(new_vector) else 0.0)
    return out


def classify(fact: NewFact, stored: list[Stored], cfg: LifecycleSettings) -> None:
    """Set fact.action to merge (with target), to supersede (a sure contradiction: SURE_CUES),
    or collect fact.checks for the model; leaves 'add' otherwise."""
    if not stored:
        return
    cos = _cosines(fact.vector, stored)
    scored = []
    for s, c in zip(stored, cos, strict=True):
        j = jaccard(fact.tokens, s.tokens)
        scored.append((s, j, c))
    for s, j, c in sorted(scored, key=lambda t: -max(t[1], t[2])):
        lexical = j >= cfg.jaccard_merge and safe_merge(fact.text, s.text, fact.tokens, s.tokens)
        semantic = (
            c >= cfg.cosine_merge
            and not content_differs(fact.text, s.text)
            and contradiction_cue(fact.text, s.text) is None  # "will not attend" embeds close
        )
        if lexical or semantic:
            fact.action, fact.target = "merge", s.id
            fact.reason = f"near-duplicate (jaccard {j:.2f}, cosine {c:.2f})"
            return
        break  # only the closest one can be merged without a model
    sure = []
    for s, j, _c in scored:
        if j < cfg.jaccard_check:  # a contradiction shares most of its words
            continue
        verdict = compare(fact.text, fact.tokens, s.text, s.tokens, cfg.jaccard_merge)
        if verdict is not None and verdict[0] == "contradicts" and verdict[1] in SURE_CUES:
            sure.append((s, verdict[1]))
    if sure:
        fact.action, fact.supersedes = "supersede", [s.id for s, _ in sure]
        fact.cue = sure[0][1]
        fact.reason = f"contradicts ({fact.cue})"
        return
    checks = [
        (s, round(max(j, c), 4))
        for s, j, c in scored
        if j >= cfg.jaccard_check or c >= cfg.cosine_check
    ]
    checks.sort(key=lambda t: -t[1])
    fact.checks = checks[:3]


class PairVerdict(BaseModel):
    pair: int = Field(ge=1)
    verdict: Verdict


def verdicts_schema(n: int) -> type[BaseModel]:
    """A reply schema asking for exactly one verdict for each of pairs 1..n."""

    class PairVerdicts(BaseModel):
        verdicts: list[PairVerdict] = Field(min_length=n, max_length=n)

        @model_validator(mode="after")
        def _every_pair(self) -> PairVerdicts:
            if sorted(v.pair for v in self.verdicts) != list(range(1, n + 1)):
                raise ValueError(f"give exactly one verdict for each pair 1..{n}")
            return self

    return PairVerdicts


PAIR_SYSTEM = (
    "You compare pairs of short statements from a person's long-term memory. A is stored, B is "
    "new. For each pair answer with one verdict:\n"
    "- same: B states the same information as A (other words, or less or compatible detail).\n"
    "- contradicts: A and B cannot both be true now, so B replaces A (a changed city, job, "
    "relationship, plan, preference or number).\n"
    "- unrelated: different or compatible information; both stay.\n"
    "Judge only what the texts say."
)


@dataclass
class PairStats:
    asked: int = 0
    cached: int = 0
    capped: int = 0


def check_pairs(
    model: Model,
    db: Database,
    facts: list[NewFact],
    cfg: LifecycleSettings,
    *,
    tenant_id: str,
    budget_left: int,
    cache: bool,
    now: datetime | None = None,
) -> PairStats:
    """Ask the model about every uncertain pair (cache first) and set each fact's action.

    Raises the model's errors: the caller leaves the whole session unapplied on any failure.
    `budget_left` caps the pairs asked (per user and day); facts whose pairs were capped are
    added as new facts, noted in their reason.
    """
    now = now or datetime.now(UTC)
    stats = PairStats()
    pending: list[tuple[NewFact, Stored, float, str]] = []
    for fact in facts:
        for s, score in fact.checks:
            pending.append((fact, s, score, fingerprint(fact.text, s.text, score)))
    since = format_ts(now - timedelta(days=cfg.pair_recheck_days))
    known = lifecycle_sql.pair_verdicts(db, [p[3] for p in pending], since)
    verdicts: dict[tuple[int, int], str] = {}
    to_ask: list[tuple[NewFact, Stored, float, str]] = []
    for item in pending:
        fact, s, _score, fp = item
        if fp in known:
            verdicts[(id(fact), s.id)] = known[fp]
            stats.cached += 1
        elif len(to_ask) < budget_left:
            to_ask.append(item)
        else:
            stats.capped += 1
            fact.reason = "pair check skipped: per-user cap reached"
    size = cfg.pairs_per_prompt
    for start in range(0, len(to_ask), size):
        batch = to_ask[start : start + size]
        lines = []
        for n, (fact, s, _score, _fp) in enumerate(batch, start=1):
            lines.append(
                f"Pair {n}:\nA (stored {s.created_at[:10]}): {s.text}\nB (new): {fact.text}"
            )
        reply = model.ask(
            "same_fact",
            PAIR_SYSTEM,
            "\n\n".join(lines),
            verdicts_schema(len(batch)),
            tenant_id=tenant_id,
        )
        stats.asked += len(batch)
        answers = {v.pair: v.verdict for v in reply.verdicts}  # type: ignore[attr-defined]
        rows = []
        for n, (fact, s, score, fp) in enumerate(batch, start=1):
            verdicts[(id(fact), s.id)] = answers[n]
            rows.append((fp, answers[n], s.id, score))
        if cache:
            with db.transaction():
                lifecycle_sql.save_pair_verdicts(db, rows, format_ts(now))
    for fact in facts:
        same = [s for s, _ in fact.checks if verdicts.get((id(fact), s.id)) == "same"]
        contra = [s for s, _ in fact.checks if verdicts.get((id(fact), s.id)) == "contradicts"]
        if same:
            fact.action, fact.target, fact.reason = "merge", same[0].id, "model: same fact"
        elif contra:
            fact.action, fact.supersedes = "supersede", [s.id for s in contra]
            fact.reason = "model: contradicts"
    return stats


def near_duplicate_groups(stored: list[Stored], jaccard_merge: float) -> list[tuple[int, int]]:
    """(keep, duplicate) pairs among stored facts, model-free (exact or Jaccard, same names).

    Prefix filtering keeps this near-linear: two token sets with Jaccard >= t must share a
    token among the first |A| - ceil(t*|A|) + 1 of each, in a global rare-first order.
    """
    df: dict[str, int] = {}
    for s in stored:
        for tok in s.tokens:
            df[tok] = df.get(tok, 0) + 1
    index: dict[str, list[int]] = {}
    pairs: list[tuple[int, int]] = []
    gone: set[int] = set()
    for i, s in enumerate(stored):  # oldest first: the older one is kept
        ordered = sorted(s.tokens, key=lambda t: (df[t], t))
        prefix = ordered[: max(1, len(ordered) - math.ceil(jaccard_merge * len(ordered)) + 1)]
        candidates = {j for tok in prefix for j in index.get(tok, [])}
        for j in sorted(candidates):
            other = stored[j]
            if other.id in gone:
                continue
            same_text = normalise(other.text) == normalise(s.text)
            if same_text or (
                jaccard(other.tokens, s.tokens) >= jaccard_merge
                and safe_merge(other.text, s.text, other.tokens, s.tokens)
            ):
                pairs.append((other.id, s.id))
                gone.add(s.id)
                break
        if s.id not in gone:
            for tok in prefix:
                index.setdefault(tok, []).append(i)
    return pairs
