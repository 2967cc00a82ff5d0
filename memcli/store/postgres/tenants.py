"""Tenant-bound login roles on PostgreSQL (schema 3, v3_tenancy.sql): which tenant a session is
bound to, and binding or unbinding a role (`memcli pg grant-tenant / revoke-tenant`).

A bound role's rights: the memcli schema's tables (SELECT, INSERT, UPDATE, DELETE: never
TRUNCATE, which row-level security does not filter), nothing on `tenant_roles` (a role must
not rebind itself). The same rights go to tables a later migration creates (default
privileges of the role that binds, the owner). Roles themselves, and their passwords, are the
DBA's: memcli binds an existing login role.

The shared tables (no tenant in them; v3_tenancy.sql part 4):
- `lexeme_df`, `lexical_stats`: SELECT only. The triggers that keep them run as the owner,
  so a role's writes count and a role cannot set another tenant's BM25 statistics.
- sequences: USAGE (nextval) only. setval would let a role move them back, and the next
  insert of any tenant would collide; the identity trigger moves them as the owner.
- `meta`: all four rights, narrowed by its policies to the first-use keys, decay's last run
  and purge's transient guard row.
- `sparse_df` (SPLADE's document counts per term): SELECT only since schema 4. The
  statement triggers on `memory_sparse` keep it, as the owner (v4_sparse_df.sql): a role
  that could write it would push a term's count past `max_df` and prune that term from
  every tenant's sparse leg.
- `pair_checks`: a cache of model verdicts keyed by a hash of both texts (and their
  similarity): a role can only reach a pair whose two texts it knows, and tenants with the
  same texts share the answer on purpose.
- `run_locks`: display only on PostgreSQL (the advisory lock decides who runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from memcli.store.postgres.connection import PgDatabase

_TABLE_RIGHTS = "SELECT, INSERT, UPDATE, DELETE"
_SEQUENCE_RIGHTS = "USAGE"
_READ_ONLY = ("lexeme_df", "lexical_stats", "sparse_df")  # kept by the owner's triggers


def bound_tenant(db: PgDatabase) -> str | None:
    """The tenant this session's login role is bound to (None: not bound; the owner, an
    admin, or a database before schema 3)."""
    if not db.scalar("SELECT to_regprocedure('memcli_tenant()') IS NOT NULL"):
        return None
    return db.scalar("SELECT memcli_tenant()")


def table_owner(db: PgDatabase) -> str:
    return db.scalar("SELECT tableowner FROM pg_tables WHERE schemaname = current_schema()"
                     " AND tablename = 'meta'")


def may_migrate(db: PgDatabase) -> bool:
    """Whether this session can change memcli's tables (it is, or acts as, their owner)."""
    return bool(db.scalar("SELECT pg_has_role(current_user, tableowner, 'USAGE')"
                          " FROM pg_tables WHERE schemaname = current_schema()"
                          " AND tablename = 'meta'"))


def _role(db: PgDatabase, role: str) -> dict[str, Any]:
    rows = db.query("SELECT rolname, rolsuper, rolbypassrls, rolcanlogin FROM pg_roles"
                    " WHERE rolname = ?", (role,))
    if not rows:
        raise NotFoundError(f"no role {role!r} on this server",
                            f"a DBA creates it first: CREATE ROLE \"{role}\" LOGIN PASSWORD "
                            "'...'")
    return rows[0]


def _check_binder(db: PgDatabase) -> str:
    owner = table_owner(db)
    if not may_migrate(db):
        raise UsageError(f"only the owner of memcli's tables ({owner}) or a superuser can "
                         "bind tenant roles", f"run it as {owner} (--db with that user)")
    return owner


