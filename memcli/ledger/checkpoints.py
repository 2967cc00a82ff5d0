"""Checkpoints: opaque JSON state blobs per (tenant, user, thread), overwritten on save, so an
agent can resume its work. Part of the ledger (`memcli.ledger` re-exports both functions).
The state is redacted first, keys too (memcli.policy.redaction).

Every save also leaves a history row (ADD for version 1, UPDATE after; scope = tenant, user
and the thread as session) holding the version it saved, sealed like the checkpoint when
`high`: the audit trail says when each version was written, and `load_checkpoint(version=N)`
reads an older version back from it. A purge of the user (or of the thread's session) empties
those rows' meta with the rest of the user's history, so no old state outlives it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.errors import NotFoundError, UsageError
from memcli.ledger import commands
from memcli.policy.redaction import check_sensitivity, kinds, redact_record
from memcli.store import ledger_sql, memories

if TYPE_CHECKING:
    from memcli.store.handle import MemoryHandle


def save_checkpoint(memory: MemoryHandle, data: Any, **options: Any) -> dict[str, Any]:
    """Store an agent's state for (user, thread), replacing the previous one (options: those of
    `_save_checkpoint`). The state is redacted first, keys too, since agents keep state under
    any name (memcli.policy.redaction); the result lists the kinds removed as `redacted`."""
    clean, findings = redact_record(data)
    return {**_save_checkpoint(memory, clean, **options), "redacted": kinds(findings)}


def _save_checkpoint(
    memory: MemoryHandle,
    data: Any,
    *,
    user_id: str,
    thread_id: str,
    tenant_id: str | None = None,  # None: the memory's tenant
    sensitivity: str = "none",
) -> dict[str, Any]:
    """Store an agent's state for (user, thread), replacing the previous one."""
    if not user_id or not thread_id:
        raise UsageError("a checkpoint needs a user and a thread", "give --user-id and --thread-id")
    check_sensitivity(sensitivity)
    try:
        blob = json.dumps(data, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"checkpoint data is not JSON: {exc}") from exc
    tenant_id = tenant_id or memory.tenant
    # The event first (memcli.ledger.commands): a rebuild saves the same versions again from
    # the thread's events. No session: a session purge keeps checkpoints, so keeps these.
    with memory.db.transaction(), commands.recording(
            memory.db, "checkpoint.save", {"thread_id": thread_id, "data": data},
            tenant_id=tenant_id, user_id=user_id, sensitivity=sensitivity, actor="checkpoint"):
        row = ledger_sql.save_checkpoint(
            memory.db, tenant_id, user_id, thread_id, blob, sensitivity
        )
        version = int(row["version"])
        memories.add_history(
            memory.db, None, "ADD" if version == 1 else "UPDATE",
            old_ref=_ref(version - 1) if version > 1 else None, new_ref=_ref(version),
            actor="checkpoint",
            scope={"tenant_id": row["tenant_id"], "user_id": user_id, "session_id": thread_id},
            meta={"checkpoint": thread_id, "version": version, "sensitivity": sensitivity,
                  "created_at": row["created_at"], "data": blob},
            seal=sensitivity == "high",
        )
    return _decode_checkpoint(row)


def _ref(version: int) -> str:
    return f"checkpoint v{version}"


def load_checkpoint(
    memory: MemoryHandle, *, user_id: str, thread_id: str, tenant_id: str | None = None,
    version: int | None = None,
) -> dict[str, Any]:
    """The saved state of (user, thread): the latest, or the `version`-th save (from history)."""
    tenant = tenant_id or memory.tenant
    row = ledger_sql.get_checkpoint(memory.db, tenant, user_id, thread_id)
    if row is None:
        raise NotFoundError(
            f"no checkpoint for user {user_id!r} thread {thread_id!r}",
            "save one with memcli checkpoint save",
        )
    if version is None or version == row["version"]:
        return _decode_checkpoint(row)
    if not 1 <= version < row["version"]:
        raise UsageError(f"no version {version} of this checkpoint",
                         f"versions run from 1 to {row['version']}")
    saved = ledger_sql.checkpoint_version(memory.db, tenant, user_id, thread_id, _ref(version))
    if saved is None or "data" not in saved["meta"]:
        raise NotFoundError(
            f"version {version} of checkpoint {user_id!r}/{thread_id!r} is not kept",
            "it was saved before versions were kept in history, or purged")
    meta = saved["meta"]
    return {"tenant_id": tenant, "user_id": user_id, "thread_id": thread_id,
            "data": json.loads(meta["data"]), "sensitivity": meta["sensitivity"],
            "version": version, "created_at": meta["created_at"], "updated_at": saved["ts"]}


def _decode_checkpoint(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "data": json.loads(row["data"])}
