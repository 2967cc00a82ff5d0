"""`memcli reflect` (weekly reflection) and `memcli insights` (relationship, preference patterns).

Reflection, per user: skipped when the last reflection is younger than 6 days or fewer than 3
facts arrived in the last 7 days; otherwise the model reads the week's facts and writes one
reflection, stored as kind `reflection` with decay_rate 0 (it never decays) and the ids of the
facts it drew on.

Insights, per user with new material: skipped when an insights run finished in the last 24 h;
otherwise the model reads the latest session summaries, the newest facts and a short recent
conversation snippet, and writes 1-3 insights (<= 280 chars, third person), stored as kind
`insight`, category `relationship_dynamic`, importance 0.2. Retrieval ranks by
relevance, recency and importance, so the low importance is what gives them their low weight.

Both need a model; without one they say so and do nothing (no pretend output).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from memcli.core.records import format_ts, utcnow
from memcli.derived.textrules import FactText, check_memory_text, clip, jaccard, tokens
from memcli.derived.writer import write_memory
from memcli.lifecycle.extract import Dropped, keep_valid
from memcli.providers.llm import LLMBadReply, LLMBudgetExceeded, LLMError
from memcli.store import lifecycle_sql

if TYPE_CHECKING:
    from memcli.config import LifecycleSettings
    from memcli.derived.llm_usage import Model
    from memcli.store.handle import MemoryHandle

INSIGHT_IMPORTANCE = 0.2
REFLECTION_FACTS = 200
SEMANTIC = ("fact", "decision", "task")

ReflectionText = Annotated[
    str, AfterValidator(lambda v: check_memory_text(v, max_chars=1200, max_sentences=8))
]


class Reflection(BaseModel):
    reflection: ReflectionText
    themes: list[Annotated[str, Field(max_length=60)]] = Field(default_factory=list, max_length=6)


class Insight(BaseModel):
    summary: FactText
    tags: list[Annotated[str, Field(max_length=40)]] = Field(default_factory=list, max_length=5)


class Insights(BaseModel):
    insights: list[Insight] = Field(default_factory=list, max_length=3)
    dropped: SkipJsonSchema[list[Dropped]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _each_on_its_own(cls, data: Any) -> Any:
        """An insight breaking a writing rule is dropped with its reason, the others kept."""
        if isinstance(data, dict) and isinstance(data.get("insights"), list):
            dropped: list[dict[str, str]] = []
            kept = keep_valid("insights", data["insights"], Insight, 3, dropped)
            data = {**data, "insights": kept, "dropped": dropped}
        return data


REFLECT_SYSTEM = (
    "You write a weekly reflection for an assistant's long-term memory about one person: what "
    "the week's facts show about their situation, priorities, changes and open threads, and "
    "what the assistant should keep in mind. Third person naming the person (never I, you, "
    "we), neutral, at most 8 sentences and 1200 characters. `themes`: up to 6 short labels. "
    "Use only the facts given."
)
INSIGHT_SYSTEM = (
    "You look for latent patterns in a person's recent interactions: relationship dynamics "
    "(trust, tension, closeness), and how preferences evolve. Write 1-3 insights only when the "
    "material supports them (an empty list is fine). Each: third person naming the person, "
    "never refers to the assistant or AI, no I/you/we, 1-2 sentences, at most 280 characters; "
    "`tags`: up to 5 short labels."
)


def _scope_label(tenant: str, user: str | None) -> dict[str, Any]:
    return {"tenant_id": tenant, "user_id": user}


def _new_report(model: Model | None, dry_run: bool) -> dict[str, Any]:
    return {"dry_run": dry_run, "model": model.name if model else None, "created": [],
            "skipped": [], "dropped": [], "errors": [], "stopped": None}


def _with_usage(report: dict[str, Any], model: Model | None) -> dict[str, Any]:
    """The report with what the model's calls cost (no model: nothing was spent)."""
    if model is not None:
        report["usage"] = model.spend.as_dict()
    return report


