"""Typer option types shared by the command groups (kept apart from `output`, which has no
Typer import)."""

from __future__ import annotations

from typing import Annotated

import typer

from memcli.cli.output import Format

# A str, not a Path: a Path folds the `//` of a URL (`postgresql://h/db` -> `postgresql:/h/db`).
DbOpt = Annotated[
    str | None,
    typer.Option("--db", help="Database file (default: $MEMCLI_DB, then the user data dir).",
                 show_default=False),
]
FormatOpt = Annotated[
    Format | None,
    typer.Option("--format", "-f", help="Output format (default: text on a terminal, else json)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Same as --format json.")]
AsOfOpt = Annotated[
    str | None,
    typer.Option("--as-of", help="Read the memory as it was then: facts valid at that time, "
                                 "events up to it (ISO date or time, e.g. 2026-03-01).",
                 show_default=False),
]
