"""A session's consolidation plan: what `memcli consolidate` read from one finished session and
will write (facts, summary, proposals), shared by the planning, ledger, caps and apply steps."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from memcli.lifecycle.dedup import NewFact, PairStats, proposed_value

_SENSITIVITY = {"none": 0, "low": 1, "high": 2, "secret": 3}


def _fact_json(f: NewFact) -> dict[str, Any]:
    return {
        "kind": f.kind,
        "category": f.category,
        "text": f.text,
        "importance": round(f.importance, 3),
        "source_ids": f.sources,
        **({"reason": f.reason} if f.reason else {}),
    }


@dataclass
class SessionPlan:
    tenant_id: str
    session_id: str
    user_id: str | None
    method: str  # llm | extractive
    episodes: list[dict[str, Any]]
    summary_text: str = ""
    structured: dict[str, Any] = field(default_factory=dict)
    summary_sources: list[int] = field(default_factory=list)
    facts: list[NewFact] = field(default_factory=list)
    proposals: list[dict[str, Any]] = field(default_factory=list)
    replaces_summaries: list[int] = field(default_factory=list)
    duplicates_in_batch: int = 0
    pairs: PairStats = field(default_factory=PairStats)
    capped: list[dict[str, Any]] = field(default_factory=list)  # over a write cap (write_caps)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # items breaking a writing rule
    note: str = ""

    @property
    def last_seq(self) -> int:
        return max(int(e["event_seq"]) for e in self.episodes)

    @property
    def app_id(self) -> str | None:
        apps = Counter(e["app_id"] for e in self.episodes if e["app_id"])
        return apps.most_common(1)[0][0] if apps else None

    def scope(self, sources: list[int]) -> dict[str, Any]:
        """Where a derived memory lives: the session's scope, its sources' channel/sensitivity."""
        eps = [e for e in self.episodes if e["id"] in set(sources)] or self.episodes
        channel = Counter(e["channel"] for e in eps).most_common(1)[0][0]
        sensitivity = max((e["sensitivity"] for e in eps), key=lambda s: _SENSITIVITY.get(s, 0))
        return {
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "app_id": self.app_id,
            "channel": channel,
            "sensitivity": sensitivity,
        }

    def as_json(self) -> dict[str, Any]:
        facts = self.facts
        return {
            "tenant_id": self.tenant_id,
            "session_id": self.session_id,
            "user_id": self.user_id,
            "method": self.method,
            "episodes": len(self.episodes),
            "add": [_fact_json(f) for f in facts if f.action == "add"],
            "merge": [{**_fact_json(f), "into": f.target} for f in facts if f.action == "merge"],
            "supersede": [
                {**_fact_json(f), "old_ids": f.supersedes} for f in facts if f.action == "supersede"
            ],
            "proposals": [
                *self.proposals,
                *(
                    {
                        "field": f.profile_field,
                        "value": proposed_value(f.profile_field or "", f),
                        "text": f.text,
                        "replaces": f.supersedes,
                    }
                    for f in facts
                    if f.action == "propose"
                ),
            ],
            "summary": {
                "text": self.summary_text,
                "structured": self.structured,
                "replaces": self.replaces_summaries,
            },
            "duplicates_in_batch": self.duplicates_in_batch,
            "pairs": vars(self.pairs),
            "capped": self.capped,
            "dropped": self.dropped,
            **({"note": self.note} if self.note else {}),
        }
