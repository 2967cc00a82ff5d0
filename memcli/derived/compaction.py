"""The app memory limit: an app scope keeps at most N (default 10) derived memories.

An app scope is (tenant, user, app): each user's memories of an app, plus the app-wide ones
(no user) shared by the app's users in that tenant; never across tenants.

When an app has more, the model is asked to pick ONE action: delete the least useful memory, or
merge two overlapping ones into a new text. Any failure (no model, unreachable, over budget, a
malformed or invalid decision) falls back to dropping the oldest unpinned memory. The loop runs
until the count is back at the limit. "Dropping" is a soft delete (restorable for 30 days); a
merge supersedes both originals; nothing is deleted outright.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from memcli.core.records import format_ts, utcnow
from memcli.derived.textrules import FactText
from memcli.derived.writer import encode_ahead, supersede, write_memory
from memcli.providers.llm import LLMError
from memcli.store import lifecycle_sql, memories

if TYPE_CHECKING:
    from memcli.config import LifecycleSettings
    from memcli.derived.llm_usage import Model
    from memcli.store.handle import MemoryHandle
    from memcli.store.lifecycle_sql import AppKey

APP_KINDS = ("fact", "decision", "task", "summary", "insight")


class Decision(BaseModel):
    action: Literal["delete", "merge"]
    target_id: int
    merge_with_id: int | None = None
    new_content: FactText | None = None
    reason: str = Field(default="", max_length=300)


SYSTEM = (
    "An assistant keeps a small, fixed number of memories per app. There is one memory too many. "
    "Choose ONE action: `delete` the least useful memory (redundant, outdated or trivial), or "
    "`merge` two overlapping memories (`target_id` and `merge_with_id`) into `new_content`: one "
    "third-person text of 1-2 sentences, at most 280 characters, keeping what matters in both. "
    "Only the ids listed as choosable may be used."
)


def _prompt(rows: list[dict[str, Any]], limit: int) -> str:
    lines = [f"Limit: {limit} memories; there are {len(rows)}.", ""]
    for r in rows:
        flag = " (pinned, not choosable)" if r["pinned"] else ""
        lines.append(f"[id {r['id']}] {r['created_at'][:10]} {r['kind']}{flag}: {r['content']}")
    return "\n".join(lines)


def _check(decision: Decision, choosable: set[int]) -> str | None:
    """Why a decision cannot be applied, or None when it can."""
    if decision.target_id not in choosable:
        return f"target_id {decision.target_id} is not a choosable memory"
    if decision.action == "merge":
        if decision.merge_with_id not in choosable or decision.merge_with_id == decision.target_id:
            return f"merge_with_id {decision.merge_with_id} is not another choosable memory"
        if not decision.new_content:
            return "merge without new_content"
    return None


def compact_apps(
    memory: MemoryHandle,
    model: Model | None,
    cfg: LifecycleSettings,
    scopes: list[AppKey],
    *,
    dry_run: bool = False,
) -> list[dict[str, Any]]:
    """Bring each app scope back to its limit; one report per scope that was over it.

    An app scope is (tenant, user, app): a user's memories of an app, or the app-wide ones
    (user None) that all its users of the tenant share. Counting, the prompt and the choice
    never reach past the scope, so one tenant's (or user's) memories never push out, or are
    shown to a model beside, another's (README "App memory")."""
    db = memory.db
    out = []
    for key in sorted(set(scopes), key=lambda k: (k[0], k[1] or "", k[1] is not None, k[2])):
        tenant_id, user_id, app_id = key
        limit = cfg.app_memory_limits.get(app_id, cfg.app_memory_limit)
        count = lifecycle_sql.app_count(db, key, APP_KINDS)
        if count <= limit:
            continue
        report: dict[str, Any] = {"tenant_id": tenant_id, "user_id": user_id, "app_id": app_id,
                                  "limit": limit, "before": count, "actions": []}
        out.append(report)
        if dry_run:
            report["over"] = count - limit
            continue
        while count > limit:
            rows = lifecycle_sql.app_memories(db, key, APP_KINDS)
            choosable = [r for r in rows if not r["pinned"]]
            if not choosable:
                report["note"] = "every remaining memory is pinned: the limit cannot be met"
                break
            decision, method, failure = _decide(model, rows, choosable, limit)
            report["actions"].append(_apply(memory, decision, method, failure, rows, cfg))
            count = lifecycle_sql.app_count(db, key, APP_KINDS)
        report["after"] = count
    return out


def _decide(
    model: Model | None, rows: list[dict[str, Any]], choosable: list[dict[str, Any]], limit: int
) -> tuple[Decision, str, str | None]:
    failure = "no LLM configured"
    if model is not None:
        try:
            decision = model.ask(
                "compact", SYSTEM, _prompt(rows, limit), Decision, tenant_id=rows[0]["tenant_id"]
            )
            problem = _check(decision, {r["id"] for r in choosable})
            if problem is None:
                return decision, "llm", None
            failure = f"invalid decision: {problem}"
        except LLMError as exc:  # unreachable, over budget, malformed: all fall back
            failure = str(exc)
    oldest = choosable[0]
    return (
        Decision(action="delete", target_id=oldest["id"], reason="oldest (FIFO)"),
        "fifo",
        failure,
    )


def _apply(
    memory: MemoryHandle,
    decision: Decision,
    method: str,
    failure: str | None,
    rows: list[dict[str, Any]],
    cfg: LifecycleSettings,
) -> dict[str, Any]:
    db = memory.db
    by_id = {r["id"]: r for r in rows}
    target = by_id[decision.target_id]
    action: dict[str, Any] = {
        "action": decision.action,
        "target_id": decision.target_id,
        "method": method,
        "reason": decision.reason,
    }
    if failure:
        action["fallback_because"] = failure
    now = utcnow()
    merged = str(decision.new_content)
    # The merged text's embedding is computed before the write lock is taken.
    ahead = encode_ahead(memory, [merged]) if decision.action != "delete" else {}
    with db.transaction():
        if decision.action == "delete":
            purge_at = format_ts(datetime.now(UTC) + timedelta(days=cfg.soft_delete_days))
            memories.set_state(db, target["id"], "soft_deleted", purge_at)
            memories.add_history(
                db,
                target["id"],
                "DELETE",
                old_ref="active",
                new_ref="soft_deleted",
                actor="compaction",
                scope=target,
                meta={
                    "reason": "app_limit",
                    "method": method,
                    "why": decision.reason,
                    "purge_at": purge_at,
                },
            )
            memories.bump_revision(
                db,
                memories.thread_key(target["tenant_id"], target["user_id"], target["session_id"]),
                [("soft_deleted", target["id"], target["content"])],
            )
        else:
            other = by_id[int(decision.merge_with_id or 0)]
            new_id = write_memory(
                memory,
                content=merged,
                kind=target["kind"],
                category=target["category"],
                source_ids=[target["id"], other["id"]],
                tenant_id=target["tenant_id"],
                user_id=target["user_id"],
                session_id=target["session_id"],
                app_id=_app(db, target["id"]),
                attributes={
                    "method": "llm",
                    "merged": [target["id"], other["id"]],
                    "why": decision.reason,
                },
                actor="compaction",
                event_time=now,
                vector=ahead[merged][0],
                sparse_terms=ahead[merged][1],
            )
            for old in (target["id"], other["id"]):
                supersede(memory, old, new_id, actor="compaction", reason="app_limit merge")
            action["new_id"] = new_id
            action["merge_with_id"] = other["id"]
    return action


def _app(db: Any, memory_id: int) -> str | None:
    return memories.get_memories(db, [memory_id])[memory_id]["app_id"]
