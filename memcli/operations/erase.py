"""`memcli purge` and the app admin's purge: the plan, the deletion, and the check that the
file was rewritten."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.errors import DatabaseBusyError, UsageError

if TYPE_CHECKING:
    from memcli.operations.memory import Memory
    from memcli.operations.requests import PurgeRequest


def purge_payload(memory: Memory, request: PurgeRequest, *,
                  all_tenants: bool = False) -> dict[str, Any]:
    """`memcli purge`: the plan (dry run) or what was deleted (then `check_purged`)."""

    if all_tenants and request.tenant_id is not None:
        raise UsageError("--all-tenants and --tenant-id exclude each other")
    scope = request.where()
    # "alice" of another tenant is another person: a narrower scope stays in the configured
    # tenant unless --all-tenants says otherwise (as reads do).
    narrower = any(scope[k] is not None for k in ("memory_id", "session_id", "user_id",
                                                  "app_id"))
    if request.tenant_id is None and narrower and not all_tenants:
        scope["tenant_id"] = memory.tenant
    plan = memory.plan_purge(**scope)
    if request.dry_run:
        return {k: v for k, v in plan.items() if k != "memory_ids"} | {"dry_run": True}
    return memory.purge(**scope) | {"dry_run": False}


VACUUM_NOTICE = ("purged: no query or reader can reach the text any more, but it stays in the "
                 "tables' free space until their owner VACUUMs them (only the owner may)")
VACUUM_HINT = ("the owner of memcli's tables runs `memcli doctor --fix` (its doctor shows "
               "this meanwhile), or any purge, or VACUUM; autovacuum gets there in time too")


def check_purged(out: dict[str, Any]) -> None:
    """A purge that deleted and committed, but could not rewrite the file (a reader's old
    snapshot, or a writer holding the lock, kept its WAL from being emptied): exit 75. A
    tenant role's purge (`"vacuum": "owner"`) is not retried: waiting does not give it the
    right to VACUUM; the caller says who must (`VACUUM_NOTICE`)."""
    if out.get("complete") is False and out.get("vacuum") != "owner":
        raise DatabaseBusyError(
            "purged, but another connection kept the file busy: purged text may remain in the "
            "file and its WAL until it finishes",
            "run the same purge again when readers are done; exit code 75")
