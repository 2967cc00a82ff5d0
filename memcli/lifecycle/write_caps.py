"""Caps on what consolidation writes and asks, from the memory system spec's extraction pass:
at most `max_writes_per_turn` final writes per turn, at most `max_writes_per_user_day` per
user and UTC day, and at most `max_pair_checks_per_user` same-fact checks per user and day.

A final write is a fact, decision or todo that would be added (or would supersede an older
one); merges into a stored memory and consent proposals add no row and are not counted. A
write is charged to the latest turn it cites. Over a cap, a session keeps its most important
writes (the model's order breaks ties) and reports the others as `capped`; once a user's day
is used up, their remaining sessions wait, still pending, for the next day's run, before any
model call. Counts come from the database (what consolidation wrote, which pairs were asked
since midnight UTC), so separate runs on one day share the caps; a dry run, which writes
nothing, also counts what it planned.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memcli.core.records import format_ts
from memcli.store import write_caps_sql

if TYPE_CHECKING:
    from memcli.config import LifecycleSettings
    from memcli.lifecycle.session_plan import SessionPlan
    from memcli.store.connection import Database

WRITES = ("add", "supersede")
Scope = tuple[str, str | None]  # (tenant, user)


@dataclass
class DailyCaps:
    """A run's view of the daily caps, per (tenant, user)."""

    db: Database
    cfg: LifecycleSettings
    dry_run: bool
    since: str = field(default_factory=lambda: format_ts(
        datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)))
    planned_writes: Counter[Scope] = field(default_factory=Counter)
    planned_pairs: Counter[Scope] = field(default_factory=Counter)

    def writes_left(self, scope: Scope) -> int | None:
        """Writes the user has left today; None: no daily cap."""
        cap = self.cfg.max_writes_per_user_day
        if cap is None:
            return None
        used = write_caps_sql.writes_since(self.db, scope[0], scope[1], self.since)
        return max(cap - used - (self.planned_writes[scope] if self.dry_run else 0), 0)

    def pairs_left(self, scope: Scope) -> int:
        used = write_caps_sql.pair_checks_since(self.db, scope[0], scope[1], self.since)
        used += self.planned_pairs[scope] if self.dry_run else 0
        return max(self.cfg.max_pair_checks_per_user - used, 0)

    def planned(self, scope: Scope, plan: SessionPlan) -> None:
        """A dry run's plan counts as if written (a real run's writes are in the database)."""
        self.planned_writes[scope] += sum(f.action in WRITES for f in plan.facts)
        self.planned_pairs[scope] += plan.pairs.asked


def cap_plan(plan: SessionPlan, per_turn: int, allowance: int | None) -> None:
    """Move the writes over the per-turn cap or the day's `allowance` out of `plan.facts`
    into `plan.capped`, least important first."""
    order = {e["id"]: (int(e["event_seq"]), e["event_id"]) for e in plan.episodes}
    writes = [f for f in plan.facts if f.action in WRITES]
    ranked = sorted(range(len(writes)), key=lambda i: -writes[i].importance)
    per: Counter[Any] = Counter()
    kept = 0
    dropped: set[int] = set()
    for i in ranked:
        fact = writes[i]
        cited = [order[s] for s in fact.sources if s in order]
        turn = max(cited)[1] if cited else None
        if per[turn] >= per_turn:
            reason = f"more than {per_turn} writes from one turn"
        elif allowance is not None and kept >= allowance:
            reason = "the user's daily write cap is reached"
        else:
            per[turn] += 1
            kept += 1
            continue
        dropped.add(id(fact))
        plan.capped.append({"kind": fact.kind, "text": fact.text, "reason": reason})
    plan.facts = [f for f in plan.facts if id(f) not in dropped]
