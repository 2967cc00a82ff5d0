"""Tenant-bound login roles (PostgreSQL only): `memcli pg grant-tenant / revoke-tenant /
tenants`. A bound role sees and writes only its tenant's rows, enforced by the server's
row-level security (memcli/store/postgres/v3_tenancy.sql), whatever SQL its client runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.errors import UsageError
from memcli.store.postgres import tenants

if TYPE_CHECKING:
    from memcli.store.handle import MemoryHandle


def _postgres(memory: MemoryHandle):
    if memory.db.backend.name != "postgresql":
        raise UsageError("tenant roles are a PostgreSQL feature; this is a SQLite file",
                         "give --db postgresql://... (a file has no login roles: one file per "
                         "tenant isolates by file permissions)")

    return tenants


def refuse_bound(db: Any, command: str) -> None:
    """`command` reads or rewrites every tenant's derived data (doctor, rebuild, reindex, key
    rotate): a tenant role sees one tenant, so its counts would be wrong and its rewrites
    would corrupt the shared statistics. Exit 2 before anything runs."""
    if db.bound_tenant is not None:
        raise UsageError(f"`memcli {command}` checks or rewrites every tenant's data; this "
                         f"login role is bound to tenant {db.bound_tenant!r}",
                         "run it as the owner of memcli's tables")


def grant_tenant(memory: MemoryHandle, role: str, tenant: str) -> dict[str, Any]:
    if not role or not tenant:
        raise UsageError("a role and a tenant are needed", "memcli pg grant-tenant ROLE TENANT")
    return _postgres(memory).grant(memory.db, role, tenant)


def revoke_tenant(memory: MemoryHandle, role: str) -> dict[str, Any]:
    return _postgres(memory).revoke(memory.db, role)


def tenant_roles(memory: MemoryHandle) -> list[dict[str, Any]]:
    tenants = _postgres(memory)
    if memory.db.bound_tenant is not None:
        raise UsageError("a tenant role cannot list the bound roles",
                         "run it as the owner of memcli's tables")
    return tenants.bound_roles(memory.db)
