"""One decision, once, current: what the decision ledger does to a bundle's evidence.

Acceptance scenarios A3 (decision supersession) and A12 (dedupe prevention) of the Agent
Memory System PRD. A decision is said in a turn, summarised with its session and recorded in
the ledger; retrieval finds all three. So, in `retrieved_evidence`:

- the evidence of a superseded decision (the turns its refs name, and a session summary built
  from them) stays, because it is what was said, but never unmarked: it carries
  `superseded_by: "decision:N"` (the active decision at the end of the chain), its text says
  "(superseded by DN)", and it ranks after every unmarked evidence item, so a tight budget
  drops it first. Leaving it out would hide why the decision changed; the ledger row shows only
  the active decision ("supersedes D1").
- an active decision the ledger section shows appears once: the turns it cites as evidence,
  and a summary of nothing but those turns, fold into its ledger item (their refs cited there,
  under `duplicates`), as a repeated sentence folds into its first saying
  (`memcli.acb.duplicates`). This needs the ledger packed first, as its default priority (7,
  evidence 6) does. A summary of more turns than the decision's stays: it says more.

A memory that is evidence of an active decision is never marked superseded, even when a
superseded one cited it too. A decision's refs name events (`event:E`, or a bare `E`: an
ingested `kind: decision` record cites its own event first, then the events it rests on) or
memories (`mem:N`); of an event, only what someone said counts, not a tool's output (the file
a decision rests on is still true when the decision is replaced).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from memcli.store import acb_sql, ledger_sql

if TYPE_CHECKING:
    from memcli.store.filters import Filters
    from memcli.store.handle import MemoryHandle

LIMIT = 200  # superseded decisions read per bundle


def cited_memories(
    memory: MemoryHandle, tenant_id: str | None, refs: dict[int, list[str]]
) -> dict[int, set[int]]:
    """key -> the memory ids its refs name: `mem:N`, and the memories of each event
    (`event:E` or a bare `E`)."""
    events = sorted({_event_id(r) for rs in refs.values() for r in rs if not _is_memory(r)})
    by_event = acb_sql.memories_of_events(memory.db, tenant_id, events)
    out: dict[int, set[int]] = {}
    for key, rs in refs.items():
        ids: set[int] = set()
        for ref in rs:
            if _is_memory(ref):
                ids.add(int(ref[4:]))
            else:
                ids.update(by_event.get(_event_id(ref), ()))
        out[key] = ids
    return out


def _is_memory(ref: str) -> bool:
    return ref.startswith("mem:") and ref[4:].isdigit()


def _event_id(ref: str) -> str:
    """A ledger ref that names no memory names an event: `event:E`, or `E` as given (an
    ingested decision's refs are its own event id and the event ids its record cites)."""
    return ref.removeprefix("event:")


def superseded_evidence(
    memory: MemoryHandle, filters: Filters, user_id: str | None
) -> dict[int, int]:
    """memory id -> the active decision that replaced the superseded decision citing it."""
    rows = ledger_sql.bundle_superseded_decisions(
        memory.db, replace(filters, states=()), user_id, LIMIT
    )
    if not rows:
        return {}
    successor = {r["id"]: r["superseded_by"] for r in rows if r["superseded_by"] is not None}
    cited = cited_memories(memory, filters.tenant_id, {r["id"]: list(r["refs"]) for r in rows})
    out: dict[int, int] = {}
    for row in rows:
        current, seen = successor.get(row["id"]), {row["id"]}
        while current in successor and current not in seen:  # to the end of the chain
            seen.add(current)
            current = successor[current]
        if current is None:
            continue
        for mid in sorted(cited[row["id"]]):
            out.setdefault(mid, current)
    return out


class Ledger:
    """What the bundle's decisions say about its evidence (see the module docstring)."""

    def __init__(
        self,
        memory: MemoryHandle,
        filters: Filters,
        user_id: str | None,
        ledger_items: list[dict[str, Any]],
    ) -> None:
        refs = {
            i: [r for r in item["refs"] if not r.startswith("decision:")]
            for i, item in enumerate(ledger_items)
        }
        cited = cited_memories(memory, filters.tenant_id, refs)
        self.owner: dict[int, dict[str, Any]] = {}  # evidence memory -> its decision's item
        for i, item in enumerate(ledger_items):
            for mid in sorted(cited[i]):
                if mid != item.get("memory_id"):
                    self.owner.setdefault(mid, item)
        self.replaced = {
            m: d
            for m, d in superseded_evidence(memory, filters, user_id).items()
            if m not in self.owner
        }

    def decision_of(self, memory_id: int, sources: list[int] | None) -> dict[str, Any] | None:
        """The ledger item an evidence memory (or a summary of `sources`) only restates."""
        if memory_id in self.owner:
            return self.owner[memory_id]
        if sources:
            owners = {id(self.owner[s]) for s in sources if s in self.owner}
            if len(owners) == 1 and all(s in self.owner for s in sources):
                return self.owner[sources[0]]
        return None

    def replaced_by(self, memory_id: int, sources: list[int] | None) -> int | None:
        """The active decision replacing what an evidence memory (or a summary) says."""
        if memory_id in self.replaced:
            return self.replaced[memory_id]
        if sources and not any(s in self.owner for s in sources):
            found = [self.replaced[s] for s in sources if s in self.replaced]
            return found[0] if found else None
        return None


def mark(item: dict[str, Any], decision_id: int) -> None:
    """The item says, on its first line, which decision replaced it."""
    item["superseded_by"] = f"decision:{decision_id}"
    head, sep, rest = item["text"].partition("\n")
    item["text"] = f"{head} (superseded by D{decision_id}){sep}{rest}"
