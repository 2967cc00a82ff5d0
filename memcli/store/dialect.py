"""SQL fragments whose spelling is SQLite's own, in one place (issue #16, the store seam).

Ordinary store queries are written in SQL both SQLite and PostgreSQL accept (RETURNING,
ON CONFLICT, IS NOT DISTINCT FROM ...). The few functions that have no common spelling are
built here, so the PostgreSQL backend can supply its own versions of these functions without
touching the queries that use them. Arguments are SQL expressions (column names, parameters
such as ":now"), never user values.

What each differs in on PostgreSQL, for the backend that will mirror them:
- greatest/least: SQLite's scalar max()/min() return NULL when any argument is NULL, while
  PostgreSQL's greatest()/least() skip NULLs. Every use here has non-NULL arguments.
- days_between: julianday() has no PostgreSQL twin; timestamps are ISO-8601 text in both.
- json_object: PostgreSQL's json_build_object() spaces its output differently (`{"a" : 1}`),
  so text stored from it would not be byte-identical to SQLite's.
- round_to: PostgreSQL rounds to n digits only for numeric (`round(x::numeric, n)`).
- distinct_list: SQLite's group_concat(DISTINCT x) takes no separator (a DISTINCT aggregate
  has one argument), so string_agg(DISTINCT x, ',') does not run on SQLite.
"""

from __future__ import annotations


def greatest(*exprs: str) -> str:
    return f"max({', '.join(exprs)})"


def least(*exprs: str) -> str:
    return f"min({', '.join(exprs)})"


def days_between(later: str, earlier: str) -> str:
    """Days (fractional) from `earlier` to `later`, two ISO-8601 timestamps."""
    return f"(julianday({later}) - julianday({earlier}))"


def json_object(*pairs: str) -> str:
    """A JSON object text from alternating key and value expressions."""
    return f"json_object({', '.join(pairs)})"


def is_json(expr: str) -> str:
    return f"json_valid({expr})"


def json_text(expr: str, key: str) -> str:
    """The value of top-level `key` (a plain name) of a JSON text."""
    assert key.isidentifier(), key
    return f"json_extract({expr}, '$.{key}')"


def round_to(expr: str, digits: int) -> str:
    return f"round({expr}, {int(digits)})"


def distinct_list(expr: str) -> str:
    """The distinct non-NULL values of a group joined by commas (order unspecified)."""
    return f"group_concat(DISTINCT {expr})"


# A join the planner must not reorder: SQLite's CROSS JOIN keeps the left table the outer loop
# (the store uses it where the left side is small or already sorted). PostgreSQL refuses
# `CROSS JOIN ... ON` (a syntax error) and plans a plain JOIN by cost.
ORDERED_JOIN = "CROSS JOIN"
