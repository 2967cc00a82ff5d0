"""SQL for the commands stage of `memcli rebuild`: the command events (memcli/ledger/commands.py),
which memory each created (its ADD history row), and the checkpoints derived from them
(memcli/lifecycle/rebuild_commands.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.store.sealing import seal_if

if TYPE_CHECKING:
    from memcli.store.connection import Database


def command_events(db: Database, ops: tuple[str, ...]) -> list[dict[str, Any]]:
    """The command events of these ops, oldest first, content parsed (the row tracer opens
    `high` ones)."""
    out = []
    for row in db.query(
        "SELECT seq, event_id, ts, recorded_at, tenant_id, user_id, agent_id, session_id,"
        " app_id, run_id, channel, actor_id, sensitivity, content, refs FROM events"
        " WHERE kind = 'command' ORDER BY seq"
    ):
        try:
            content = json.loads(row["content"])
        except ValueError:
            continue
        if isinstance(content, dict) and content.get("op") in ops:
            out.append({**row, "content": content})
    return out


def created_by_commands(db: Database) -> dict[str, int]:
    """event id -> the memory its command created, as the memory's ADD history row says
    (old_ref `command`)."""
    return {
        event_id: int(mid)
        for event_id, mid in db.execute(
            "SELECT event_id, memory_id FROM history WHERE op = 'ADD' AND old_ref = 'command'"
            " AND event_id IS NOT NULL AND memory_id IS NOT NULL ORDER BY id"
        )
    }


def checkpoint_keys(db: Database) -> set[tuple[str, str, str]]:
    return {
        (t, u, th)
        for t, u, th in db.execute("SELECT tenant_id, user_id, thread_id FROM checkpoints")
    }


def restore_checkpoint(db: Database, row: dict[str, Any]) -> None:
    """A checkpoint with the version and times its saves gave it."""
    high = row["sensitivity"] == "high"
    db.execute(
        "INSERT INTO checkpoints (tenant_id, user_id, thread_id, data, sensitivity, version,"
        " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row["tenant_id"],
            row["user_id"],
            row["thread_id"],
            seal_if(db, high, row["data"]),
            row["sensitivity"],
            row["version"],
            row["created_at"],
            row["updated_at"],
        ),
    )
