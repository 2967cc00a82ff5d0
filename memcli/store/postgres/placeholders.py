"""SQLite placeholders to psycopg's: `?` -> `%s`, `:name` -> `%(name)s`, `%` -> `%%`.

The store writes its SQL once, with SQLite's `?` / `:name` parameters (issue #16: portable SQL).
psycopg formats `%s` / `%(name)s`, and every literal `%` (`LIKE 'a%'`, the modulo operator)
must then be doubled. The rewrite walks the statement token by token so that nothing inside a
string literal ('it''s ?'), an escape string (E'\\''), a dollar-quoted body ($$ ... $$), a
quoted identifier ("a?b"), a comment (-- ?, /* ? */, nested) or a cast (`x::text`) is taken
for a parameter; only a `%` inside those is doubled, as psycopg reads the whole text.

`?NNN` (SQLite's numbered form, gone from the store but legal SQLite) is supported too: the
statement is turned into named parameters `%(_pN)s` and a sequence of values into a dict
(`bind`), the one way psycopg lets a value be used twice by position. A bare `?` after `?N`
takes number N+1, as in SQLite.

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


@dataclass(frozen=True)
class Rewritten:
    sql: str  # psycopg's form (`%` doubled); the original text when it has no parameters
    style: str  # "none" | "positional" | "named" | "numbered"
    count: int  # positional: how many `?`; numbered: the highest number

    def bind(self, params):
        """`params` in the form psycopg expects for `sql` (numbered: a dict)."""
        if self.style == "none":
            return params if params else None
        if self.style == "numbered" and not isinstance(params, dict):
            return {f"_p{i + 1}": value for i, value in enumerate(params)}
        return params


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
        return Rewritten("".join(out), "positional", positional)
    if named:
        return Rewritten("".join(out), "named", named)
    return Rewritten(sql, "none", 0)

