"""SQLite's spelling of the SQL fragments of memcli.store.dialect.Dialect."""

from __future__ import annotations


class SqliteDialect:
    """SQL fragments as SQLite spells them (see memcli.store.dialect for what differs)."""

    name = "sqlite"
    ORDERED_JOIN = "CROSS JOIN"

    def greatest(self, *exprs: str) -> str:
        return f"max({', '.join(exprs)})"

    def least(self, *exprs: str) -> str:
        return f"min({', '.join(exprs)})"

    def days_between(self, later: str, earlier: str) -> str:
        return f"(julianday({later}) - julianday({earlier}))"

    def json_object(self, *pairs: str) -> str:
        return f"json_object({', '.join(pairs)})"

    def is_json(self, expr: str) -> str:
        return f"json_valid({expr})"

    def json_text(self, expr: str, key: str) -> str:
        assert key.isidentifier(), key
        return f"json_extract({expr}, '$.{key}')"

    def round_to(self, expr: str, digits: int) -> str:
        return f"round({expr}, {int(digits)})"

    def distinct_list(self, expr: str) -> str:
        return f"group_concat(DISTINCT {expr})"

    def binary(self, expr: str) -> str:
        return expr  # BINARY is SQLite's default collation (no column of memcli's sets another)


DIALECT = SqliteDialect()
