"""Statements over many ids, cut into parts: `chunks` of a list and the `?` marks of an IN list.

Each caller picks its part size for its statement: small enough that the parameters stay far
below SQLite's limit (32766) and PostgreSQL's (65535), large enough that a whole ingest's or
rebuild's ids take a few statements, not one per id.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import TypeVar

T = TypeVar("T")


def chunks(rows: list[T], size: int) -> Iterator[list[T]]:
    """`rows` in consecutive parts of `size` (the last one shorter), in order."""
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


def marks(values: Sized) -> str:
    """`?,?,?`: one parameter mark per value, for `IN (...)`."""
    return ",".join("?" * len(values))
