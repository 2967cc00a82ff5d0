"""What the memory's life operations do, once, for the CLI, the HTTP routes and the MCP tools:
each takes its validated request (memcli.operations.lifecycle_requests) with the scope already
bound by the caller (a server narrows it to a token's tenant, user and app first)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from memcli.core.inputs import check_text
from memcli.core.records import utcnow
from memcli.errors import MemcliError, NotAllowedError, UsageError
from memcli.lifecycle import reflect
from memcli.lifecycle.consolidate import consolidate as run
from memcli.lifecycle.decay import run_decay
from memcli.lifecycle.remember import remember as remember_fact
from memcli.lifecycle.runlock import run_lock
from memcli.operations.erase import check_purged, purge_payload
from memcli.operations.requests import PurgeRequest
from memcli.store import lifecycle_sql
from memcli.store.apps import list_app_memories
from memcli.store.owner import memory as owned

if TYPE_CHECKING:
    from memcli.config import LifecycleSettings, Settings
    from memcli.derived.llm_usage import Model
    from memcli.operations.lifecycle_requests import (
        AppMemoriesRequest,
        ConsolidateRequest,
        DecayRequest,
        ReflectRequest,
        RememberRequest,
    )
    from memcli.operations.memory import Memory
    from memcli.store.owner import Owner

# The report keys counted in a run's `lifecycle_runs` row.
_COUNTED = ("sessions", "created", "decayed", "purged", "errors")


@contextmanager
def locked_run(memory: Memory, settings: Settings, command: str, dry_run: bool,
               wait: float | None = None) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A cron command's lock and its `lifecycle_runs` row, neither for a dry run. Another run
    holding the lock is waited for, `wait` seconds at most (default `lifecycle.lock_wait`),
    then busy: exit 75. The caller puts its report in the yielded dict as `report`."""

    result: dict[str, Any] = {}
    if dry_run:
        yield None, result
        return
    wait = settings.lifecycle.lock_wait if wait is None else wait
    with run_lock(memory.db, command, settings.lifecycle.lock_minutes, wait) as lock:
        with memory.db.transaction():
            run_id = lifecycle_sql.start_run(memory.db, command, None, None, utcnow())
        status = "failed"
        try:
            yield lock, result
            report = result.get("report", {})
            status = ("stopped" if report.get("stopped")
                      else "failed" if report.get("errors") else "ok")
        finally:
            counts = {k: (len(v) if isinstance(v, list) else v)
                      for k, v in result.get("report", {}).items() if k in _COUNTED}
            try:
                with memory.db.transaction():
                    lifecycle_sql.finish_run(memory.db, run_id, status, counts, utcnow())
            except MemcliError:
                pass  # bookkeeping only: never mask the run's own outcome


def consolidate(memory: Memory, settings: Settings, req: ConsolidateRequest,
                model: Model | None, progress: Any = None, lock_wait: float | None = None
                ) -> dict[str, Any]:
    """Finished sessions turned into deduplicated facts and summaries, under the lock
    (`lock_wait`: seconds to wait for another run; default `lifecycle.lock_wait`)."""

    with locked_run(memory, settings, "consolidate", req.dry_run, lock_wait) as (lock, result):
        result["report"] = run(
            memory, model, settings.lifecycle, tenant_id=req.tenant_id, user_id=req.user_id,
            session_id=req.session_id, idle_hours=req.idle_hours, dry_run=req.dry_run,
            lock=lock, progress=progress)
    return result["report"]


def decay(memory: Memory, settings: Settings, req: DecayRequest) -> dict[str, Any]:
    """Ebbinghaus decay and the TTL rule (the plan only, for a dry run), under the lock."""

    with locked_run(memory, settings, "decay", req.dry_run) as (_lock, result):
        result["report"] = run_decay(memory.db, settings.lifecycle, threshold=req.threshold,
                                     purge_expired=req.purge_expired, dry_run=req.dry_run)
    return result["report"]


def reflection(name: str, memory: Memory, settings: Settings, req: ReflectRequest,
               model: Model | None) -> dict[str, Any]:
    """`reflect` or `insights` (memcli.lifecycle.reflect), under the lock."""

    with locked_run(memory, settings, name, req.dry_run) as (_lock, result):
        result["report"] = getattr(reflect, name)(
            memory, model, settings.lifecycle, tenant_id=req.tenant_id, user_id=req.user_id,
            force=req.force, dry_run=req.dry_run)
    return result["report"]


def remember(memory: Memory, cfg: LifecycleSettings, req: RememberRequest) -> dict[str, Any]:
    """Store a fact or a procedure (near-duplicates merged), or queue a consent proposal."""

    if req.text is None and not req.steps:
        raise UsageError("nothing to remember", "give text, `-` for stdin, or steps")
    if req.text is not None:
        check_text(req.text, "the text")
    return remember_fact(
        memory, cfg, text=req.text, procedural=req.procedural, steps=req.steps or None,
        field=req.field, tenant_id=req.tenant_id, user_id=req.user_id, agent_id=req.agent_id,
        session_id=req.session_id, app_id=req.app_id, category=req.category,
        importance=req.importance, pinned=req.pinned, title=req.title)


def app_memories(memory: Memory, req: AppMemoriesRequest, owner: Owner) -> dict[str, Any]:
    """An app's active memories, newest first, of those `owner` may see."""

    rows = list_app_memories(memory.db, tenant_id=owner.tenant_id, app_id=req.app_id,
                             user_id=owner.user_id, limit=req.limit,
                             categories=owner.categories, hidden=owner.hidden)
    return {"tenant_id": owner.tenant_id, "app_id": req.app_id, "memories": rows}


def delete_app_memories(memory: Memory, req: AppMemoriesRequest, owner: Owner
                        ) -> dict[str, Any]:
    """`memcli purge --app APP` (one memory with `memory_id`: `purge --memory ID --app APP`,
    which takes the event it was cut from with it), as `owner` may: one of its memories, or
    the whole app when it sees every category. Deleted for good."""

    if req.memory_id is not None:  # the owner's, of this app (and user), or not found

        owned(memory.db, req.memory_id, owner)
    elif owner.categories is not None or owner.hidden:
        raise NotAllowedError("this caller may not see every category, so it may not purge "
                              "a whole app", "purge its memories one by one (memory_id), "
                              "or use a token without categories or agent")
    out = purge_payload(memory, PurgeRequest(memory_id=req.memory_id, user_id=owner.user_id,
                                             tenant_id=owner.tenant_id, app_id=req.app_id))
    check_purged(out)
    return out
