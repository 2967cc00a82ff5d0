"""`memcli acb build|show|edit` (context bundles) and `memcli related` (relation edges)."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from memcli.cli.common import open_memory
from memcli.cli.output import DbOpt, Format, JsonOpt, emit, errors, resolve_format


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


def _parse_caps(values: list[str]) -> dict[str, int]:
    from memcli.errors import UsageError

    caps: dict[str, int] = {}
    for value in values:
        name, _, number = value.partition("=")
        if not number.strip().isdigit():
            raise UsageError(f"bad --cap {value!r}", "write --cap SECTION=TOKENS")
        caps[name.strip()] = int(number)
    return caps


def _read_request(source: str | None) -> dict[str, Any]:
    """The JSON request object from stdin (`-`) or a file, or {}."""
    import json

    from memcli.errors import UsageError

    if source is None:
        return {}
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise UsageError(f"the acb request is not JSON: {exc.msg} at line {exc.lineno}") from exc
    if not isinstance(data, dict):
        raise UsageError("the acb request must be one JSON object")
    return data


def register(app: typer.Typer) -> None:
    acb = typer.Typer(
        help="Context bundles: what an agent sends its model, under a budget.", no_args_is_help=True
    )
    app.add_typer(acb, name="acb")

    @acb.command("build")
    def build_cmd(
        request: Annotated[
            str | None,
            typer.Argument(
                help="A JSON request file, or `-` for stdin; flags override its fields.",
                show_default=False,
            ),
        ] = None,
        query: Annotated[
            str | None,
            typer.Option(
                "--query", "-q", help="What the next turn is about (retrieval runs only with it)."
            ),
        ] = None,
        tenant: Annotated[str | None, typer.Option("--tenant")] = None,
        user: Annotated[str | None, typer.Option("--user")] = None,
        session: Annotated[str | None, typer.Option("--session")] = None,
        agent: Annotated[
            str | None,
            typer.Option("--agent", help="The asking agent: its category allowlist applies."),
        ] = None,
        channel: Annotated[
            str | None,
            typer.Option(
                "--channel",
                help="private (default), team, public or agent: decides which sensitivities load.",
            ),
        ] = None,
        intent: Annotated[str | None, typer.Option("--intent")] = None,
        max_tokens: Annotated[
            int | None,
            typer.Option(
                "--max-tokens", min=1, help="Token budget of the whole bundle (default 65000)."
            ),
        ] = None,
        cap: Annotated[
            list[str] | None,
            typer.Option("--cap", help="Override a section cap: SECTION=TOKENS (repeatable)."),
        ] = None,
        category: Annotated[
            list[str] | None,
            typer.Option("--category", help="Only these categories as retrieved evidence."),
        ] = None,
        app_id: Annotated[
            str | None,
            typer.Option(
                "--app", help="App mode: the app's memories in a fixed block, no other app's."
            ),
        ] = None,
        since: Annotated[
            int | None,
            typer.Option(
                "--since", help="Delta header base revision (default: the last one you saw)."
            ),
        ] = None,
        no_track: Annotated[
            bool, typer.Option("--no-track", help="Do not remember this revision as seen.")
        ] = False,
        handoff: Annotated[
            list[str] | None,
            typer.Option("--handoff", help="Text for the handoff packet (repeatable)."),
        ] = None,
        checkpoint: Annotated[
            bool,
            typer.Option(
                "--checkpoint", help="Add the saved checkpoint of (user, session) to the handoff."
            ),
        ] = False,
        db: DbOpt = None,
        fmt: BundleFormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Build a context bundle for the next model call (JSON, or a markdown prompt block)."""
        from memcli.acb import build_acb, parse_request
        from memcli.acb_render import render_markdown
        from memcli.config import load_settings

        with errors():
            data = _read_request(request)
            flags = {
                "query_text": query,
                "tenant_id": tenant,
                "user_id": user,
                "session_id": session,
                "agent_id": agent,
                "channel": channel,
                "intent": intent,
                "max_tokens": max_tokens,
                "app_id": app_id,
                "since": since,
                "categories": category or None,
                "handoff": handoff or None,
            }
            data.update({k: v for k, v in flags.items() if v is not None})
            if cap:
                data["caps"] = {**data.get("caps", {}), **_parse_caps(cap)}
            if no_track:
                data["track"] = False
            if checkpoint:
                data["include_checkpoint"] = True
            req = parse_request(data)
            settings = load_settings(db)
            with open_memory(db, with_embedder=bool(req.query_text),
                             preload=bool(req.query_text)) as memory:
                bundle = build_acb(
                    memory, req, settings=settings.acb, context_dir=settings.context_dir
                )
            chosen = (BundleFormat.json if as_json else fmt) or (
                BundleFormat.markdown if sys.stdout.isatty() else BundleFormat.json
            )
            if chosen in (BundleFormat.markdown, BundleFormat.text):
                sys.stdout.write(render_markdown(bundle))
            else:
                emit(bundle, Format(chosen.value))

    @acb.command("show")
    def show_cmd(
        view: Annotated[View, typer.Argument(help="identity or rules")],
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Print the identity or rules text bundles use (your copy, else the default)."""
        from memcli.acb_sections import load_view
        from memcli.config import load_settings

        with errors():
            settings = load_settings(db)
            text, source = load_view(view.value, settings.context_dir)
            resolved = resolve_format(fmt, as_json)
            if resolved is Format.text:
                sys.stdout.write(text if text.endswith("\n") else text + "\n")
            else:
                emit({"view": view.value, "source": source, "text": text}, resolved)

    @acb.command("edit")
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

        from memcli.acb_sections import bundled_view, view_path
        from memcli.config import editor_command, load_settings
        from memcli.errors import MemcliError

        with errors():
            settings = load_settings(db)
            assert settings.context_dir is not None  # load_settings always sets it
            path = view_path(view.value, settings.context_dir)
            if path is None:
                path = settings.context_dir / f"{view.value}.md"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(bundled_view(view.value), encoding="utf-8")
                print(f"memcli: created {path} from the default", file=sys.stderr)
            if not no_editor:
                status = subprocess.call([*shlex.split(editor_command()), str(path)])
                if status != 0:
                    raise MemcliError(f"the editor exited with status {status}")
            print(path)

    @app.command("related")
    def related_cmd(
        memory_id: Annotated[int, typer.Argument(help="A memory id.")],
        kind: Annotated[
            str | None,
            typer.Option("--kind", help="Only edges of this kind (related, supersedes ...)."),
        ] = None,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """List a memory's edges (related memories, supersessions), strongest first."""
        from memcli.errors import NotFoundError
        from memcli.store.acb import edges_with_memories, memory_exists

        with errors(), open_memory(db, with_embedder=False) as memory:
            if not memory_exists(memory.db, memory_id):
                raise NotFoundError(f"no memory with id {memory_id}")
            rows = [
                r
                for r in edges_with_memories(memory.db, memory_id)
                if kind is None or r["kind"] == kind
            ]
            emit(rows, resolve_format(fmt, as_json), _related_text)


def _related_text(rows: list[dict[str, Any]]) -> None:
    from memcli.acb_render import short

    for r in rows:
        arrow = "->" if r["direction"] == "out" else "<-"
        print(
            f"{r['kind']:<11} {r['strength']:.3f} {arrow} #{r['other_id']} "
            f"[{r['other_category'] or r['other_kind']}, {r['other_state']}] "
            f"{short(r['other_text'], 80)}"
        )
