"""`memcli acb build|show|edit` (context bundles) and `memcli related` (relation edges)."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated, Any

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import AsOfOpt, DbOpt, JsonOpt, MemoryIdArg
from memcli.cli.output import Format, emit, errors, resolve_format


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
        as_of: AsOfOpt = None,
        db: DbOpt = None,
        fmt: BundleFormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Build a context bundle for the next model call (JSON, or a markdown prompt block)."""
        from memcli.cli import run as body

        body.acb_build(
            request, query=query, tenant=tenant, user=user, session=session, agent=agent,
            channel=channel, intent=intent, max_tokens=max_tokens, cap=cap, category=category,
            app_id=app_id, since=since, no_track=no_track, handoff=handoff,
            checkpoint=checkpoint, as_of=as_of, db=db, fmt=fmt, as_json=as_json,
        )

    @acb.command("show")
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

        from memcli.acb.sections import bundled_view, view_path
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
        memory_id: MemoryIdArg,
        kind: Annotated[
            str | None,
            typer.Option("--kind", help="Only edges of this kind (related, supersedes ...)."),
        ] = None,
        tenant: Annotated[str | None, typer.Option(
            "--tenant", help="The memory's tenant (default: the configured one).")] = None,
        db: DbOpt = None,
        fmt: FormatOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """List a memory's edges (related memories, supersessions), strongest first."""
        from memcli.store import owner as own
        from memcli.store.acb import edges_with_memories

        with errors(), open_memory(db, with_embedder=False, must_exist=True) as memory:
            tenant = tenant or memory.tenant
            own.memory(memory.db, memory_id, memory.owner(tenant))  # another tenant's: not found
            rows = [
                r
                for r in edges_with_memories(memory.db, memory_id, tenant)
                if kind is None or r["kind"] == kind
            ]
            emit(rows, resolve_format(fmt, as_json), _related_text)


def _related_text(rows: list[dict[str, Any]]) -> None:
    from memcli.acb.render import short

    for r in rows:
        arrow = "->" if r["direction"] == "out" else "<-"
        print(
            f"{r['kind']:<11} {r['strength']:.3f} {arrow} #{r['other_id']} "
            f"[{r['other_category'] or r['other_kind']}, {r['other_state']}] "
            f"{short(r['other_text'], 80)}"
        )
