"""`memcli pg grant-tenant / revoke-tenant / tenants`: PostgreSQL login roles bound to one
tenant (row-level security). Run by the owner of memcli's tables; the roles are the DBA's."""

from __future__ import annotations

from typing import Annotated

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import DbOpt, FormatOpt, JsonOpt
from memcli.cli.output import emit, errors, resolve_format


def grant_cmd(role: Annotated[str, typer.Argument(help="An existing login role.")],
              tenant: Annotated[str, typer.Argument(help="The tenant it may read and write.")],
              db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False) -> None:
    """Bind login ROLE to TENANT: row-level security then shows and lets it write only
    that tenant's rows, even through raw SQL. Run it as the owner of memcli's tables;
    again after an upgrade renews the rights."""
    from memcli.store.postgres.tenant_roles import grant_tenant

    with errors(), open_memory(db, with_embedder=False) as memory:
        out = grant_tenant(memory, role, tenant)
    emit(out, resolve_format(fmt, as_json),
         lambda r: print(f"role {r['role']} bound to tenant {r['tenant_id']}"))


def revoke_cmd(role: Annotated[str, typer.Argument(help="A bound login role.")],
               db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False) -> None:
    """Unbind ROLE and revoke its rights on memcli's tables (the role itself stays)."""
    from memcli.store.postgres.tenant_roles import revoke_tenant

    with errors(), open_memory(db, with_embedder=False) as memory:
        out = revoke_tenant(memory, role)
    emit(out, resolve_format(fmt, as_json),
         lambda r: print(f"role {r['role']} unbound from tenant {r['tenant_id']}"))


def tenants_cmd(db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False) -> None:
    """The bound login roles and their tenants."""
    from memcli.store.postgres.tenant_roles import tenant_roles

    with errors(), open_memory(db, with_embedder=False) as memory:
        out = tenant_roles(memory)
    emit(out, resolve_format(fmt, as_json), _roles_text)


def register(app: typer.Typer) -> None:
    pg = typer.Typer(name="pg", no_args_is_help=True,
                     help="PostgreSQL only: login roles bound to one tenant.")
    app.add_typer(pg, name="pg")
    pg.command("grant-tenant")(grant_cmd)
    pg.command("revoke-tenant")(revoke_cmd)
    pg.command("tenants")(tenants_cmd)


def _roles_text(rows: list[dict]) -> None:
    for row in rows:
        print(f"{row['role']}\t{row['tenant_id']}")
