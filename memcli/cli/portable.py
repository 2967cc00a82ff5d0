"""`memcli export` and `memcli import`: move a memory to another file (or, later, backend).
Their options are the fields of their request models (memcli.operations.curation)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import DbOpt, FormatOpt, Given, JsonOpt, request_options
from memcli.cli.output import emit, errors, read_stdin, resolve_format, warn
from memcli.cli.progress_bar import progress_bar
from memcli.core import private
from memcli.errors import UsageError
from memcli.operations.curation import ExportRequest, ImportRequest


def _import_text(report: dict) -> None:
    print(f"added {report['added']}, skipped {report['skipped']} (already present)")
    for kind, counts in report["counts"].items():
        if counts["added"] or counts["skipped"]:
            print(f"  {kind:<14} added {counts['added']:>6}  skipped {counts['skipped']:>6}")


@request_options(ExportRequest, short={"out": "-o"})
def export_cmd(given: Given, db: DbOpt = None, fmt: FormatOpt = None,
               as_json: JsonOpt = False) -> None:
    """Write a memory as JSONL: a header line, then events, memories with their history,
    decisions, tasks, checkpoints, relations, proposals, artifacts, sessions. Derived
    indexes (vectors, full-text, entities) are left out: `memcli import` recomputes them."""
    from memcli.portable.exporter import Scope, export

    with errors():
        req = given.request("export request")
        if req.all_tenants and req.tenant_id is not None:
            raise UsageError("--all-tenants and --tenant-id exclude each other", "give one of them")
        with open_memory(db, with_embedder=False, must_exist=True) as memory:
            scope = Scope(None if req.all_tenants else (req.tenant_id or memory.tenant),
                          user_id=req.user_id, app_id=req.app_id, session_id=req.session_id)
            if req.out is None:
                with progress_bar() as progress:  # on stderr, and only on a terminal
                    export(memory.db, scope, sys.stdout, progress=progress)
                return
            out = Path(req.out)
            partial = out.with_name(out.name + ".partial")
            # Written beside the target and renamed when complete: an interrupted export
            # never leaves a file that looks whole.
            try:
                with (private.open_private(partial, newline="\n") as handle,
                      progress_bar() as progress):
                    counts = export(memory.db, scope, handle, progress=progress)
                partial.replace(out)
            finally:
                partial.unlink(missing_ok=True)
        emit({"out": str(out), "counts": counts}, resolve_format(fmt, as_json),
             lambda p: print(f"wrote {sum(p['counts'].values())} records to {p['out']}"))


def _chat_import(req: Any, path: str | None, db: str | None, settings: Any) -> dict:
    """`--from FORMAT`: another tool's history, its turns written as events."""
    from memcli.importers.load import load, open_source

    if req.all_tenants:
        raise UsageError("--all-tenants does not apply to --from", "give --tenant-id or none")
    scope = {"tenant_id": req.tenant_id or settings.tenant, "user_id": req.user_id,
             "app_id": req.app_id}
    # the whole input is checked first: a bad file is refused before the database opens
    with open_source(req.from_format, path, sys.stdin.buffer.read, req.project) as source, \
            open_memory(db, with_embedder=not req.defer_embed, settings=settings) as memory, \
            progress_bar() as progress:
        report = load(memory, source, scope, defer_embed=req.defer_embed, progress=progress)
    for note in report["notes"]:
        warn(note)
    return report


def _check_header(path: Path) -> None:
    """The file's first line, read alone (at most 1 MiB), is a memcli export header; else a
    one-line FormatError (exit 2) before the rest is read."""
    from memcli.portable.file_format import parse_header

    with open(path, "rb") as handle:
        first = handle.readline(HEADER_BYTES + 1)
    if len(first) > HEADER_BYTES:
        from memcli.portable.file_format import FormatError

        raise FormatError(1, "not a memcli export header (the first line is longer than 1 MiB)")
    if first.strip():  # an empty file: parse() says so
        parse_header(first.decode("utf-8-sig", errors="replace"))


HEADER_BYTES = 1 << 20


@request_options(ImportRequest, short={"from_format": "--from"})
def import_cmd(
    path: Annotated[str | None, typer.Argument(
        help="An export file or folder; `-` reads stdin. With --from claude-code or codex, "
             "left out: where that tool keeps its sessions.")] = None,
    *,
    given: Given,
    db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Load an export into this database (new or not). Importing twice adds nothing;
    a bad line, or a row of another tenant without --all-tenants, refuses the whole file
    (exit 2, nothing loaded). With --from FORMAT, PATH is another tool's history (a
    ChatGPT or Claude conversations.json, Claude Code or Codex transcripts, a mem0 export, a
    basic-memory folder): each kept turn becomes an event of its conversation's session."""
    from memcli.config import load_settings
    from memcli.portable.file_format import parse
    from memcli.portable.importer import check_tenants, load_parsed

    with errors():
        settings = load_settings(db)  # a bad location or config first, as every command
        req = given.request("import request")
        if req.from_format is not None:
            emit(_chat_import(req, path, db, settings), resolve_format(fmt, as_json),
                 _import_text)
            return

        if req.user_id is not None or req.app_id is not None or req.project is not None:
            raise UsageError("--user-id, --app-id and --project apply only with --from",
                             "a memcli export keeps its rows' own scope")
        if path is None:
            raise UsageError("missing PATH", "give a memcli export file or `-`")
        if path == "-":
            text = read_stdin()
        else:
            try:
                _check_header(Path(path))  # junk or an endless input: refused at once
                text = Path(path).read_bytes().decode("utf-8", errors="surrogateescape")
            except OSError as exc:
                raise UsageError(f"cannot read {path}: {exc.strerror}",
                                 "give an export file or `-`") from None
        with progress_bar() as progress:  # a bad file: refused before the database opens
            head, records = parse(text, progress)
        if not req.all_tenants:
            check_tenants(records, req.tenant_id or settings.tenant)
        with (open_memory(db, with_embedder=not req.defer_embed, settings=settings) as memory,
              progress_bar() as progress):
            report = load_parsed(memory, head, records, tenant_id=req.tenant_id,
                                 all_tenants=req.all_tenants, defer_embed=req.defer_embed,
                                 progress=progress)
        for note in report["notes"]:
            warn(note)
        emit(report, resolve_format(fmt, as_json), _import_text)


def register(app: typer.Typer) -> None:
    app.command("export")(export_cmd)
    app.command("import")(import_cmd)
