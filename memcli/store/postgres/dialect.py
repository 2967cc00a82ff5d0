"""PostgreSQL spellings of the SQL fragments of memcli/store/dialect.py (same names, same
arguments: SQL expressions such as column names or `:name` parameters, never user values).

Where the result still differs from SQLite's (tests/pg/test_pg_dialect.py evaluates every fragment
on both engines):
- greatest/least skip NULL arguments (SQLite's scalar max/min return NULL); every use in the
  store has non-NULL arguments, and mimicking SQLite would repeat each expression, which breaks
  positional `?` parameters inside them.
- json_text returns text for every JSON type (`->>`): a number comes back as '5', where SQLite's
  json_extract returns the integer 5. The store compares it with text (`profile_field`).
- is_json is a boolean (True/False), SQLite's json_valid 1/0; Python compares them equal.
- json_text is a CASE (PostgreSQL does not promise to short-circuit `AND`, so an invalid JSON
  text must not reach the `::jsonb` cast) and repeats `expr`: give it a column. A constant or
  parameter would not do: the planner folds the cast of a constant even inside CASE.
"""

from __future__ import annotations


class PostgresDialect:
    name = "postgresql"
    # PostgreSQL refuses `CROSS JOIN ... ON` and orders joins by cost anyway.
    ORDERED_JOIN = "JOIN"

    def greatest(self, *exprs: str) -> str:
        return f"greatest({', '.join(exprs)})"

    def least(self, *exprs: str) -> str:
        return f"least({', '.join(exprs)})"

    def days_between(self, later: str, earlier: str) -> str:
        """Days (fractional) from `earlier` to `later`, two ISO-8601 timestamps (text)."""
        return (f"(extract(epoch FROM (CAST({later} AS timestamptz)"
                f" - CAST({earlier} AS timestamptz))) / 86400.0)::double precision")

    def json_object(self, *pairs: str) -> str:
        """A JSON object text from alternating key and value expressions, spelled as SQLite's
        json_object spells it (`{"a":1,"b":"x"}`, keys in order, no spaces): stored text is
        byte-identical on both engines. json_build_object would write `{"a" : 1, ...}`.
        A whole double precision value is spelled `1.0` as SQLite spells it (to_json: `1`);
        each value expression appears once (it may hold a parameter)."""
        if len(pairs) % 2:
            raise ValueError("json_object needs key/value pairs")
        parts = [f"(SELECT CASE WHEN pg_typeof(j.x) = 'double precision'::regtype"
                 f" AND to_json(j.x)::text ~ '^-?[0-9]+$' THEN to_json(j.x)::text || '.0'"
                 f" ELSE coalesce(to_json(j.x)::text, 'null') END FROM (SELECT {v} AS x) j)"
                 for v in pairs[1::2]]
        keys = [f"to_json(CAST({k} AS text))::text" for k in pairs[0::2]]
        body = " || ',' || ".join(f"{k} || ':' || {v}" for k, v in zip(keys, parts, strict=True))
        return f"('{{' || {body} || '}}')" if pairs else "'{}'"

    def is_json(self, expr: str) -> str:
        return f"({expr} IS JSON)"

    def json_text(self, expr: str, key: str) -> str:
        """The value of top-level `key` (a plain name) of a JSON text, as text."""
        assert key.isidentifier(), key
        return (f"(CASE WHEN {expr} IS JSON OBJECT"
                f" THEN CAST({expr} AS jsonb) ->> '{key}' END)")

    def round_to(self, expr: str, digits: int) -> str:
        # No round(double precision, int) in PostgreSQL: through numeric and back to a float.
        return f"round(CAST({expr} AS numeric), {int(digits)})::double precision"

    def distinct_list(self, expr: str) -> str:
        """The distinct non-NULL values of a group joined by commas (order unspecified)."""
        return f"string_agg(DISTINCT CAST({expr} AS text), ',')"

    def binary(self, expr: str) -> str:
        """Code point order in a UTF8 database: the bytes of UTF-8, SQLite's BINARY order."""
        return f'{expr} COLLATE "C"'


DIALECT = PostgresDialect()
