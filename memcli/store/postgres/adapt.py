"""Value adaptation between the store's SQLite-shaped values and PostgreSQL, per connection.

Parameters. psycopg sends a Python `str` as type `unknown` and lets the server infer it from
context, which fails wherever the context gives none: `VALUES (?, ?)` in a CTE, `CASE x WHEN ?
THEN ? END`, `? IS NULL`, `SELECT ?`, `coalesce(?, ...)`: "could not determine data type of
parameter $1" (42P18). SQLite never asks. The general fix, rather than a cast in each statement,
is to send `str` as `text` (psycopg's own `StrDumper`), so every parameter carries a type. A
text value compared with a non-text column would then need a cast, but the store passes ints
for ids and numbers (psycopg types those by value: int2/int4/int8/numeric) and floats as
float8. `None` stays untyped (it fits any column; a lone `? IS NULL` with None is the one case
left, see the replay numbers in the report). `bool` is sent as an integer 0/1, what SQLite
stores for it (the schema's flags are smallint, as in SQLite).

Results. `numeric` (what `sum(bigint)`, `round(x::numeric, n)` and `avg` return) comes back as
int or float instead of Decimal: SQLite has no decimal type, and json.dumps refuses Decimal.
"""

from __future__ import annotations

import struct
from typing import Any

from psycopg.adapt import Dumper, Loader
from psycopg.types.string import StrBinaryDumper, StrDumper


def configure(conn: Any) -> None:
    """Install the dumpers and loaders above on `conn` (a psycopg Connection)."""

    adapters = conn.adapters
    adapters.register_dumper(str, StrDumper)
    adapters.register_dumper(str, StrBinaryDumper)
    int2 = adapters.types["int2"].oid

    class BoolAsIntDumper(Dumper):
        oid = int2

        def dump(self, obj: bool) -> bytes:
            return b"1" if obj else b"0"

    adapters.register_dumper(bool, BoolAsIntDumper)

    class NumericLoader(Loader):
        def load(self, data) -> int | float:
            text = bytes(data).decode()
            if "." in text or "e" in text.lower() or "n" in text.lower():  # NaN, Infinity
                return float(text)
            return int(text)

    adapters.register_loader("numeric", NumericLoader)


def register_vector_loader(conn: Any, oid: int) -> None:
    """pgvector's `vector` (text form `[1,2.5,...]`) loaded as a float32 little-endian blob:
    the bytes SQLite's memory_vectors holds, so store code reading embeddings runs unchanged."""

    class VectorBlobLoader(Loader):
        def load(self, data) -> bytes:
            text = bytes(data).decode()[1:-1]
            values = [float(v) for v in text.split(",")] if text else []
            return struct.pack(f"<{len(values)}f", *values)

    conn.adapters.register_loader(oid, VectorBlobLoader)