def _failed(report: dict[str, Any], scope: dict[str, Any], exc: LLMError) -> bool:
    """The model's failure for one scope in the report; True when the run stops there (the
    budget is spent, or the model cannot be reached), False when a bad reply skips the scope."""
    if isinstance(exc, LLMBadReply):
        report["errors"].append({**scope, "task": exc.task, "reason": exc.reason})
        return False
    report["stopped"] = str(exc)
    if not isinstance(exc, LLMBudgetExceeded):
        report["errors"].append({**scope, "reason": str(exc)})
    return True


def _held_back(report: dict[str, Any], scope: dict[str, Any], last: str | None, cut: str,
               force: bool, model: Model | None, enough: bool, short: dict[str, Any]) -> bool:
    """True (and the reason in the report) when a scope is skipped: its last run is newer
    than `cut` (unless forced), it has too little material (`short` says what), or there is
    no model to ask."""
    if not force and last is not None and last > cut:
        reason: dict[str, Any] = {"reason": "recent", "last": last}
    elif not enough:
        reason = short
    elif model is None:
        reason = {"reason": "no_llm"}
    else:
        return False
    report["skipped"].append({**scope, **reason})
    return True


def reflect(
    memory: MemoryHandle,
    model: Model | None,
    cfg: LifecycleSettings,
    *,
    tenant_id: str | None = None,
    user_id: str | None = None,
    force: bool = False,
    dry_run: bool = False,
    now: datetime | None = None,
) -> dict[str, Any]:
    db = memory.db
    now = now or datetime.now(UTC)
    since = format_ts(now - timedelta(days=cfg.reflection_window_days))
    recent_cut = format_ts(now - timedelta(days=cfg.reflection_min_days))
    counts = {
        (r["tenant_id"], r["user_id"]): r["facts"]
        for r in lifecycle_sql.semantic_counts_since(db, since, tenant_id, user_id)
    }
    if user_id is not None:
        counts.setdefault((tenant_id or "default", user_id), 0)
    report = _new_report(model, dry_run)
    for (tenant, user), facts in sorted(counts.items(), key=lambda t: (t[0][0], t[0][1] or "")):
        scope = _scope_label(tenant, user)
        last = lifecycle_sql.latest_of_kind(db, tenant, user, "reflection")
        if _held_back(report, scope, last, recent_cut, force, model,
                      force or facts >= cfg.reflection_min_facts,
                      {"reason": "too_few_facts", "facts": facts}):
            continue
        assert model is not None
        rows = list(
            reversed(
                lifecycle_sql.recent_memories(db, tenant, user, SEMANTIC, since, REFLECTION_FACTS)
            )
        )
        if not rows:
            report["skipped"].append({**scope, "reason": "too_few_facts", "facts": 0})
            continue
        prompt = "\n".join(f"[{r['created_at'][:10]}] ({r['kind']}) {r['content']}" for r in rows)
        try:
            reply = model.ask(
                "reflect",
                REFLECT_SYSTEM,
                f"Facts from {since[:10]} to {format_ts(now)[:10]}:\n{prompt}",
                Reflection,
                tenant_id=tenant,
            )
        except LLMError as exc:
            if _failed(report, scope, exc):
                break
            continue
        item = {
            **scope,
            "text": reply.reflection,
            "themes": reply.themes,
            "source_ids": [r["id"] for r in rows],
        }
        if not dry_run:
            item["id"] = write_memory(
                memory,
                content=reply.reflection,
                kind="reflection",
                category="activity",
                source_ids=item["source_ids"],
                tenant_id=tenant,
                user_id=user,
                importance=0.6,
                decay_rate=0.0,
                actor="reflect",
                attributes={
                    "tags": ["weekly"],
                    "themes": reply.themes,
                    "method": "llm",
                    "model": model.name,
                    "period": [since, format_ts(now)],
                },
            )
        report["created"].append(item)
    return _with_usage(report, model)


