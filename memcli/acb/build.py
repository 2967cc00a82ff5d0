"""Active context bundles: what an agent puts in front of its model, budgeted to the token.

    bundle = build_acb(memory, AcbRequest(user_id="u1", session_id="s1", query="..."))

Sections (cap, priority; config `acb.sections`): identity, rules, profile (`context: all`
categories), reflection (the latest), app_memories (`app_id` only), task_state, decision_ledger,
handoff_packet, retrieved_evidence (duplicates collapsed), recent_window. The session's last
turn is packed first (a floor, at every budget, within the recent window's cap); then sections
fill by priority; inside one, items are taken best first while they fit the section's cap and
what is left of the budget (an item that does not fit is skipped, the next, smaller one may). The
budget is `budget_tokens` minus a reserve for the caller; every count is tiktoken's, on exactly the
text the markdown rendering prints, and the rendered block is counted once more at the end.

Privacy runs in SQL through one `Filters`: the channel picks the sensitivities (public and agent:
none/low; private and team: none/low/high; secret never exists), public also drops preferences
and both public and agent drop private decisions (`channel_rules`), the agent's category
allowlist applies to every section, and `app_id` confines the whole bundle to one app.

Determinism: no wall clock reaches the bundle. Ranking ages memories against the newest
`updated_at` in the database, ids and sort keys are stable, and `acb_id` hashes the request, the
thread revisions and the body. Reading a bundle writes only access counts, a request-metrics row
and, when tracking, the revision the caller has now seen (the delta header's base next time).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memcli.acb import decisions, pack, render, sections
from memcli.acb.names import add_document_names
from memcli.acb.request import AcbRequest
from memcli.config import AcbSettings
from memcli.errors import DatabaseBusyError, UsageError
from memcli.retrieval.text import terms
from memcli.store import acb_sql, memories
from memcli.store.connection import HINT_WAIT
from memcli.store.metrics import record_request

if TYPE_CHECKING:
    from memcli.store.filters import Filters
    from memcli.store.handle import MemoryHandle

CHANNEL_SENSITIVITIES: dict[str, tuple[str, ...]] = {
    "public": ("none", "low"),
    "agent": ("none", "low"),
    "private": ("none", "low", "high"),
    "team": ("none", "low", "high"),
}
# Section 9.1 of the Agent Memory System PRD: a public channel "excludes preferences, private
# decisions". The agent channel (inter-agent messages) also leaves out decisions taken on a
# private channel, but keeps preferences: the agent's allowlist already says whether it may read
# them (a stylist must).
CHANNEL_EXCLUDED_CATEGORIES: dict[str, tuple[str, ...]] = {"public": ("preferences",)}
CHANNEL_HIDES_PRIVATE_DECISIONS = frozenset({"public", "agent"})
DELTA_BULLETS = 3


def channel_rules(base: Filters, channel: str) -> Filters:
    """The channel's exclusions on top of its sensitivities, for every section (in SQL)."""
    extra = tuple(
        c for c in CHANNEL_EXCLUDED_CATEGORIES.get(channel, ()) if c not in base.excluded_categories
    )
    return replace(
        base,
        excluded_categories=base.excluded_categories + extra,
        hide_private_decisions=channel in CHANNEL_HIDES_PRIVATE_DECISIONS,
    )


def thread_keys(req: AcbRequest) -> list[str]:
    """The threads whose changes a bundle reports: the session, its user, the tenant."""
    keys = []
    if req.session_id:
        keys.append(memories.thread_key(req.tenant_id, req.user_id, req.session_id))
    if req.user_id:
        keys.append(memories.thread_key(req.tenant_id, req.user_id, None))
    keys.append(memories.thread_key(req.tenant_id, None, None))
    return list(dict.fromkeys(keys))


