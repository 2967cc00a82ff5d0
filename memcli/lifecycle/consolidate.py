"""`memcli consolidate`: turn finished sessions into durable, deduplicated, current memories.

For each pending session (see `store.lifecycle.pending_sessions`), a plan is computed first,
with no write: the model extracts facts, preferences, decisions, todos, entities and a summary;
new facts are deduplicated (`dedup.py`); uncertain pairs get a batched same-fact / contradiction
check. The plan is then applied in ONE transaction per session (facts, merges, supersessions,
consent proposals, the structured summary, and the session's consolidation mark), so a session
is either fully consolidated or untouched. An item of the reply that breaks the writing rules
is dropped on its own (`dropped` in the report, with its reason) and the rest is written. A
reply that is no JSON object of the shape, an unreachable model or a used-up budget leaves the
session pending for the next run; a session whose replies keep failing
(`max_llm_failures`) is summarised extractively instead, and says so.

Without a model: an extractive summary per session (selected turns, labelled `"method":
"extractive"`), model-free near-duplicate merging, linking. A later run with a model picks
those sessions up again and replaces the extractive summary. Then the app memory limit
(`compaction.py`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memcli.core.progress import report as report_progress
from memcli.core.records import format_ts
from memcli.derived.compaction import compact_apps
from memcli.derived.textrules import jaccard, normalise, tokens
from memcli.errors import NotFoundError
from memcli.lifecycle import dedup
from memcli.lifecycle.consolidate_apply import apply_plan, dedup_store
from memcli.lifecycle.consolidate_ledger import match_ledger
from memcli.lifecycle.dedup import NewFact
from memcli.lifecycle.extract import (
    KINDS,
    Extraction,
    chunk_episodes,
    cited,
    extractive_summary,
    system_prompt,
    user_prompt,
)
from memcli.lifecycle.profile_fields import field_value
from memcli.lifecycle.proposals import held_fields
from memcli.lifecycle.session_plan import SessionPlan
from memcli.lifecycle.write_caps import DailyCaps, cap_plan
from memcli.policy.redaction import redact_text
from memcli.providers.llm import LLMBadReply, LLMBudgetExceeded, LLMError
from memcli.store import lifecycle_sql

if TYPE_CHECKING:
    from memcli.config import LifecycleSettings
    from memcli.core.progress import Progress
    from memcli.derived.llm_usage import Model
    from memcli.lifecycle.runlock import RunLock
    from memcli.store.handle import MemoryHandle



# -- planning


def plan_llm(
    memory: MemoryHandle,
    model: Model,
    cfg: LifecycleSettings,
    row: dict[str, Any],
    episodes: list[dict[str, Any]],
    pairs_left: int,
    *,
    cache: bool,
    writes_left: int | None = None,
) -> SessionPlan:
    """Extract, deduplicate and check, then hold the write caps (`write_caps`: per turn, and
    `writes_left` for the user today, None for no cap); no write except pair-verdict caching
    (when `cache`)."""
    tenant, user, sid = row["tenant_id"], row["user_id"], row["session_id"]
    plan = SessionPlan(tenant, sid, user, "llm", episodes)
    names = list(memory.categories.names) or ["knowledge"]
    chunks = chunk_episodes(episodes, cfg.episodes_per_prompt)
    summaries: list[str] = []
    lists: dict[str, list[str]] = {name: [] for name in KINDS}
    entities: dict[str, None] = {}
    raw: list[NewFact] = []
    profile: list[dict[str, Any]] = []
    for n, chunk in enumerate(chunks, start=1):
        ext = model.ask(
            "extract",
            system_prompt(names),
            user_prompt(sid, chunk, (n, len(chunks))),
            Extraction,
            tenant_id=tenant,
        )
        if ext.summary is not None:
            summaries.append(ext.summary)
        part = f" (part {n})" if len(chunks) > 1 else ""
        plan.dropped += [{**d.model_dump(), "item": d.item + part} for d in ext.dropped]
        for ent in ext.entities:
            entities.setdefault(" ".join(ent.split()), None)
        for list_name, (kind, default_category) in KINDS.items():
            for item in getattr(ext, list_name):
                category = (
                    item.category
                    if (list_name == "facts" and item.category in names)
                    else default_category
                )
                raw.append(
                    NewFact(kind, category, item.text, item.importance, cited(item.turns, chunk))
                )
                lists[list_name].append(item.text)
        for change in ext.profile:
            profile.append(
                {
                    "field": change.field,
                    "value": change.value,
                    "text": change.text,
                    "source_ids": cited(change.turns, chunk),
                }
            )
    plan.summary_text = " ".join(summaries)
    plan.summary_sources = [e["id"] for e in episodes]
    if not summaries:  # every summary the model wrote broke a rule: the turns speak instead
        plan.summary_text, _, plan.summary_sources = extractive_summary(sid, episodes)
    plan.structured = {
        "method": "llm",
        "model": model.name,
        "summary": plan.summary_text,
        **({} if summaries else {"summary_method": "extractive"}),
        **lists,
        "entities": [e for e in entities if e][:50],
        "profile": [{"field": p["field"], "value": p["value"]} for p in profile],
    }
    plan.proposals = _unique_profile(profile)
    # A profile change goes through consent only: drop its echo among the plain facts.
    consent = [tokens(p["text"]) for p in plan.proposals]
    raw = [f for f in raw if not any(jaccard(f.tokens, c) >= cfg.jaccard_merge for c in consent)]
    facts, plan.duplicates_in_batch = dedup.dedup_batch(
        raw[: cfg.max_facts_per_session], cfg.jaccard_merge
    )
    plan.facts = facts
    _embed(memory, facts)
    stored = dedup.load_store(memory.db, tenant, user, memory.embedder is not None)
    for fact in facts:
        dedup.classify(fact, stored, cfg)
    # A decision or todo repeating one of the user's ledger rows joins it, no model asked.
    match_ledger(memory, facts, tenant, user, cfg.jaccard_merge)
    uncertain = [f for f in facts if f.action == "add" and f.checks]
    if uncertain:
        plan.pairs = dedup.check_pairs(
            model, memory.db, uncertain, cfg, tenant_id=tenant, budget_left=pairs_left, cache=cache
        )
    _guard_profile(facts, {s.id: s for s in stored})
    cap_plan(plan, cfg.max_writes_per_turn, writes_left)
    return plan


def _guard_profile(facts: list[NewFact], by_id: dict[int, Any]) -> None:
    """Changing a sensitive profile field needs consent, not a supersession: a fact that would
    supersede an active memory holding one (an accepted proposal's fact, or any `profile`
    fact stating the field) becomes a proposal for that field instead."""
    for fact in facts:
        if fact.action != "supersede":
            continue
        held = {i: held_fields(by_id[i].kind, by_id[i].category, by_id[i].attributes,
                               by_id[i].text) for i in fact.supersedes}
        guarded = [i for i in fact.supersedes if held[i]]
        if not guarded:
            continue
        fields = [f for i in guarded for f in held[i]]
        # The field the new text states, when it states one of those held; else the first.
        stated = [f for f in fields if field_value(f, fact.text) is not None]
        fact.action, fact.supersedes = "propose", guarded
        fact.profile_field = (stated or fields)[0]


def _unique_profile(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for item in items:
        seen.setdefault((item["field"], normalise(item["value"])), item)
    return list(seen.values())


def _embed(memory: MemoryHandle, facts: list[NewFact]) -> None:
    if memory.embedder is None or not facts:
        return
    matrix = memory.embedder.embed_documents([f.text for f in facts]).astype("float32")
    for fact, vector in zip(facts, matrix, strict=True):
        fact.vector = vector


def plan_extractive(
    row: dict[str, Any], episodes: list[dict[str, Any]], note: str = ""
) -> SessionPlan:
    plan = SessionPlan(
        row["tenant_id"], row["session_id"], row["user_id"], "extractive", episodes, note=note
    )
    plan.summary_text, plan.structured, plan.summary_sources = extractive_summary(
        row["session_id"], episodes
    )
    if note:
        plan.structured["note"] = note
    return plan


# -- the run


def consolidate(
    memory: MemoryHandle,
    model: Model | None,
    cfg: LifecycleSettings,
    *,
    tenant_id: str | None = None,
    user_id: str | None = None,
    session_id: str | None = None,
    idle_hours: float | None = None,
    dry_run: bool = False,
    lock: RunLock | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Consolidate every pending session in scope; returns the report (or the plan, dry-run).
    `progress`: called after each session (memcli/core/progress.py)."""
    db = memory.db
    idle_before = None
    if idle_hours is not None:
        idle_before = format_ts(datetime.now(UTC) - timedelta(hours=idle_hours))
    rows = lifecycle_sql.pending_sessions(
        db,
        tenant_id=tenant_id,
        user_id=user_id,
        session_id=session_id,
        idle_before=idle_before,
        upgrade_extractive=model is not None,
    )
    if (
        session_id is not None
        and not rows
        and not lifecycle_sql.session_exists(db, session_id, tenant_id)
    ):
        raise NotFoundError(f"no session {session_id!r}", "check the id with `memcli history`")
    report: dict[str, Any] = {
        "dry_run": dry_run,
        "method": "llm" if model else "extractive",
        "model": model.name if model else None,
        "sessions": [],
        "up_to_date": [],
        "compaction": [],
        "dedup": [],
        "errors": [],
        "deferred": [],
        "stopped": None,
    }
    if session_id is not None and not rows:
        report["up_to_date"].append(session_id)
    caps = DailyCaps(db, cfg, dry_run)
    apps: set[tuple[str, str | None, str]] = set()  # (tenant, user, app) scopes to compact
    users: set[tuple[str, str | None]] = set()
    for done, row in enumerate(rows):
        report_progress(progress, "sessions", done, len(rows))
        if lock is not None:
            lock.refresh()
        upgrade = model is not None and row["method"] == "extractive"
        episodes = lifecycle_sql.session_episodes(
            db, row["tenant_id"], row["session_id"], 0 if upgrade else int(row["last_seq"])
        )
        if not episodes:
            report["up_to_date"].append(row["session_id"])
            continue
        scope = (row["tenant_id"], row["user_id"])
        writes_left = caps.writes_left(scope) if model is not None else None
        if writes_left == 0:  # asks the model nothing; tomorrow's run takes the session
            report["deferred"].append({"tenant_id": row["tenant_id"],
                                       "session_id": row["session_id"],
                                       "reason": "the user's daily write cap is reached"})
            continue
        try:
            if model is None:
                plan = plan_extractive(row, episodes)
            else:
                plan = plan_llm(
                    memory,
                    model,
                    cfg,
                    row,
                    episodes,
                    caps.pairs_left(scope),
                    cache=not dry_run,
                    writes_left=writes_left,
                )
                caps.planned(scope, plan)
        except LLMBudgetExceeded as exc:
            report["stopped"] = str(exc)
            break
        except LLMBadReply as exc:
            error = {
                "session_id": row["session_id"],
                "task": exc.task,
                "reason": exc.reason,
                "raw": exc.raw[:200],
            }
            report["errors"].append(error)
            if dry_run:
                continue
            with db.transaction():
                # The reason may quote the model's reply: stored text, so redacted.
                reason, _ = redact_text(f"{exc.task}: {exc.reason}")
                failures = lifecycle_sql.record_failure(
                    db, row["tenant_id"], row["session_id"], reason
                )
            error["failures"] = failures
            if failures < cfg.max_llm_failures:
                continue  # stays pending; nothing of it was written
            plan = plan_extractive(
                row,
                episodes,
                note=f"the model failed {failures} times "
                f"(last: {exc.reason}); summarised extractively",
            )
        except LLMError as exc:  # unreachable, bad key, unknown model: no use going on
            report["errors"].append({"session_id": row["session_id"], "reason": str(exc)})
            report["stopped"] = str(exc)
            break
        if upgrade:
            plan.replaces_summaries = lifecycle_sql.session_summaries(
                db, row["tenant_id"], row["session_id"]
            )
        users.add(scope)
        if plan.app_id:
            apps.add((row["tenant_id"], row["user_id"], plan.app_id))
        if dry_run:
            report["sessions"].append(plan.as_json())
        else:
            report["sessions"].append(apply_plan(memory, plan))
    report_progress(progress, "sessions", len(rows), len(rows))
    if user_id is not None:
        users.add((tenant_id or "default", user_id))
    report["dedup"] = dedup_store(memory, cfg, users, dry_run=dry_run)
    if apps:
        if lock is not None:
            lock.refresh()
        report["compaction"] = compact_apps(memory, model, cfg, sorted(apps), dry_run=dry_run)
    if model is not None:
        report["usage"] = model.spend.as_dict()
    return report
