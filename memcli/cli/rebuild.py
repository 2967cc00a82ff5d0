"""`memcli rebuild`: every derived table again from the event log
(memcli/lifecycle/rebuild_derived.py)."""

from __future__ import annotations

from typing import Any

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import DbOpt, FormatOpt, Given, JsonOpt, request_options
from memcli.cli.output import emit, errors, resolve_format, warn
from memcli.cli.progress_bar import progress_bar
from memcli.errors import StorageError
from memcli.operations.curation import RebuildRequest


def _text(r: dict[str, Any]) -> None:
    ep = r["episodes"]
    verb = "would rebuild" if r["dry_run"] else "rebuilt"
    print(f"{verb} from {r['events']} events: {ep['expected']} episodes ({ep['present']} "
          f"present, {ep['rewritten']} rewritten, {ep['restored']} restored with their ids, "
          f"{ep['new']} new); stages: {', '.join(r['stages'])}")


@request_options(RebuildRequest)
def rebuild_cmd(given: Given, db: DbOpt = None, fmt: FormatOpt = None,
                as_json: JsonOpt = False) -> None:
    """Regenerate every derived table (episodes, full-text, trigram, sparse, vectors,
    entities) from the event log; keeps what exists only as derived data."""
    from memcli.lifecycle.rebuild_derived import rebuild

    with errors():
        req = given.request("rebuild request")
        # A dry run opens without checking the models: that check creates a missing vec0
        # table, and a dry run writes nothing.
        with open_memory(db, must_exist=True, check_embedder=not req.dry_run) as memory:
            if memory.db.read_only:
                raise StorageError(f"database is read-only: {memory.db.path}",
                                   "a rebuild writes: check the file's permissions")
            with progress_bar() as progress:
                out = rebuild(memory, dry_run=req.dry_run, progress=progress)
            emit(out, resolve_format(fmt, as_json), _text)
            for item in out["skipped"]:
                warn(f"skipped {item['stage']}: {item['why']}")
            for item in out["cannot_rebuild"]:
                count = item.get("count", len(item.get("ids", [])))
                warn(f"cannot rebuild: {item['what']} ({count}): {item['why']}")


def register(app: typer.Typer) -> None:
    app.command("rebuild")(rebuild_cmd)
