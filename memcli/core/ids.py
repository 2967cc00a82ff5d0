"""Row ids: one type for every id a request names (a memory, task, decision, proposal).

Ids are SQLite INTEGER / PostgreSQL bigint keys, so an id beyond 64 bits cannot name a row; it
is refused as bad input where it comes in (exit 2, HTTP 422) rather than overflowing in the
driver. The pydantic models of the HTTP bodies and MCP tools use `Id`; the CLI's arguments
use `parse_id` (memcli.cli.options), so both say the same thing.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

MAX_ID = 2**63 - 1  # the largest signed 64-bit integer: SQLite's INTEGER, PostgreSQL's bigint

Id = Annotated[int, Field(ge=1, le=MAX_ID)]


def parse_id(text: str | int) -> int:
    """`text` as an id, or ValueError saying why it is not one."""
    try:
        number = int(str(text).strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an id (a whole number)") from None
    if not 1 <= number <= MAX_ID:
        raise ValueError(f"{text} is not an id (ids run from 1 to {MAX_ID})")
    return number
