"""What each context-bundle section can hold: candidates, best first, before packing.

Each function returns items `{"type", "text", "refs", ...}` (tokens are counted later, in one
batch, by `memcli.acb`). Every memory-backed section reads through the bundle's `Filters`, so
channel sensitivities, the agent's category allowlist and the app scope apply in SQL.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memcli.acb import decisions, render
from memcli.config import bundled_text
from memcli.core.records import RerankReport
from memcli.derived.contradiction import content_words
from memcli.retrieval import fallback, scope, search
from memcli.retrieval.rerank import rerank
from memcli.retrieval.stages import Candidate, RankContext
from memcli.store import acb_sql, ledger_sql, memories

if TYPE_CHECKING:
    from memcli.config import AcbSettings
    from memcli.store.filters import Filters
    from memcli.store.handle import MemoryHandle

VIEW_NAMES = ("identity", "rules")
VIEW_SUFFIXES = (".md", ".yaml", ".yml", ".txt")
LEDGER_LIMIT = 200  # rows read per ledger section; the section cap decides what is shown


# -- identity and rules: human-editable files ------------------------------------------------
def view_path(name: str, context_dir: Path | None) -> Path | None:
    """The user's copy of a view (identity.md, rules.yaml ...), if there is one."""
    if context_dir is None:
        return None
    for suffix in VIEW_SUFFIXES:
        path = context_dir / f"{name}{suffix}"
        if path.is_file():
            return path
    return None


@functools.cache
def bundled_view(name: str) -> str:
    return bundled_text(f"context/{name}.md")


def load_view(name: str, context_dir: Path | None) -> tuple[str, str]:
    """(text, source): the user's file when present, else the bundled default."""
    path = view_path(name, context_dir)
    if path is not None:
        return path.read_text(encoding="utf-8"), str(path)
    return bundled_view(name), "bundled"


def view_items(name: str, context_dir: Path | None) -> tuple[list[dict[str, Any]], str]:
    text, source = load_view(name, context_dir)
    text = text.strip()
    items = [{"type": "view", "text": text, "refs": [f"view:{name}"]}] if text else []
    return items, source


# -- ledger ----------------------------------------------------------------------------------
def task_items(memory: MemoryHandle, filters: Filters, user_id: str | None) -> list[dict[str, Any]]:
    rows = ledger_sql.bundle_tasks(memory.db, filters, user_id, LEDGER_LIMIT)
    return [
        {
            "type": "task",
            "text": render.task_item_text(r),
            "task_id": r["id"],
            "status": r["status"],
            "memory_id": r["memory_id"],
            "refs": [f"task:{r['id']}", f"mem:{r['memory_id']}", *r["refs"]],
        }
        for r in rows
    ]


def decision_items(
    memory: MemoryHandle, filters: Filters, user_id: str | None, relevance: dict[int, float]
) -> list[dict[str, Any]]:
    """Active decisions; with a query, the ones retrieval found come first, by score."""
    rows = ledger_sql.bundle_decisions(memory.db, filters, user_id, LEDGER_LIMIT)
    order = {mid: i for i, mid in enumerate(sorted(relevance, key=lambda m: (-relevance[m], m)))}
    rows.sort(key=lambda r: order.get(r["memory_id"], len(order)))  # stable: newest first next
    return [
        {
            "type": "decision",
            "text": render.decision_item_text(r),
            "decision_id": r["id"],
            "memory_id": r["memory_id"],
            "refs": [f"decision:{r['id']}", f"mem:{r['memory_id']}", *r["refs"]],
        }
        for r in rows
    ]


def handoff_items(
    memory: MemoryHandle,
    texts: list[str],
    checkpoint: bool,
    tenant_id: str,
    user_id: str | None,
    session_id: str | None,
    sensitivities: tuple[str, ...],
) -> list[dict[str, Any]]:
    items = [
        {"type": "text", "text": t.strip(), "refs": ["request:handoff"]} for t in texts if t.strip()
    ]
    if checkpoint and user_id and session_id:
        row = ledger_sql.get_checkpoint(memory.db, tenant_id, user_id, session_id)
        if row is not None and row["sensitivity"] in sensitivities:
            data = json.dumps(json.loads(row["data"]), ensure_ascii=False, sort_keys=True)
            items.append(
                {
                    "type": "checkpoint",
                    "text": f"Checkpoint v{row['version']} ({row['updated_at'][:19]}):\n{data}",
                    "refs": [f"checkpoint:{user_id}/{session_id}"],
                }
            )
    return items


