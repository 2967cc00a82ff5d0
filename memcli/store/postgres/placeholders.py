"""SQLite placeholders to psycopg's: `?` -> `%s`, `:name` -> `%(name)s`, `%` -> `%%`.

The store writes its SQL once, with SQLite's `?` / `:name` parameters (portable SQL).
psycopg formats `%s` / `%(name)s`, and every literal `%` (`LIKE 'a%'`, the modulo operator)
must then be doubled. The rewrite walks the statement token by token so that nothing inside a
string literal ('it''s ?'), an escape string (E'\\''), a dollar-quoted body ($$ ... $$), a
quoted identifier ("a?b"), a comment (-- ?, /* ? */, nested) or a cast (`x::text`) is taken
for a parameter; only a `%` inside those is doubled, as psycopg reads the whole text.

`?NNN` (SQLite's numbered form, gone from the store but legal SQLite) is supported too: the
statement is turned into named parameters `%(_pN)s` and a sequence of values into a dict
(`bind`), the one way psycopg lets a value be used twice by position. A bare `?` after `?N`
takes number N+1, as in SQLite.

`column IS NOT DISTINCT FROM ?` (the store's NULL-safe equality, SQLite's `IS`) is an
index condition on SQLite but only a filter on PostgreSQL (errata 8 of
docs/design/postgresql.md: the planner cannot look it up in a B-tree). `render` gives it its
indexable form once the value is known: `(column IS NULL)` for None (the parameter dropped),
else `(column = ? AND column IS NOT NULL)`, which is the same truth value in every context
(under NOT too). Only a plain (qualified) column after WHERE/AND/OR/ON/`(` is rewritten;
anything else keeps the portable form, as executemany does (its rows may differ in NULLs).

Results are cached per statement text (the store has a few hundred distinct texts).
Not handled on purpose: an array slice written `a[x:y]` with a name after the colon (the
store has none; write `a[x : y]`), SQLite's `@name` / `$name` parameters (unused).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

# One alternative per token kind; the first that matches at a position wins (order matters:
# `::` before `:name`, `--` before other text).
_TOKEN = re.compile(
    r"""(?P<skip>
          [Ee]'(?:[^'\\]|\\.|'')*'          # escape string: backslash escapes
        | '(?:[^']|'')*'                    # string literal, '' inside
        | "(?:[^"]|"")*"                    # quoted identifier
        | --[^\n]*                          # line comment
        | ::                                # cast
      )
    | (?P<dollar>\$(?:[A-Za-z_][A-Za-z_0-9]*)?\$)   # start of a dollar-quoted body
    | (?P<comment>/\*)                      # block comment (PostgreSQL nests them)
    | (?P<numbered>\?\d+)
    | (?P<positional>\?)
    | (?P<named>(?<![:\w]):[A-Za-z_][A-Za-z_0-9]*)
    | (?P<percent>%)
    """,
    re.VERBOSE,
)


class PlaceholderError(ValueError):
    """The statement mixes parameter styles psycopg cannot take together."""


# `column IS NOT DISTINCT FROM ` right before a `?`, the column after a keyword or `(`.
_NULLSAFE = re.compile(
    r"(?:(?<=\()|(?<=\s))(?P<column>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)?)\s+IS\s+NOT\s+DISTINCT"
    r"\s+FROM\s+$", re.IGNORECASE)
_BEFORE = re.compile(r"(?:\(|\b(?:WHERE|AND|OR|ON))\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Rewritten:
    sql: str  # psycopg's form (`%` doubled); the original text when it has no parameters
    style: str  # "none" | "positional" | "named" | "numbered"
    count: int  # positional: how many `?`; numbered: the highest number
    # NULL-safe comparisons: (index of the `?` among the positional ones, column); `parts`
    # is `sql` cut before each of them (len(nullsafe) + 1 pieces), for `render`.
    nullsafe: tuple[tuple[int, str], ...] = ()
    parts: tuple[str, ...] = ()

    def bind(self, params):
        """`params` in the form psycopg expects for `sql` (numbered: a dict)."""
        if self.style == "none":
            return params if params else None
        if self.style == "numbered" and not isinstance(params, dict):
            return {f"_p{i + 1}": value for i, value in enumerate(params)}
        return params

    def render(self, params) -> tuple[str, object]:
        """The statement and its parameters for these values: `sql` with each NULL-safe
        comparison in its indexable form (see the module's docstring)."""
        if not self.nullsafe or params is None or isinstance(params, dict):
            return self.sql, self.bind(params)
        values = list(params)
        nulls = tuple(values[i] is None for i, _ in self.nullsafe)
        for i, _ in reversed(self.nullsafe):
            if values[i] is None:
                del values[i]
        return _nullsafe_text(self, nulls), values


@lru_cache(maxsize=4096)
def _nullsafe_text(plan: Rewritten, nulls: tuple[bool, ...]) -> str:
    out = [plan.parts[0]]
    for (_, column), null, rest in zip(plan.nullsafe, nulls, plan.parts[1:], strict=True):
        out.append(f"({column} IS NULL)" if null
                   else f"({column} = %s AND {column} IS NOT NULL)")
        out.append(rest)
    return "".join(out)


def _block_comment_end(sql: str, start: int) -> int:
    """Index just past the `*/` closing the (possibly nested) comment opened at `start`."""
    depth, i = 0, start
    while i < len(sql):
        pair = sql[i:i + 2]
        if pair == "/*":
            depth, i = depth + 1, i + 2
        elif pair == "*/":
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        else:
            i += 1
    return len(sql)  # unterminated: let the server report it


@lru_cache(maxsize=4096)
def rewrite(sql: str) -> Rewritten:
    out: list[str] = []
    pos = 0
    positional = named = 0
    largest = 0  # SQLite: a bare `?` is one more than the largest number assigned so far
    numbered = False
    bare: list[tuple[int, int]] = []  # (index in `out`, its number) of each bare `?`
    cuts: list[tuple[int, int, int, str]] = []  # NULL-safe `?`: out index, cut, number, column
    while True:
        match = _TOKEN.search(sql, pos)
        if match is None:
            out.append(sql[pos:])
            break
        out.append(sql[pos:match.start()])
        kind, text = match.lastgroup, match.group(0)
        pos = match.end()
        if kind == "skip":
            out.append(text.replace("%", "%%"))
        elif kind == "dollar":
            end = sql.find(text, pos)
            end = len(sql) if end < 0 else end + len(text)
            out.append(sql[match.start():end].replace("%", "%%"))
            pos = end
        elif kind == "comment":
            end = _block_comment_end(sql, match.start())
            out.append(sql[match.start():end].replace("%", "%%"))
            pos = end
        elif kind == "numbered":
            number = int(text[1:])
            numbered, largest = True, max(largest, number)
            out.append(f"%(_p{number})s")
        elif kind == "positional":
            found = _NULLSAFE.search(out[-1])
            if found and _BEFORE.search(out[-1][:found.start()]):
                # Cut here: `render` writes the column's comparison in place of `%s`.
                cuts.append((len(out), found.start(), positional, found.group("column")))
            positional += 1
            largest += 1
            bare.append((len(out), largest))
            out.append("%s")
        elif kind == "named":
            named += 1
            out.append(f"%({text[1:]})s")
        else:
            out.append("%%")
    if named and (positional or numbered):
        raise PlaceholderError(f"mixed :name and ? parameters in: {sql[:120]}")
    if numbered:
        for index, number in bare:
            out[index] = f"%(_p{number})s"
        return Rewritten("".join(out), "numbered", largest)
    if positional:
        if not cuts:
            return Rewritten("".join(out), "positional", positional)
        parts, done = [], 0
        for index, cut, _, _ in cuts:
            parts.append("".join(out[done:index - 1]) + out[index - 1][:cut])
            done = index + 1  # past the `%s`
        parts.append("".join(out[done:]))
        return Rewritten("".join(out), "positional", positional,
                         tuple((number, column) for _, _, number, column in cuts), tuple(parts))
    if named:
        return Rewritten("".join(out), "named", named)
    return Rewritten(sql, "none", 0)

