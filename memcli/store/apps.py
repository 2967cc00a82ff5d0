"""SQL for the app-memory design's app admin routes: the memories one app holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.store.batching import marks

if TYPE_CHECKING:
    from memcli.store.connection import Database

# What the admin listing shows of a memory (the app-memory design: id, content, created and
# updated times), plus the scope keys that say whose it is.
APP_MEMORY_COLUMNS = ("id", "kind", "category", "content", "user_id", "agent_id", "session_id",
                      "sensitivity", "importance", "pinned", "created_at", "updated_at")


def list_app_memories(db: Database, *, tenant_id: str, app_id: str, user_id: str | None,
                      limit: int, categories: tuple[str, ...] | None = None,
                      hidden: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The active memories of one app in one tenant (and user, when given), newest first; only
    of `categories` (None: any) and never of `hidden` ones (a bound caller's, as
    memcli.store.owner.Owner says)."""
    clauses = ["tenant_id = ?", "app_id = ?", "state = 'active'"]
    params: list[Any] = [tenant_id, app_id]
    if user_id is not None:
        clauses.append("user_id = ?")
        params.append(user_id)
    if categories is not None:
        clauses.append(f"category IN ({marks(categories) or 'NULL'})")
        params.extend(categories)
    if hidden:
        clauses.append(f"(category IS NULL OR category NOT IN ({marks(hidden)}))")
        params.extend(hidden)
    rows = db.query(
        f"SELECT {', '.join(APP_MEMORY_COLUMNS)} FROM memories WHERE {' AND '.join(clauses)} "
        "ORDER BY updated_at DESC, id DESC LIMIT ?", (*params, limit))
    for row in rows:
        row["pinned"] = bool(row["pinned"])
    return rows
