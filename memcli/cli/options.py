"""Typer option types shared by the command groups (kept apart from `output`, which has no
Typer import)."""

from __future__ import annotations

from typing import Annotated, Any

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


def _id(text: str | int) -> int:
    """The parser of every id argument: an id beyond 64 bits is a usage error (exit 2)."""
    from memcli.ids import parse_id

    try:
        return parse_id(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def id_argument(help: str) -> Any:
    """A required id argument (`memcli forget ID`), parsed by the one id rule."""
    return typer.Argument(help=help, parser=_id, metavar="ID", show_default=False)


def id_option(*decls: str, help: str) -> Any:
    """An optional id option (`purge --memory ID`), parsed by the one id rule."""
    return typer.Option(*decls, help=help, parser=_id, metavar="ID", show_default=False)


MemoryIdArg = Annotated[int, id_argument("A memory id.")]


def _count(text: str | int) -> int:
    """The parser of `--limit`: at least 1, and small enough for SQL's LIMIT (64 bits)."""
    from memcli.ids import MAX_ID

    try:
        number = int(str(text).strip())
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a whole number") from None
    if not 1 <= number <= MAX_ID:
        raise typer.BadParameter(f"{text} is out of range (1 to {MAX_ID})")
    return number


def limit_option(help: str | None = None) -> Any:
    """`--limit N`: how many rows at most."""
    return typer.Option("--limit", help=help, parser=_count, metavar="N")