def grant(db: PgDatabase, role: str, tenant: str) -> dict[str, Any]:
    """Bind login role `role` to `tenant` and give it the rights memcli needs. Running it
    again for the same pair renews the rights (after an upgrade, say)."""
    owner = _check_binder(db)
    info = _role(db, role)
    if info["rolsuper"] or info["rolbypassrls"] or role == owner:
        why = ("a superuser" if info["rolsuper"] else "BYPASSRLS" if info["rolbypassrls"]
               else "the owner of memcli's tables")
        raise UsageError(f"role {role!r} is {why}: row-level security does not bind it",
                         "bind a plain login role (CREATE ROLE ... LOGIN)")
    from psycopg import sql  # noqa: PLC0415 - tenant_roles reaches here without psycopg

    ident = sql.Identifier(role)
    with db.transaction():
        current = db.scalar("SELECT tenant_id FROM tenant_roles WHERE role = ?", (role,))
        if current is not None and current != tenant:
            raise UsageError(f"role {role!r} is bound to tenant {current!r}",
                             f"run `memcli pg revoke-tenant {role}` first")
        db.execute("INSERT INTO tenant_roles (role, tenant_id) VALUES (?, ?)"
                   " ON CONFLICT (role) DO NOTHING", (role, tenant))
        schema = sql.Identifier(db.scalar("SELECT current_schema()"))
        for statement in (
                "GRANT USAGE ON SCHEMA {s} TO {r}",
                f"GRANT {_TABLE_RIGHTS} ON ALL TABLES IN SCHEMA {{s}} TO {{r}}",
                # Renewing a binding made with wider rights takes the extra ones back.
                "REVOKE SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {s} FROM {r}",
                f"GRANT {_SEQUENCE_RIGHTS} ON ALL SEQUENCES IN SCHEMA {{s}} TO {{r}}",
                "REVOKE ALL ON {s}.tenant_roles FROM {r}",
                *(f"REVOKE INSERT, UPDATE, DELETE ON {{s}}.{t} FROM {{r}}"
                  for t in _READ_ONLY),
                f"ALTER DEFAULT PRIVILEGES IN SCHEMA {{s}} GRANT {_TABLE_RIGHTS} ON TABLES"
                " TO {r}",
                "ALTER DEFAULT PRIVILEGES IN SCHEMA {s} REVOKE SELECT, UPDATE ON SEQUENCES"
                " FROM {r}",
                f"ALTER DEFAULT PRIVILEGES IN SCHEMA {{s}} GRANT {_SEQUENCE_RIGHTS} ON"
                " SEQUENCES TO {r}"):
            db.conn.execute(sql.SQL(statement).format(s=schema, r=ident))
    return {"role": role, "tenant_id": tenant, "granted": True,
            "already": current is not None, "can_login": bool(info["rolcanlogin"])}


def revoke(db: PgDatabase, role: str) -> dict[str, Any]:
    """Unbind `role` and take memcli's rights back (the role itself stays: DROP ROLE is the
    DBA's)."""
    _check_binder(db)
    from psycopg import sql  # noqa: PLC0415 - tenant_roles reaches here without psycopg

    with db.transaction():
        tenant = db.scalar("DELETE FROM tenant_roles WHERE role = ? RETURNING tenant_id",
                           (role,))
        if tenant is None:
            raise NotFoundError(f"role {role!r} is not bound to a tenant",
                                "`memcli pg tenants` lists the bound roles")
        schema = sql.Identifier(db.scalar("SELECT current_schema()"))
        ident = sql.Identifier(role)
        for statement in (
                "ALTER DEFAULT PRIVILEGES IN SCHEMA {s} REVOKE ALL ON TABLES FROM {r}",
                "ALTER DEFAULT PRIVILEGES IN SCHEMA {s} REVOKE ALL ON SEQUENCES FROM {r}",
                "REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM {r}",
                "REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM {r}",
                "REVOKE USAGE ON SCHEMA {s} FROM {r}"):
            db.conn.execute(sql.SQL(statement).format(s=schema, r=ident))
    return {"role": role, "tenant_id": tenant, "revoked": True}


def bound_roles(db: PgDatabase) -> list[dict[str, Any]]:
    """Every bound role and its tenant, by role."""
    return db.query("SELECT role, tenant_id FROM tenant_roles ORDER BY role")
