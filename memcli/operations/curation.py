"""The request models of the commands that look after a memory rather than read or write it
turn by turn: correcting a fact, an entity's profile, a memory's edges, export and import,
the editable views, rebuild and doctor. Each field is a CLI flag named for it (kebab case,
memcli.cli.options.request_options), with its description as the flag's help; the shared
scope keys come from memcli.operations.requests, declared there once.

Nothing here imports Typer, HTTP or the store: a model is data and its rules.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from memcli.core.ids import MAX_ID
from memcli.core.request_base import AppScope, Request, SessionScope, TenantScope, UserScope


class AllTenants(Request):
    all_tenants: bool = Field(
        default=False, description="Every tenant: an operator's full dump, or the rows of "
                                   "every tenant in the file (not with --tenant-id).")


class CorrectRequest(TenantScope):
    """`memcli correct ID TEXT`: the memory id and text are its arguments."""

    reason: str = Field(default="", description="Why it was wrong.")


class EntityRequest(UserScope, TenantScope):
    """`memcli entity NAME`: the name is its argument."""

    limit: int = Field(default=20, ge=1, le=MAX_ID, description="Memories shown.")


class RelatedRequest(TenantScope):
    """`memcli related ID`: a memory's edges."""

    kind: str | None = Field(
        default=None, description="Only edges of this kind (related, supersedes ...).")


class ExportRequest(AllTenants, SessionScope, AppScope, UserScope, TenantScope):
    """`memcli export`: the scope written, and where."""

    out: str | None = Field(default=None, description="Write to this file (default: stdout).")


class ImportRequest(AllTenants, AppScope, UserScope, TenantScope):
    """`memcli import PATH`: the file is its argument; `tenant_id` is the tenant the file's
    rows must be of. With `from_format`, PATH is another tool's chat export, loaded into
    the tenant, user and app given."""

    from_format: str | None = Field(
        default=None, description="PATH is another tool's history, not a memcli export: "
                                  "chatgpt, claude, claude-code, codex, mem0, basic-memory.")

    project: str | None = Field(
        default=None, description="With --from claude-code or codex: only this project's "
                                  "sessions (its folder's name or path). Each project's "
                                  "events go to the app of its name unless --app-id is given.")

    defer_embed: bool = Field(
        default=False, description="Load without vectors now; `memcli embed` adds them.")


class ViewExportRequest(AppScope, UserScope, TenantScope):
    """`memcli view export DIR`: whose items, in which files (none: the items of no user, of
    no app)."""

    file_format: Literal["md", "yaml"] = Field(default="md",
                                               description="md (default) or yaml files.")
    include_high: bool = Field(
        default=False, description="Also `high` items, in plain text (needs the key).")
    force: bool = Field(
        default=False, description="Overwrite a view in DIR even if it has edits not applied.")


class ViewApplyRequest(TenantScope):
    """`memcli view apply DIR`: the edits of DIR as ordinary writes."""

    dry_run: bool = Field(default=False, description="Print the plan (JSON) and write nothing.")


class RebuildRequest(Request):
    """`memcli rebuild`: every derived table again from the event log."""

    dry_run: bool = Field(default=False,
                          description="Print the plan and counts; write nothing.")


class DoctorRequest(Request):
    """`memcli doctor`: how thoroughly to check, and whether to repair first."""

    full: bool = Field(
        default=False, description="The thorough integrity check (SQLite: integrity_check, not "
                                   "quick_check; PostgreSQL: amcheck with heapallindexed).")
    fix: bool = Field(
        default=False, description="Rebuild the full-text indexes, delete derived rows without "
                                   "a memory, checkpoint the WAL (SQLite); then check.")