def insights(
    memory: MemoryHandle,
    model: Model | None,
    cfg: LifecycleSettings,
    *,
    tenant_id: str | None = None,
    user_id: str | None = None,
    force: bool = False,
    dry_run: bool = False,
    now: datetime | None = None,
) -> dict[str, Any]:
    db = memory.db
    now = now or datetime.now(UTC)
    cut = format_ts(now - timedelta(hours=cfg.insight_min_hours))
    window = format_ts(now - timedelta(days=cfg.reflection_window_days))
    scopes = lifecycle_sql.active_users(db, window, tenant_id, user_id)
    if user_id is not None and not scopes:
        scopes = [(tenant_id or "default", user_id)]
    report = _new_report(model, dry_run)
    for tenant, user in scopes:
        scope = _scope_label(tenant, user)
        last = lifecycle_sql.last_run(db, "insights", tenant, user)
        recent = not force and last is not None and last > cut
        material = None if recent else _insight_material(db, tenant, user, window)
        if _held_back(report, scope, last, cut, force, model, material is not None,
                      {"reason": "no_material"}):
            continue
        assert model is not None and material is not None
        run_id = None
        if not dry_run:
            with db.transaction():
                run_id = lifecycle_sql.start_run(db, "insights", tenant, user, utcnow())
        try:
            reply = model.ask("insights", INSIGHT_SYSTEM, material, Insights, tenant_id=tenant)
        except LLMError as exc:
            if run_id is not None:
                with db.transaction():
                    lifecycle_sql.finish_run(
                        db, run_id, "failed", {"error": type(exc).__name__}, utcnow()
                    )
            if _failed(report, scope, exc):
                break
            continue
        existing = [
            tokens(r["content"])
            for r in lifecycle_sql.recent_memories(db, tenant, user, ("insight",), None, 200)
        ]
        report["dropped"].extend({**scope, **d.model_dump()} for d in reply.dropped)
        created = []
        for ins in reply.insights:
            toks = tokens(ins.summary)
            if any(jaccard(toks, e) >= cfg.jaccard_merge for e in existing):
                report["skipped"].append(
                    {**scope, "reason": "duplicate_insight", "text": ins.summary}
                )
                continue
            existing.append(toks)
            item = {**scope, "text": ins.summary, "tags": ins.tags}
            if not dry_run:
                item["id"] = write_memory(
                    memory,
                    content=ins.summary,
                    kind="insight",
                    category="relationship_dynamic",
                    source_ids=[],
                    tenant_id=tenant,
                    user_id=user,
                    importance=INSIGHT_IMPORTANCE,
                    actor="insights",
                    attributes={"tags": ins.tags, "method": "llm", "model": model.name},
                )
            created.append(item)
        report["created"].extend(created)
        if run_id is not None:
            with db.transaction():
                lifecycle_sql.finish_run(db, run_id, "ok", {"insights": len(created)}, utcnow())
    return _with_usage(report, model)


def _insight_material(db: Any, tenant: str, user: str | None, since: str) -> str | None:
    """Latest activity (<= 5 summaries), new semantic items (<= 3), a <= 1000-char snippet."""
    summaries = lifecycle_sql.recent_memories(db, tenant, user, ("summary",), since, 5)
    facts = lifecycle_sql.recent_memories(db, tenant, user, SEMANTIC, since, 3)
    turns = list(reversed(lifecycle_sql.recent_memories(db, tenant, user, ("episode",), since, 12)))
    if not (summaries or facts or turns):
        return None
    parts = []
    if summaries:
        parts.append(
            "Recent activity:\n"
            + "\n".join(f"- {clip(r['content'], 400)}" for r in reversed(summaries))
        )
    if facts:
        parts.append("New facts:\n" + "\n".join(f"- {r['content']}" for r in facts))
    if turns:
        snippet, used = [], 0
        for r in reversed(turns):  # newest turns first until 1000 characters
            line = f"{r['actor_id'] or r['actor_type'] or 'someone'}: {clip(r['content'], 300)}"
            if used + len(line) > 1000:
                break
            snippet.insert(0, line)
            used += len(line)
        if snippet:
            parts.append("Recent conversation:\n" + "\n".join(snippet))
    return "\n\n".join(parts)
