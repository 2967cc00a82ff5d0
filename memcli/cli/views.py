"""`memcli view export DIR` / `memcli view apply DIR`: what memcli believes, as files a person
edits (principle P6 of the Agent Memory System PRD). The library is memcli.views; `acb
show|edit` remain the way to read or edit identity and rules alone."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import DbOpt
from memcli.cli.output import emit, errors, resolve_format, warn

Tenant = Annotated[
    str | None, typer.Option("--tenant", help="Tenant id (default: the configured one).")
]
Dir = Annotated[Path, typer.Argument(help="The view's folder.", metavar="DIR",
                                     show_default=False)]
# `--format` names the files' format here, so the summary's JSON has only --json.
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="The summary as JSON (the default when stdout is not a terminal).")]


class ViewFormat(StrEnum):
    md = "md"
    yaml = "yaml"


def register(app: typer.Typer) -> None:
    view = typer.Typer(
        help="Edit what memcli believes: facts, preferences, decisions, tasks, procedures, "
        "identity and rules as markdown or yaml files.",
        no_args_is_help=True,
    )
    app.add_typer(view, name="view")

    @view.command("export")
    def export_cmd(
        directory: Dir,
        user: Annotated[str | None, typer.Option(
            "--user", help="Whose view (none: the items of no user).")] = None,
        tenant: Tenant = None,
        app_id: Annotated[str | None, typer.Option(
            "--app", help="The app's items (none: the items of no app).")] = None,
        file_format: Annotated[ViewFormat, typer.Option(
            "--format", "-f", help="md (default) or yaml files.")] = ViewFormat.md,
        include_high: Annotated[bool, typer.Option(
            "--include-high", help="Also `high` items, in plain text (needs the key).")] = False,
        force: Annotated[bool, typer.Option(
            "--force", help="Overwrite a view in DIR even if it has edits not applied.")
        ] = False,
        db: DbOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Write a user's facts, preferences, decisions, open tasks, procedures, identity and
        rules into DIR as files to edit (then `memcli view apply DIR`)."""
        from memcli.config import load_settings
        from memcli.views.export import Scope, export_view

        with errors():
            settings = load_settings(db)
            with open_memory(db, with_embedder=False, must_exist=True,
                             settings=settings) as memory:
                scope = Scope(tenant or memory.tenant, user, app_id, include_high)
                out = export_view(memory, directory, scope, file_format.value,
                                  settings.context_dir, force=force)
            for ref in out["left_out"]:
                warn(f"{ref} is left out of the view: its text cannot be one line of a file "
                     "(use memcli correct)")
            emit(out, resolve_format(None, as_json), _export_text)

    @view.command("apply")
    def apply_cmd(
        directory: Dir,
        dry_run: Annotated[bool, typer.Option(
            "--dry-run", help="Print the plan (JSON) and write nothing.")] = False,
        tenant: Tenant = None,
        db: DbOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Apply the edits made to DIR (written by `memcli view export`) as ordinary writes:
        edited items supersede the old ones, deleted ones are soft-deleted, new ones added."""
        from memcli.config import load_settings
        from memcli.views.apply import apply_plan, plan_apply
        from memcli.views.export import export_view

        with errors():
            settings = load_settings(db)
            with open_memory(db, with_embedder=not dry_run, must_exist=True,
                             settings=settings) as memory:
                plan = plan_apply(memory, directory, tenant=tenant,
                                  context_dir=settings.context_dir)
                if dry_run:
                    emit(plan.as_json(True), resolve_format(None, True))
                    return
                apply_plan(memory, plan, settings.context_dir)
                # The files now carry the new markers: applying again changes nothing.
                export_view(memory, directory, plan.scope, plan.fmt, settings.context_dir,
                            force=True)
            out = plan.as_json(False)
            if any(c.get("redacted") for c in out["changes"]):
                warn("redacted secrets before storing (the secret was not stored)")
            emit(out, resolve_format(None, as_json), _apply_text)


def _export_text(out: dict[str, Any]) -> None:
    counts = ", ".join(f"{n} {name}" for name, n in out["items"].items())
    print(f"wrote {out['dir']}: {counts}, identity.md, rules.md")


def _apply_text(out: dict[str, Any]) -> None:
    for c in out["changes"]:
        new = f" -> {c['new_id']}" if c.get("new_id") else ""
        print(f"{c['action']:<6} {c['file']}:{c['line']} {c['id'] or 'new'}{new}  {c['text']}")
    print(f"{len(out['changes'])} change(s), {out['unchanged']} unchanged")