def build_acb(
    memory: MemoryHandle,
    req: AcbRequest,
    *,
    settings: AcbSettings | None = None,
    context_dir: Path | None = None,
    allowed: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Assemble one bundle; records a request-metrics row (with the failing stage on error).
    `allowed`: the only categories any section may hold (a server's bound caller), besides
    the agent's allowlist."""
    t0 = time.perf_counter()
    settings = settings or AcbSettings()
    metrics: dict[str, Any] = {"command": "acb", "retrieval_path": "none"}
    stage = "request"
    try:
        if req.tenant_id is None:  # a bundle always reads one tenant: the configured one
            req = req.model_copy(update={"tenant_id": memory.tenant})
        if req.user_id is None and req.session_id:
            # A session's bundle is its user's: their tasks, decisions and app notes, not the
            # whole tenant's (a session never mixes users).
            owner = acb_sql.session_user(memory.db, req.tenant_id or memory.tenant, req.session_id)
            if owner is not None:
                req = req.model_copy(update={"user_id": owner})
        metrics.update(tenant_id=req.tenant_id, user_id=req.user_id, session_id=req.session_id)
        plan = _plan(req, settings)
        stage = "filters"
        memory.categories.check(req.agent_id, tuple(req.categories))
        base = memory.filters(
            agent=req.agent_id,
            tenant_id=req.tenant_id,
            app_id=req.app_id,
            sensitivities=CHANNEL_SENSITIVITIES[req.channel],
            as_of=req.as_of,
        )
        base = channel_rules(base, req.channel)
        if allowed is not None:
            kept = base.allowed_categories
            base = replace(base, allowed_categories=tuple(
                c for c in allowed if kept is None or c in kept))
        stage = "delta"
        keys = thread_keys(req)
        revisions = acb_sql.thread_revisions(memory.db, keys)
        delta = _delta(memory, req, keys, revisions, replace(base, states=()))
        stage = "sections"
        candidates, views = _static_sections(memory, req, base, settings, context_dir)
        stage = "retrieval"
        recent = {i["memory_id"] for i in candidates["recent_window"]}
        covered = len(recent) < settings.recent_turns  # the window holds the whole session
        found, now = _retrieval(memory, req, base, settings, recent, covered)
        candidates["decision_ledger"] = sections.decision_items(
            memory, base, req.user_id, {c.id: c.score for c in found.ranked}
        )
        evidence_filters = replace(
            base, user_id=req.user_id, session_id=req.session_id, categories=tuple(req.categories)
        )
        ledger = (  # no query, no evidence: the fast path reads no more
            decisions.Ledger(memory, base, req.user_id, candidates["decision_ledger"])
            if found.ranked else None
        )
        candidates["retrieved_evidence"] = sections.evidence_items(
            memory, found, evidence_filters, settings, ledger
        )
        metrics.update(
            retrieval_path=found.path,
            fallbacks=found.fallbacks,
            lexical_hits=found.fulltext,  # the full-text legs' distinct memories
            sparse_hits=found.legs.get("sparse", 0),
            vector_hits=found.legs.get("dense", 0),
            entity_hits=found.legs.get("entity", 0),
        )
        stage = "pack"
        max_tokens = req.budget_tokens or settings.max_tokens
        bundle = pack.pack(
            plan,
            candidates,
            delta,
            max_tokens=max_tokens,
            # The caller's reserve shrinks with small budgets (it is 13.5 % at the default).
            reserve=min(settings.reserve, settings.reserve * max_tokens // settings.max_tokens),
            enc=memory.encoding,
            app_id=req.app_id,
        )
        stage = "render"
        bundle["revision"] = revisions
        bundle["no_relevant"] = found.no_relevant
        bundle["provenance"] = _provenance(
            memory, req, base, found, now, views, settings, bundle.pop("_deduped")
        )
        pack.finish(bundle, plan, memory.encoding, req.model_dump(exclude={"track"}))
        bundle = add_document_names(bundle)
    except Exception:
        metrics.update(error_stage=stage, latency_ms=_ms(t0))
        with contextlib.suppress(Exception):  # the build's own error is the one to report
            _record(memory, metrics, [], None)
        raise
    metrics.update(
        items=sum(len(s["items"]) for s in bundle["sections"]),
        tokens_used=bundle["token_used"],
        truncated=int(
            any(o["reason"] in ("section_cap", "budget", "truncated") for o in bundle["omissions"])
        ),
        latency_ms=_ms(t0),
    )
    ids = sorted(
        {
            i["memory_id"]
            for s in bundle["sections"]
            for i in s["items"]
            if i.get("memory_id") is not None
        }
    )
    _record(memory, metrics, ids, (req.agent_id or "default", revisions) if req.track else None)
    return bundle


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def _record(
    memory: MemoryHandle, metrics: dict[str, Any], ids: list[int],
    seen: tuple[str, dict[str, int]] | None
) -> None:
    """Access counts, the metrics row and the caller's revision, in one short write."""
    if memory.db.read_only:
        return  # a write-protected file still gets its bundle; these hints are skipped
    try:
        with memory.db.transaction(wait=HINT_WAIT):
            memories.record_access(memory.db, ids)
            record_request(memory.db, metrics)
            if seen is not None:
                acb_sql.mark_seen(memory.db, *seen)
    except DatabaseBusyError:
        pass  # hints only: a busy writer must not fail a read


def _plan(req: AcbRequest, settings: AcbSettings) -> list[dict[str, Any]]:
    """Sections of this bundle with their caps, in fill order (priority, then render order)."""
    unknown = sorted(set(req.caps) - set(settings.sections))
    if unknown:
        raise UsageError(
            f"unknown section in caps: {', '.join(unknown)}",
            f"sections are: {', '.join(pack.ORDER)}",
        )
    if any(v < 0 for v in req.caps.values()):
        raise UsageError("a section cap cannot be negative")
    names = [
        n for n in pack.ORDER if n in settings.sections and (n != "app_memories" or req.app_id)
    ]
    names += sorted(n for n in settings.sections if n not in pack.ORDER)  # configured extras
    plan = [
        {
            "name": n,
            "cap": req.caps.get(n, settings.sections[n].cap),
            "priority": settings.sections[n].priority,
        }
        for n in names
    ]
    rank = {n: i for i, n in enumerate(names)}
    return sorted(plan, key=lambda p: (-p["priority"], rank[p["name"]]))


def _static_sections(
    memory: MemoryHandle, req: AcbRequest, base: Filters, settings: AcbSettings,
    context_dir: Path | None
) -> tuple[dict[str, list], dict[str, str]]:
    candidates: dict[str, list[dict[str, Any]]] = {}
    views: dict[str, str] = {}
    for name in sections.VIEW_NAMES:
        candidates[name], views[name] = sections.view_items(name, context_dir)
    candidates["profile"] = sections.profile_items(
        memory, base, req.user_id, settings.profile_limit
    )
    candidates["reflection"] = sections.reflection_items(memory, base, req.user_id)
    candidates["task_state"] = sections.task_items(memory, base, req.user_id)
    candidates["handoff_packet"] = sections.handoff_items(
        memory,
        req.handoff,
        req.include_checkpoint,
        req.tenant_id or memory.tenant,
        req.user_id,
        req.session_id,
        base.sensitivities,
    )
    candidates["recent_window"] = sections.recent_items(
        memory, replace(base, session_id=req.session_id), req.user_id, settings.recent_turns
    )
    if req.app_id:
        candidates["app_memories"] = sections.app_items(
            memory, base, req.user_id, settings.app_memory_limit
        )
    return candidates, views


def _retrieval(
    memory: MemoryHandle,
    req: AcbRequest,
    base: Filters,
    settings: AcbSettings,
    recent: set[int],
    covered: bool,
) -> tuple[sections.Retrieval, str | None]:
    """Retrieval runs only for a query (no query: the fast path)."""
    now = req.as_of or acb_sql.data_now(memory.db)
    if not (req.query and req.query.strip()):
        return sections.Retrieval(), now
    try:
        clock = (
            datetime.fromisoformat(now.replace("Z", "+00:00"))
            if now
            else datetime(1970, 1, 1, tzinfo=UTC)
        )
    except ValueError as exc:
        raise UsageError(f"as_of is not an ISO 8601 time: {now!r}") from exc
    filters = replace(
        base, user_id=req.user_id, session_id=req.session_id, categories=tuple(req.categories)
    )
    found = sections.retrieve(memory, req.query, filters, settings, clock, recent, covered,
                              min_relevance=req.min_relevance)
    return found, now


def _delta(
    memory: MemoryHandle, req: AcbRequest, keys: list[str], revisions: dict[str, int],
    filters: Filters
) -> dict[str, Any] | None:
    """At most 3 bullets of what changed since the caller's last revision of each thread.

    No base (first bundle for this caller and no `since`): no header, the bundle is the
    full picture. More than 3 changes: the 2 newest and one "and N more" bullet."""
    stored = acb_sql.seen_revisions(memory.db, req.agent_id or "default", keys)
    if isinstance(req.since, int):
        stored[keys[0]] = req.since
    elif isinstance(req.since, dict):
        stored.update({k: int(v) for k, v in req.since.items() if k in keys})
    rows: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for key in keys:
        if key in stored and revisions[key] > stored[key]:
            found = acb_sql.changes_since(memory.db, key, stored[key], filters, DELTA_BULLETS)
            rows.extend({**r, "thread": key} for r in found)
            for op, n in acb_sql.count_changes_since(memory.db, key, stored[key], filters).items():
                counts[op] = counts.get(op, 0) + n
    total = sum(counts.values())
    if total == 0:
        return None
    rows.sort(key=lambda r: (-r["id"], r["thread"]))
    if total <= DELTA_BULLETS:
        bullets = [render.delta_bullet(r) for r in rows[:DELTA_BULLETS]]
    else:
        shown = rows[: DELTA_BULLETS - 1]
        rest = dict(counts)
        for r in shown:
            rest[r["op"]] -= 1
        bullets = [render.delta_bullet(r) for r in shown] + [render.delta_rest(rest)]
    return {
        "since": {k: stored[k] for k in keys if k in stored},
        "since_primary": stored.get(keys[0], min(stored.values())),
        "changes": total,
        "bullets": bullets,
    }


def _provenance(
    memory: MemoryHandle,
    req: AcbRequest,
    base: Filters,
    found: sections.Retrieval,
    now: str | None,
    views: dict[str, str],
    settings: AcbSettings,
    deduped: int,
) -> dict[str, Any]:
    r = memory.retrieval
    return {
        "intent": req.intent,
        "query_terms": terms(req.query or ""),
        "retrieval_path": found.path,
        "legs": found.legs,
        "candidate_pool_size": found.pool_size,
        "scored": len(found.ranked),
        "deduped": deduped,
        # What the configured reranker did (docs/guides/reranking.md); null: none configured.
        "rerank": None if found.rerank is None else found.rerank.model_dump(),
        "as_of": now,
        "filters": {
            "tenant_id": req.tenant_id,
            "user_id": req.user_id,
            "session_id": req.session_id,
            "app_id": req.app_id,
            "channel": req.channel,
            "agent_id": req.agent_id,
            "sensitivity_allowed": list(base.sensitivities),
            "categories_allowed": (
                None if base.allowed_categories is None else list(base.allowed_categories)
            ),
            "categories": list(req.categories),
        },
        "weights": {
            "fusion": r.fusion,
            "legs": dict(sorted(r.leg_weights.items())),
            "alpha": r.alpha,
            "beta": r.beta,
            "gamma": r.gamma,
            "half_life_days": r.recency_half_life_days,
            "w_rel": settings.w_rel,
        },
        "views": views,
    }
