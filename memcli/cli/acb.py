"""`memcli acb build|show|edit` (context bundles) and `memcli related` (relation edges)."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import (
    DbOpt,
    Given,
    JsonOpt,
    MemoryIdArg,
    check_flags,
    request_options,
)
from memcli.cli.output import (
    Format,
    emit,
    errors,
    json_object,
    read_stdin,
    resolve_format,
    warn,
)
from memcli.core import private
from memcli.operations.curation import RelatedRequest
from memcli.operations.requests import AcbRequest


class BundleFormat(StrEnum):
    json = "json"
    jsonl = "jsonl"
    text = "text"
    markdown = "markdown"


class View(StrEnum):
    identity = "identity"
    rules = "rules"


BundleFormatOpt = Annotated[
    BundleFormat | None,
    typer.Option(
        "--format",
        "-f",
        help="json, jsonl, or the prompt block (markdown; text is the same). "
        "Default: markdown on a terminal, else json.",
    ),
]
FormatOpt = Annotated[
    Format | None,
    typer.Option("--format", "-f", help="Output format (default: text on a terminal, else json)."),
]


@request_options(AcbRequest, skip=("caps", "since"),
                 short={"query": "-q"},
                 legacy={"query": "--query-text", "budget_tokens": "--max-tokens",
                         "agent_id": "--agent", "include_checkpoint": "--checkpoint"})
def build_cmd(
    request: Annotated[
        str | None,
        typer.Argument(
            help="A JSON request file, or `-` for stdin; flags override its fields.",
            show_default=False,
        ),
    ] = None,
    *,
    given: Given,
    cap: Annotated[
        list[str] | None,
        typer.Option("--cap", help="Override a section cap: SECTION=TOKENS (repeatable)."),
    ] = None,
    since: Annotated[
        int | None,
        typer.Option("--since", help="Delta header base revision (default: the last one you saw)."),
    ] = None,
    db: DbOpt = None,
    fmt: BundleFormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build a context bundle for the next model call (JSON, or a markdown prompt block)."""
    from memcli.config import load_settings
    from memcli.errors import UsageError
    from memcli.operations.bundle import acb_payload
    from memcli.operations.requests import AcbRequest, parse_acb_request

    with errors():
        check_flags({**given, "cap": cap})
        data = AcbRequest.spelled(read_request(request))
        data.update(given)
        if since is not None:
            data["since"] = since
        if cap:
            caps = data.get("caps") or {}
            if not isinstance(caps, dict):
                raise UsageError("bad acb request: caps must be an object of SECTION: TOKENS")
            data["caps"] = {**caps, **parse_caps(cap)}
        req = parse_acb_request(data)
        if note := req.truncation():
            warn(note)
        settings = load_settings(db)
        with open_memory(db, with_embedder=bool(req.query),
                         preload=bool(req.query), settings=settings,
                         must_exist=True) as memory:
            bundle = acb_payload(memory, req, settings=settings)
        rerank = (bundle.get("provenance") or {}).get("rerank") or {}
        if rerank.get("skipped"):
            warn(f"rerank skipped: {rerank['skipped']} (the fused order stands)")
        chosen = "json" if as_json else (str(fmt) if fmt is not None else None)
        if chosen is None:
            chosen = "markdown" if sys.stdout.isatty() else "json"
        if chosen in ("markdown", "text"):
            from memcli.acb.render import render_markdown

            sys.stdout.write(render_markdown(bundle))
        else:
            emit(bundle, Format(chosen))


def parse_caps(values: list[str]) -> dict[str, int]:
    """`--cap SECTION=TOKENS` values as a dict."""
    from memcli.errors import UsageError

    caps: dict[str, int] = {}
    for value in values:
        name, _, number = value.partition("=")
        if not number.strip().isdigit():
            raise UsageError(f"bad --cap {value!r}", "write --cap SECTION=TOKENS")
        caps[name.strip()] = int(number)
    return caps


def read_request(source: str | None) -> dict[str, Any]:
    """The JSON request object from stdin (`-`) or a file, or {}."""
    from memcli.errors import UsageError

    if source is None:
        return {}
    try:
        text = read_stdin() if source == "-" else Path(source).read_bytes().decode(
            "utf-8", errors="surrogateescape")
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror}") from exc
    return json_object(text, "the acb request")


@request_options(RelatedRequest)
def related_cmd(
    memory_id: MemoryIdArg,
    given: Given,
    db: DbOpt = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List a memory's edges (related memories, supersessions), strongest first."""
    from memcli.store import owner
    from memcli.store.acb_sql import edges_with_memories

    with errors():
        req = given.request("related request")
        with open_memory(db, with_embedder=False, must_exist=True) as memory:
            tenant = req.tenant_id or memory.tenant
            owner.memory(memory.db, memory_id, memory.owner(tenant))  # another tenant's: not found
            rows = [r for r in edges_with_memories(memory.db, memory_id, tenant)
                    if req.kind is None or r["kind"] == req.kind]
        emit(rows, resolve_format(fmt, as_json), _related_text)


def show_cmd(
    view: Annotated[View, typer.Argument(help="identity or rules")],
    db: DbOpt = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the identity or rules text bundles use (your copy, else the default)."""
    from memcli.acb.sections import load_view
    from memcli.config import load_settings

    with errors():
        settings = load_settings(db)
        text, source = load_view(view.value, settings.context_dir)
        resolved = resolve_format(fmt, as_json)
        if resolved is Format.text:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        else:
            emit({"view": view.value, "source": source, "text": text}, resolved)


def edit_cmd(
    view: Annotated[View, typer.Argument(help="identity or rules")],
    no_editor: Annotated[
        bool,
        typer.Option(
            "--no-editor", help="Only create your copy (from the default) and print its path."
        ),
    ] = False,
    db: DbOpt = None,
) -> None:
    """Edit the identity or rules file in $VISUAL / $EDITOR (copied from the default)."""
    import shlex
    import subprocess

    from memcli.acb.sections import bundled_view, view_path
    from memcli.config import editor_command, load_settings
    from memcli.errors import MemcliError

    with errors():
        settings = load_settings(db)
        assert settings.context_dir is not None  # load_settings always sets it
        path = view_path(view.value, settings.context_dir)
        if path is None:
            path = settings.context_dir / f"{view.value}.md"
            private.make_dirs(path.parent)
            private.write_text(path, bundled_view(view.value))
            print(f"memcli: created {path} from the default", file=sys.stderr)
        if not no_editor:
            status = subprocess.call([*shlex.split(editor_command()), str(path)])
            if status != 0:
                raise MemcliError(f"the editor exited with status {status}")
        print(path)


def register(app: typer.Typer) -> None:
    acb = typer.Typer(
        help="Context bundles: what an agent sends its model, under a budget.", no_args_is_help=True
    )
    app.add_typer(acb, name="acb")
    acb.command("build")(build_cmd)
    acb.command("show")(show_cmd)
    acb.command("edit")(edit_cmd)
    app.command("related")(related_cmd)


def _related_text(rows: list[dict[str, Any]]) -> None:
    from memcli.acb.render import short

    for r in rows:
        arrow = "->" if r["direction"] == "out" else "<-"
        print(
            f"{r['kind']:<11} {r['strength']:.3f} {arrow} #{r['other_id']} "
            f"[{r['other_category'] or r['other_kind']}, {r['other_state']}] "
            f"{short(r['other_text'], 80)}"
        )
