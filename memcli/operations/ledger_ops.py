"""The ledger's operations: decisions, tasks, checkpoints and artifacts.

One function per operation, taking the validated request model (memcli.operations.
ledger_requests): the CLI (`memcli decision|task|checkpoint ...`), the HTTP routes and the MCP
tools call these. The service only binds the caller's scope (its tenant, user, agent and app)
before it calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.errors import UsageError
from memcli.ledger import entries
from memcli.operations.ledger_requests import (
    ArtifactRequest,
    CheckpointLoad,
    CheckpointSave,
    DecisionRequest,
    DecisionsQuery,
    LedgerWrite,
    TaskRequest,
    TasksQuery,
)
from memcli.operations.record import artifact_body

if TYPE_CHECKING:
    from memcli.operations.memory import Memory
    from memcli.store.owner import Owner

# -- the operations ----------------------------------------------------------------------------
def _scope(req: LedgerWrite) -> dict[str, Any]:
    return req.model_dump(include={"tenant_id", "user_id", "session_id", "agent_id", "app_id"})


def record_decision(memory: Memory, req: DecisionRequest, owner: Owner | None = None
                    ) -> dict[str, Any]:
    """A new decision, or (`supersedes`) the one replacing an `owner`'s decision: its row."""

    lists = {"rationale": req.rationale, "constraints": req.constraints,
             "alternatives": req.alternatives, "consequences": req.consequences,
             "refs": req.refs}
    if req.supersedes is not None:
        return entries.supersede_decision(memory, req.supersedes, req.decision, owner=owner,
                                         reason=req.reason, **lists)
    return entries.add_decision(memory, req.decision, scope=req.scope, channel=req.channel,
                               sensitivity=req.sensitivity, **_scope(req), **lists)


def query_decisions(memory: Memory, req: DecisionsQuery, *, all_tenants: bool = False
                    ) -> list[dict[str, Any]]:
    """Decisions, newest first (`all` includes the superseded ones and their links)."""

    return entries.list_decisions(
        memory, status=None if req.status == "all" else req.status, tenant_id=req.tenant_id,
        all_tenants=all_tenants, user_id=req.user_id, app_id=req.app_id, limit=req.limit)


def record_task(memory: Memory, req: TaskRequest, owner: Owner | None = None) -> dict[str, Any]:
    """A new task, or (`task_id`) an `owner`'s task changed: its row."""

    if req.task_id is not None:
        return entries.update_task(memory, req.task_id, status=req.status, title=req.title,
                                  details=req.details, refs=req.refs or None, owner=owner)
    if req.title is None:
        raise UsageError("bad task: title: a new task needs a title", "give task_id to update one")
    return entries.add_task(memory, req.title, details=req.details or "",
                           status=req.status or "open", refs=req.refs, channel=req.channel,
                           sensitivity=req.sensitivity, **_scope(req))


def query_tasks(memory: Memory, req: TasksQuery, *, all_tenants: bool = False
                ) -> list[dict[str, Any]]:
    """Tasks, newest first."""

    return entries.list_tasks(memory, statuses=tuple(req.status or ()), tenant_id=req.tenant_id,
                             all_tenants=all_tenants, user_id=req.user_id, app_id=req.app_id,
                             limit=req.limit)


def save_checkpoint(memory: Memory, state: Any, req: CheckpointSave) -> dict[str, Any]:
    """`state` saved for (user, thread), replacing the previous save: its row, without the state."""

    row = entries.save_checkpoint(memory, state, user_id=req.user_id, thread_id=req.thread_id,
                                 tenant_id=req.tenant_id, sensitivity=req.sensitivity)
    return {k: v for k, v in row.items() if k != "data"}


def load_checkpoint(memory: Memory, req: CheckpointLoad) -> dict[str, Any]:
    """The saved state of (user, thread), with its version and time."""

    return entries.load_checkpoint(memory, user_id=req.user_id, thread_id=req.thread_id,
                                  tenant_id=req.tenant_id, version=req.version)


def get_artifact(memory: Memory, req: ArtifactRequest, owner: Owner) -> dict[str, Any]:
    """The full output kept for a truncated tool result, `owner`'s only: `{artifact_id,
    tenant_id, bytes, text}` (text decoded as UTF-8, bad bytes replaced)."""

    body = artifact_body(memory, req.artifact_id, owner)
    return {"artifact_id": req.artifact_id, "tenant_id": owner.tenant_id, "bytes": len(body),
            "text": body.decode("utf-8", errors="replace")}