# -- who the user is: profile and latest reflection ---------------------------------------
def profile_items(
    memory: MemoryHandle, filters: Filters, user_id: str | None, limit: int
) -> list[dict[str, Any]]:
    """The user's memories of the `context: all` categories of categories.yaml, each category
    bounded by its `rag_length` (else `limit`); no query needed. No user: no profile."""
    if user_id is None:
        return []
    rows = acb_sql.profile_memories(memory.db, filters, user_id, memory.categories.always, limit)
    return [_memory_item("profile", r, render.profile_text(r)) for r in rows]


def reflection_items(memory: MemoryHandle, filters: Filters,
                     user_id: str | None) -> list[dict[str, Any]]:
    """The user's latest reflection (the SQLite memory extension design appends it before every
    call)."""
    row = None if user_id is None else acb_sql.latest_reflection(memory.db, filters, user_id)
    return [] if row is None else [_memory_item("reflection", row, render.reflection_text(row))]


# -- conversation ----------------------------------------------------------------------------
def recent_items(
    memory: MemoryHandle, filters: Filters, user_id: str | None, limit: int
) -> list[dict[str, Any]]:
    """The session's newest turns, newest first (the packer keeps the newest; the renderer
    shows them oldest first): only the asking user's, or, with no user asked, the session
    owner's."""
    if filters.session_id is None or limit <= 0:
        return []
    owner = user_id
    if owner is None and filters.tenant_id is not None:
        owner = acb_sql.session_user(memory.db, filters.tenant_id, filters.session_id)
    rows = acb_sql.recent_turns(memory.db, filters, owner, limit)
    return [_memory_item("turn", r, render.turn_text(r)) for r in rows]


def app_items(
    memory: MemoryHandle, filters: Filters, user_id: str | None, limit: int
) -> list[dict[str, Any]]:
    rows = acb_sql.app_memories(memory.db, filters, user_id, limit)
    return [
        {
            "type": "app_memory",
            "text": render.app_memory_text(i, r),
            "memory_id": r["id"],
            "refs": [f"mem:{r['id']}"],
        }
        for i, r in enumerate(rows, start=1)
    ]


def _memory_item(kind: str, row: dict[str, Any], text: str) -> dict[str, Any]:
    refs = [f"mem:{row['id']}"]
    if row.get("event_id"):
        refs.append(f"event:{row['event_id']}")
    item = {"type": kind, "text": text, "memory_id": row["id"], "refs": refs}
    attributes = row.get("attributes")
    if attributes:
        artifact = json.loads(attributes).get("artifact_id")
        if artifact:
            item["artifact_id"] = artifact  # a truncated tool output: the full one is kept
    return item


# -- retrieval -------------------------------------------------------------------------------
@dataclass
class Retrieval:
    ranked: list[Candidate] = field(default_factory=list)
    legs: dict[str, int] = field(default_factory=dict)
    path: str = "none"
    fallbacks: int = 0
    pool_size: int = 0
    fulltext: int = 0  # distinct memories the full-text legs found (the metrics' fts hits)
    rerank: RerankReport | None = None  # what the configured reranker did (None: none is)
    # No candidate reached the relevance asked for (`min_relevance`, else
    # retrieval.min_relevance): the evidence is empty rather than the least bad, but for the
    # newest memories that stand in when no leg matched at all (a path ending in `>recent`).
    no_relevant: bool = False


