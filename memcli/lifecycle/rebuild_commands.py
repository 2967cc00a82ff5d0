"""The commands stage of `memcli rebuild`: what `remember`, `correct`, `proposals accept` and
`checkpoint save` wrote comes back from their events (memcli/ledger/commands.py; decisions and
tasks come back in the ledger stage, memcli/lifecycle/rebuild_ledger.py).

A `remember`, `correct` or `proposal.accept` event holds every field of the memory it created,
and that memory's ADD history row names the event: a missing memory comes back with its id, the
row the event describes (at the event's time, as `write_memory` wrote it), and the state its
history replays (forget, restore, pin, confirm, supersede, merge). A memory a purge removed
never comes back. A checkpoint comes back from its thread's `checkpoint.save` events: the last
one's data, one version per save, created at the first. Rows that exist are kept as they are.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.derived.writer import memory_row
from memcli.ledger.commands import MEMORY_OPS
from memcli.lifecycle.rebuild_ledger import replay_state
from memcli.store import rebuild_commands_sql, rebuild_sql

if TYPE_CHECKING:
    from memcli.store.connection import Database

_SCOPE = ("tenant_id", "user_id", "agent_id", "session_id", "app_id", "run_id")


def plan_commands(db: Database) -> dict[str, Any]:
    """The memories and checkpoints the command events describe that are missing."""
    created = rebuild_commands_sql.created_by_commands(db)
    purged = rebuild_sql.purged_ids(db)
    plan: dict[str, Any] = {"memories": [], "checkpoints": [], "unrecorded": []}
    saves: dict[tuple[str, str, str], dict[str, Any]] = {}
    for event in rebuild_commands_sql.command_events(db, (*MEMORY_OPS, "checkpoint.save")):
        content = event["content"]
        if content["op"] == "checkpoint.save":
            _save(saves, event, content)
        # A merge created nothing (its history replays), nor a profile field's proposal.
        elif "merged_into" not in content and "field" not in content:
            memory_id = created.get(event["event_id"])
            if memory_id is None:
                plan["unrecorded"].append(event["event_id"])
            elif memory_id not in purged:
                plan["memories"].append(_memory(event, content, memory_id))
    present = rebuild_sql.existing_ids(db, [m["id"] for m in plan["memories"]])
    plan["memories"] = [m for m in plan["memories"] if m["id"] not in present]
    have = rebuild_commands_sql.checkpoint_keys(db)
    plan["checkpoints"] = [row for key, row in saves.items() if key not in have]
    return plan


def _memory(event: dict[str, Any], content: dict[str, Any], memory_id: int) -> dict[str, Any]:
    row = memory_row(
        content=content["text"],
        kind=content["memory_kind"],
        category=content["category"],
        source_ids=content.get("source_ids") or [],
        scope={k: event[k] for k in _SCOPE},
        channel=event["channel"],
        sensitivity=event["sensitivity"],
        importance=content["importance"],
        pinned=content["pinned"],
        confidence=1.0,
        decay_rate=content["decay_rate"],
        event_time=content.get("event_time"),
        attributes=content["attributes"],
        actor=event["actor_id"],
        now=event["recorded_at"],
    )
    return {**row, "id": memory_id, "valid_to": None, "state": "active", "purge_at": None}


def _save(
    saves: dict[tuple[str, str, str], dict[str, Any]],
    event: dict[str, Any],
    content: dict[str, Any],
) -> None:
    key = (event["tenant_id"], event["user_id"], content["thread_id"])
    data = json.dumps(content["data"], ensure_ascii=False, sort_keys=True)
    old = saves.get(key)
    saves[key] = {
        "tenant_id": key[0],
        "user_id": key[1],
        "thread_id": key[2],
        "data": data,
        "sensitivity": event["sensitivity"],
        "version": old["version"] + 1 if old else 1,
        "created_at": old["created_at"] if old else event["recorded_at"],
        "updated_at": event["recorded_at"],
    }


def apply_commands(db: Database, plan: dict[str, Any]) -> None:
    """Write what the plan brings back (inside the stage's transaction)."""
    history = rebuild_sql.history_of(db, [m["id"] for m in plan["memories"]])
    for row in plan["memories"]:
        replay_state(row, history.get(row["id"], []))
        rebuild_sql.insert_episode(db, row)
    for row in plan["checkpoints"]:
        rebuild_commands_sql.restore_checkpoint(db, row)


def summary(plan: dict[str, Any]) -> dict[str, Any]:
    return {
        "restored_memories": [m["id"] for m in plan["memories"]][:100],
        "restored_checkpoints": len(plan["checkpoints"]),
    }


def cannot(plan: dict[str, Any]) -> list[dict[str, Any]]:
    if not plan["unrecorded"]:
        return []
    return [
        {
            "what": "remember and correct events whose memory history does not name",
            "event_ids": plan["unrecorded"][:100],
            "count": len(plan["unrecorded"]),
            "why": "the memory's ADD history row is gone: no id to give back",
        }
    ]
