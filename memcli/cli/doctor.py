"""`memcli doctor`: checks the memory file and says, in plain words, what to run (see
memcli/health/checks.py). Exit 0 healthy, 1 problems found, 2 usage (e.g. no database at the
path)."""

from __future__ import annotations

from typing import Any

import typer

from memcli.cli.options import DbOpt, FormatOpt, Given, JsonOpt, request_options
from memcli.cli.output import emit, errors, resolve_format
from memcli.errors import MemcliError, SchemaError
from memcli.operations.curation import DoctorRequest

_MARK = {"ok": ("ok", "green"), "info": ("info", "cyan"), "problem": ("PROBLEM", "bold red")}


def _text(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    console.print(f"memcli doctor: {escape(report['db'])}")
    if report.get("fixed"):
        fixed = report["fixed"]
        console.print(f"  fixed: rebuilt {', '.join(fixed['rebuilt'])}; deleted orphans "
                      f"{fixed['orphans_deleted'] or 'none'}")
    for c in report["checks"]:
        word, style = _MARK[c["status"]]
        console.print(f"  [{style}]{word:<8}[/] {escape(c['check']):<26} {escape(c['detail'])}")
        if c["fix"]:
            console.print(f"  {'':<8} {'':<26} run: [bold]{escape(c['fix'])}[/]")
    verdict = ("[green]healthy[/]" if report["healthy"]
               else f"[bold red]{report['problems']} problem(s) found[/]")
    console.print(f"verdict: {verdict}")


@request_options(DoctorRequest)
def doctor_cmd(given: Given, db: DbOpt = None, fmt: FormatOpt = None,
               as_json: JsonOpt = False) -> None:
    """Check integrity, schema, models, indexes vs memories, WAL (PostgreSQL: long open
    transactions) and the request metrics' upgrade triggers; say what to run for each
    problem (exit 1 when there is one)."""
    from memcli.config import load_settings
    from memcli.health import checks
    from memcli.operations.memory import make_embedder, make_sparse
    from memcli.store.opener import open_database

    with errors():
        settings = load_settings(db)
        req = given.request("doctor request")
        full, fix = req.full, req.fix
        embedder, model_problem = None, None
        try:
            embedder = make_embedder(settings)
        except MemcliError as exc:
            model_problem = checks.check("embedder", "problem",
                                         f"the configured embedder is unusable: {exc}",
                                         "fix the embedder settings (MEMCLI_EMBEDDER ...)")
        sparse = make_sparse(settings)
        fixed = None
        try:
            # A read command: never creates a database (a missing one is NoDatabaseError).
            database = open_database(settings.db, readonly=not fix, must_exist=True)
        except SchemaError as exc:  # another program's file, left untouched: one problem
            report = checks.unusable(settings.db, exc)
        else:
            try:
                fixed = checks.repair(database) if fix else None
                report = checks.diagnose(database, embedder=embedder, full=full,
                                         sparse_model=sparse.model_id if sparse else None)
            finally:
                database.close()
        if model_problem is not None:
            report["checks"] = [c for c in report["checks"] if c["check"] != "embedder"]
            report["checks"].insert(2, model_problem)
            report["problems"] += 1
            report["healthy"] = False
        if fixed is not None:
            report["fixed"] = fixed
        emit(report, resolve_format(fmt, as_json), _text)
    if not report["healthy"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_cmd)
