"""Checkpoints: opaque JSON state blobs per (tenant, user, thread), overwritten on save, so an
agent can resume its work. Part of the ledger (`memcli.ledger` re-exports both functions).
The state is redacted first, keys too (memcli.scrub)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.errors import NotFoundError, UsageError
from memcli.ledger import check_sensitivity
from memcli.scrub import kinds, redact_record
from memcli.store import ledger as sql

if TYPE_CHECKING:
    from memcli.memory import Memory


def save_checkpoint(memory: Memory, data: Any, **options: Any) -> dict[str, Any]:
    """Store an agent's state for (user, thread), replacing the previous one (options: those of
    `_save_checkpoint`). The state is redacted first, keys too, since agents keep state under
    any name (memcli.scrub); the result lists the kinds removed as `redacted`."""
    clean, findings = redact_record(data)
    return {**_save_checkpoint(memory, clean, **options), "redacted": kinds(findings)}


def _save_checkpoint(
    memory: Memory,
    data: Any,
    *,
    user_id: str,
    thread_id: str,
    tenant_id: str | None = None,  # None: the memory's tenant
    sensitivity: str = "none",
) -> dict[str, Any]:
    """Store an agent's state for (user, thread), replacing the previous one."""
    if not user_id or not thread_id:
        raise UsageError("a checkpoint needs a user and a thread", "give --user and --thread")
    check_sensitivity(sensitivity)
    try:
        blob = json.dumps(data, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"checkpoint data is not JSON: {exc}") from exc
    with memory.db.transaction():
        row = sql.save_checkpoint(memory.db, tenant_id or memory.tenant, user_id, thread_id, blob,
                                  sensitivity)
    return _decode_checkpoint(row)


def load_checkpoint(
    memory: Memory, *, user_id: str, thread_id: str, tenant_id: str | None = None
) -> dict[str, Any]:
    row = sql.get_checkpoint(memory.db, tenant_id or memory.tenant, user_id, thread_id)
    if row is None:
        raise NotFoundError(
            f"no checkpoint for user {user_id!r} thread {thread_id!r}",
            "save one with memcli checkpoint save",
        )
    return _decode_checkpoint(row)


def _decode_checkpoint(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "data": json.loads(row["data"])}
