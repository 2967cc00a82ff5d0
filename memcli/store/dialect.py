"""The SQL fragments whose spelling differs between engines: what each backend's dialect
object (`db.dialect`) provides (part of the store seam).

Ordinary store queries are written in SQL both SQLite and PostgreSQL accept (RETURNING,
ON CONFLICT, IS NOT DISTINCT FROM ...). The few functions that have no common spelling come
from the connection's dialect, so a query reads `db.dialect.greatest(a, b)` and each backend
spells it its own way. Arguments are SQL expressions (column names, parameters such as
":now"), never user values. SQLite's spelling: memcli.store.sqlite.dialect.

What each differs in on PostgreSQL, for the backend that mirrors them:
- greatest/least: SQLite's scalar max()/min() return NULL when any argument is NULL, while
  PostgreSQL's greatest()/least() skip NULLs. Every use here has non-NULL arguments.
- days_between: julianday() has no PostgreSQL twin; timestamps are ISO-8601 text in both.
- json_object: PostgreSQL's json_build_object() spaces its output differently (`{"a" : 1}`),
  so text stored from it would not be byte-identical to SQLite's.
- is_json/json_text: `json_valid(x) AND json_extract(x, ..)` relies on short-circuiting
  PostgreSQL does not promise (its spelling needs a CASE).
- round_to: PostgreSQL rounds to n digits only for numeric (`round(x::numeric, n)`).
- distinct_list: SQLite's group_concat(DISTINCT x) takes no separator (a DISTINCT aggregate
  has one argument), so string_agg(DISTINCT x, ',') does not run on SQLite.
- binary: text orders follow the column's collation; SQLite's default (BINARY) compares bytes,
  PostgreSQL's follows the database's locale (en_US puts `alice` before `Bob`, C the reverse).
  Every ORDER BY on a name or key (ids, kinds, categories, commands) goes through it, so
  output order is the same on both engines whatever locale the DBA created the database with.
  ISO-8601 timestamps of one shape sort alike under any collation and are left as they are.
- ORDERED_JOIN: SQLite's CROSS JOIN keeps the left table the outer loop (the store uses it
  where the left side is small or already sorted); PostgreSQL refuses `CROSS JOIN ... ON`.
"""

from __future__ import annotations

from typing import Protocol


class Dialect(Protocol):
    """SQL fragments of one engine. A dialect object is hashable (statements built from it
    are cached per dialect, e.g. memcli.store.llm_usage_sql)."""

    name: str
    # A join the planner must not reorder (the left side drives the loop).
    ORDERED_JOIN: str

    def __hash__(self) -> int: ...

    def greatest(self, *exprs: str) -> str:
        """The largest of the expressions (all non-NULL)."""

    def least(self, *exprs: str) -> str:
        """The smallest of the expressions (all non-NULL)."""

    def days_between(self, later: str, earlier: str) -> str:
        """Days (fractional) from `earlier` to `later`, two ISO-8601 timestamps."""

    def json_object(self, *pairs: str) -> str:
        """A JSON object text from alternating key and value expressions."""

    def is_json(self, expr: str) -> str:
        """True when the text is valid JSON."""

    def json_text(self, expr: str, key: str) -> str:
        """The value of top-level `key` (a plain name) of a JSON text."""

    def round_to(self, expr: str, digits: int) -> str:
        """A float rounded to `digits` decimals."""

    def distinct_list(self, expr: str) -> str:
        """The distinct non-NULL values of a group joined by commas (order unspecified)."""

    def binary(self, expr: str) -> str:
        """A text expression compared by its bytes (SQLite's BINARY), as an ORDER BY key."""
