"""Typer option types shared by the command groups (kept apart from `output`, which has no
Typer import)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memcli.cli.output import Format

DbOpt = Annotated[
    Path | None,
    typer.Option("--db", help="Database file (default: $MEMCLI_DB, then the user data dir).",
                 show_default=False),
]
FormatOpt = Annotated[
    Format | None,
    typer.Option("--format", "-f", help="Output format (default: text on a terminal, else json)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Same as --format json.")]
