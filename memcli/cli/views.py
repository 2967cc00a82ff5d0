"""`memcli view export DIR` / `memcli view apply DIR`: what memcli believes, as files a person
edits (principle P6 of the Agent Memory System PRD). The library is memcli.editable_views; `acb
show|edit` remain the way to read or edit identity and rules alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import DbOpt, Given, request_options
from memcli.cli.output import emit, errors, resolve_format, warn
from memcli.operations.curation import ViewApplyRequest, ViewExportRequest

Dir = Annotated[Path, typer.Argument(help="The view's folder.", metavar="DIR",
                                     show_default=False)]
# `--format` names the files' format here, so the summary's JSON has only --json.
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="The summary as JSON (the default when stdout is not a terminal).")]


@request_options(ViewExportRequest, short={"file_format": "-f"},
                 legacy={"file_format": "--format"},
                 help={"user_id": "Whose view (none: the items of no user).",
                       "app_id": "The app's items (none: the items of no app)."})
def export_cmd(directory: Dir, given: Given, db: DbOpt = None,
               as_json: JsonOpt = False) -> None:
    """Write a user's facts, preferences, decisions, open tasks, procedures, identity and
    rules into DIR as files to edit (then `memcli view apply DIR`)."""
    from memcli.config import load_settings
    from memcli.editable_views.export import Scope, export_view

    with errors():
        settings = load_settings(db)
        req = given.request("view request")
        with open_memory(db, with_embedder=False, must_exist=True, settings=settings) as memory:
            scope = Scope(req.tenant_id or memory.tenant, req.user_id, req.app_id,
                          req.include_high)
            out = export_view(memory, directory, scope, req.file_format, settings.context_dir,
                              force=req.force)
        for ref in out["left_out"]:
            warn(f"{ref} is left out of the view: its text cannot be one line of a file "
                 "(use memcli correct)")
        emit(out, resolve_format(None, as_json), _export_text)


@request_options(ViewApplyRequest)
def apply_cmd(directory: Dir, given: Given, db: DbOpt = None,
              as_json: JsonOpt = False) -> None:
    """Apply the edits made to DIR (written by `memcli view export`) as ordinary writes:
    edited items supersede the old ones, deleted ones are soft-deleted, new ones added."""
    from memcli.config import load_settings
    from memcli.editable_views.apply import apply_plan, plan_apply
    from memcli.editable_views.export import export_view

    with errors():
        settings = load_settings(db)
        req = given.request("view request")
        with open_memory(db, with_embedder=not req.dry_run, must_exist=True,
                         settings=settings) as memory:
            plan = plan_apply(memory, directory, tenant=req.tenant_id,
                              context_dir=settings.context_dir)
            if req.dry_run:
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


def register(app: typer.Typer) -> None:
    view = typer.Typer(
        help="Edit what memcli believes: facts, preferences, decisions, tasks, procedures, "
        "identity and rules as markdown or yaml files.",
        no_args_is_help=True,
    )
    app.add_typer(view, name="view")
    view.command("export")(export_cmd)
    view.command("apply")(apply_cmd)


def _export_text(out: dict[str, Any]) -> None:
    counts = ", ".join(f"{n} {name}" for name, n in out["items"].items())
    print(f"wrote {out['dir']}: {counts}, identity.md, rules.md")


def _apply_text(out: dict[str, Any]) -> None:
    for c in out["changes"]:
        new = f" -> {c['new_id']}" if c.get("new_id") else ""
        print(f"{c['action']:<6} {c['file']}:{c['line']} {c['id'] or 'new'}{new}  {c['text']}")
    print(f"{len(out['changes'])} change(s), {out['unchanged']} unchanged")
