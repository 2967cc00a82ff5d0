"""The app memory limit after a single write (`remember --app`, `decision add --app`,
`task add --app`): the app-memory design keeps at most N memories per app, whoever wrote them.

A plain write never calls a model: over the limit, the oldest unpinned memory of the scope is
dropped (FIFO, a soft delete restorable for 30 days), inside the write's own transaction. Why
not the model, even when one is configured: a write is on an agent's hot path, and a model call
there costs seconds (30 s timeout, one retry) and tokens, and could fail a write that succeeded;
`consolidate` (cron, with the model) still chooses what to drop or merge for the scopes it
touches. Runs with no model and no embedder, so it is safe inside a transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.derived.compaction import compact_apps

if TYPE_CHECKING:
    from memcli.config import LifecycleSettings
    from memcli.store.handle import MemoryHandle


def enforce_app_limit(memory: MemoryHandle, tenant_id: str, user_id: str | None, app_id: str,
                      cfg: LifecycleSettings | None = None) -> list[dict[str, Any]]:
    """Bring the (tenant, user, app) scope back to its limit (FIFO); the compaction report,
    empty when the scope was within it. `cfg`: the lifecycle settings (default: the memory's,
    as loaded from config.yaml by `Memory.open`)."""
    cfg = cfg or memory.lifecycle
    return compact_apps(memory, None, cfg, [(tenant_id, user_id, app_id)])
