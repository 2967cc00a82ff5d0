"""The Typer app: global options, and registration of every command group."""

from __future__ import annotations

from typing import Annotated

import typer

from memcli import __version__
from memcli.cli import admin, ingest, query

app = typer.Typer(
    name="memcli",
    help="Long-term memory for AI agents in one local SQLite file.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        print(f"memcli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Long-term memory for AI agents in one local SQLite file."""


ingest.register(app)
query.register(app)
admin.register(app)


def main() -> None:
    app(prog_name="memcli")