def retrieve(
    memory: MemoryHandle,
    text: str,
    filters: Filters,
    settings: AcbSettings,
    now: datetime,
    recent: set[int] | frozenset[int] = frozenset(),
    session_covered: bool = False,
    min_relevance: float | None = None,
) -> Retrieval:
    """The same legs and ranking stages as `query`, bounded (pool <= pool_max, scored <=
    scored_max), on a clock taken from the data, then the relations boost.

    Like `query`, a session search widens to its user on a recall cue or when it has too little
    full-text evidence (memcli.retrieval.scope); here the count leaves out the `recent` turns,
    which the recent window already shows. When the recent window holds every turn of the
    session (`session_covered`) or the text has a recall cue, the session pass could only be
    thrown away, so it is skipped (the user pass finds the session's other memories too).
    When no leg finds anything, the newest memories of the scope searched last stand in
    (memcli.retrieval.fallback), leaving out the recent window's.

    Relevance (memcli.retrieval.relevance; a summary held to its turns'): with
    `min_relevance`, candidates under it are left out; without, all are kept unless none
    reaches `retrieval.min_relevance`, when none are (but for the recency fallback's). Either
    way `no_relevant` says that nothing reached the cut, rather than fill the budget with the
    least bad as if it were found."""
    legs_on = [k for k, w in memory.retrieval.leg_weights.items() if w > 0]
    per_leg = max(
        1, min(memory.retrieval.candidates_per_leg, settings.pool_max // max(1, len(legs_on)))
    )
    retrieval = memory.retrieval.model_copy(update={"candidates_per_leg": per_leg})
    path = "session" if filters.session_id else ("user" if filters.user_id else "all")
    # One widening rule with `query` (memcli.retrieval.scope): a session with no owner never
    # widens; a recall cue, or a recent window holding the whole session, widens at once.
    wider = scope.wider_scope(memory.db, filters)
    widen = wider is not None and (session_covered or scope.widen_before_search(text))
    legs: dict[str, list[tuple[int, float]]] = {}
    ranked: list[Candidate] = []
    if not widen:
        legs = search.run_legs(
            memory.db, memory.embedder, text, filters, retrieval, sparse=memory.sparse,
            reader=memory.reader(),
        )
        ranked = search.rank(RankContext(memory.db, filters, text, retrieval, now=now), legs)
        widen = wider is not None and scope.session_is_thin(
            legs, [c.id for c in ranked], memory.retrieval.min_session_hits, exclude=recent
        )
    if widen and wider is not None:
        legs = search.run_legs(
            memory.db, memory.embedder, text, wider, retrieval, sparse=memory.sparse,
            reader=memory.reader(),
        )
        ranked = search.rank(RankContext(memory.db, wider, text, retrieval, now=now), legs)
        path = f"{path}>user"
    fulltext = scope.fulltext_hits(legs) or 0
    if fallback.found_nothing(legs):
        searched = wider if widen and wider is not None else filters
        legs = {**legs, **fallback.recent_leg(memory.db, searched, per_leg, exclude=recent)}
        ranked = search.rank(RankContext(memory.db, searched, text, retrieval, now=now), legs)
        path = f"{path}>{fallback.RECENT_LEG}"
    pool = len(ranked)
    ranked = search.load_rows(memory.db, ranked[: settings.pool_max][: settings.scored_max])
    searched = wider if widen and wider is not None else filters
    search.assess(memory.db, memory.embedder, memory.sparse, text, searched, retrieval, legs,
                  ranked)
    search.cap_summaries(memory.db, memory.embedder, memory.sparse, text, searched, retrieval,
                         legs, ranked)
    cut = memory.retrieval.min_relevance if min_relevance is None else min_relevance
    no_relevant = not any((c.relevance or 0.0) >= cut for c in ranked)
    if min_relevance is not None:
        ranked = [c for c in ranked if (c.relevance or 0.0) >= min_relevance]
    elif no_relevant and not path.endswith(fallback.RECENT_LEG):
        # The newest memories that stand in when no leg matched at all stay (the path says
        # so): the evolution plan's last step. Anything else under the cut is the least bad.
        ranked = []
    if settings.w_rel:
        strongest = acb_sql.max_related_strength(memory.db, [c.id for c in ranked])
        for cand in ranked:
            if cand.id in strongest:
                cand.boosts["related"] = settings.w_rel * strongest[cand.id]
                cand.score += settings.w_rel * strongest[cand.id]
        ranked.sort(key=lambda c: (-c.score, c.id))
    reranked = rerank(ranked, text, memory.reranker)  # last: the order the bundle packs
    return Retrieval(
        ranked, {k: len(v) for k, v in sorted(legs.items())}, path, path.count(">"), pool,
        fulltext, reranked, no_relevant,
    )


def evidence_items(
    memory: MemoryHandle, found: Retrieval, filters: Filters, settings: AcbSettings,
    ledger: decisions.Ledger | None = None,
) -> list[dict[str, Any]]:
    """Ranked memories with up to `related_bullets` related memories each (same filters);
    with the bundle's `ledger`, a decision's evidence is folded into it or marked superseded
    (memcli.acb.decisions)."""
    ids = [c.id for c in found.ranked]
    related = acb_sql.related_bullets(
        memory.db, ids, replace(filters, session_id=None, categories=()), settings.related_bullets
    )
    in_pool = set(ids)
    sources = _summary_sources(memory, found.ranked)
    items = []
    for cand in found.ranked:
        extra = [r for r in related.get(cand.id, []) if r["id"] not in in_pool]
        item = _memory_item("memory", cand.row, render.evidence_text(cand.row, extra))
        item["score"] = round(cand.score, 6)
        item["relevance"] = cand.relevance
        item["boosts"] = dict(sorted(cand.shown_boosts().items()))  # what each ranking stage added
        if found.rerank is not None and cand.id in found.rerank.scores:
            item["rerank_score"] = found.rerank.scores[cand.id]  # the reranker's own score
        item["_dup"] = cand.row["content"]  # the packer collapses repeated sentences
        if cand.id in sources:  # a summary cites the turns it summarises, not itself
            item["refs"] = sources[cand.id] or item["refs"]
            item["derived"] = True
        if extra:
            item["related"] = [{"id": r["id"], "strength": round(r["strength"], 4)} for r in extra]
            item["refs"].extend(f"mem:{r['id']}" for r in extra)
        if ledger is not None:
            own = _source_memory_ids(cand.row) if cand.id in sources else None
            owner = ledger.decision_of(cand.id, own)
            if owner is not None:
                item["_decision"] = owner  # the packer folds it into the ledger item
            replaced = ledger.replaced_by(cand.id, own)
            if replaced is not None:
                decisions.mark(item, replaced)
        items.append(item)
    if sources:
        _flag_conflicts(memory, items, found.ranked, sources)
    ordered = _ground_truth_first(items, found.ranked, sources)
    # What a newer decision replaced comes after all the rest (stable: in rank order).
    return sorted(ordered, key=lambda item: "superseded_by" in item)


def _flag_conflicts(memory: MemoryHandle, items: list[dict[str, Any]],
                    ranked: list[Candidate], sources: dict[int, list[str]]) -> None:
    """A model's summary whose numbers or dates are not its turns' gets `conflicts_with`: the
    refs of its turns holding numbers or dates it does not (the A4 drift: "20 May" against
    "12 May"). An extractive summary quotes its turns, so it is not checked."""
    wanted = {c.id: _source_memory_ids(c.row) for c in ranked if c.id in sources
              and _method(c.row) != "extractive"}
    texts = {i: r["content"] for i, r in memories.get_memories(
        memory.db, sorted({i for ids in wanted.values() for i in ids}),
        ("id", "content", "event_id")).items()}
    events = acb_sql.source_events(memory.db, sorted(texts))
    for cand, item in zip(ranked, items, strict=True):
        if cand.id not in wanted:
            continue
        said = content_words(cand.row["content"])[0]
        turns = {i: content_words(texts[i])[0] for i in wanted[cand.id] if i in texts}
        if not said - set().union(*turns.values()):
            continue  # every number and date of the summary was said
        against = [f"event:{events[i]}" if events.get(i) else f"mem:{i}"
                   for i, nums in turns.items() if nums - said]
        if against:
            item["conflicts_with"] = against


def _method(row: dict[str, Any]) -> str | None:
    raw = row.get("attributes") or "{}"
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:  # a sealed (encrypted) attribute blob
        return None
    return value.get("method") if isinstance(value, dict) else None


def _summary_sources(memory: MemoryHandle, ranked: list[Candidate]) -> dict[int, list[str]]:
    """Each summary among the candidates -> the refs of what it summarises: `event:` ids of
    its source turns (`mem:` for a source that has no event, nothing for a purged one)."""
    wanted = {c.id: _source_memory_ids(c.row) for c in ranked if c.row.get("kind") == "summary"}
    events = acb_sql.source_events(memory.db, sorted({i for ids in wanted.values() for i in ids}))
    return {
        mid: [f"event:{events[i]}" if events[i] else f"mem:{i}" for i in ids if i in events]
        for mid, ids in wanted.items()
    }


def _source_memory_ids(row: dict[str, Any]) -> list[int]:
    raw = row.get("source_ids") or "[]"
    values = json.loads(raw) if isinstance(raw, str) else raw
    out = []
    for value in values:
        text = str(value).removeprefix("mem:")
        if text.isdigit():
            out.append(int(text))
    return out


def _ground_truth_first(
    items: list[dict[str, Any]], ranked: list[Candidate], sources: dict[int, list[str]]
) -> list[dict[str, Any]]:
    """A summary ranks, and shows a score, no higher than the best of its own turns among the
    candidates, and the turns win the tie: when a summary drifted from what was said, what was
    said comes first. When none of its turns was retrieved, they scored below every
    candidate, so the summary is held to the lowest candidate's score."""
    if not sources:
        return items
    score = {c.id: c.score for c in ranked}
    floor = min(score.values())
    position = {}
    for index, (cand, item) in enumerate(zip(ranked, items, strict=True)):
        key = cand.score
        if cand.id in sources and sources[cand.id]:
            own = [score[i] for i in _source_memory_ids(cand.row) if i in score]
            key = min(cand.score, max(own) if own else floor)
            item["score"] = round(key, 6)
        position[id(item)] = (-key, bool(item.get("derived")), index)
    return sorted(items, key=lambda item: position[id(item)])
