"""Checks on untrusted input before anything else handles it: nesting depth and text that is
not valid UTF-8.

Bytes that are not UTF-8 arrive as lone surrogates (stdin and files are decoded with
`surrogateescape`, argv by Python the same way, and JSON's `\\ud800` escapes make them too).
SQLite, the tokenizers and stdout cannot encode them, so a record holding one is rejected by
itself and a query holding one is a usage error, instead of failing deep inside with an
encoding error. Depth is bounded well below Python's recursion limit (~1,000) because the
redactor, pydantic and `json.dumps` all recurse over a record.
"""

from __future__ import annotations

import re
from typing import Any

from memcli.errors import UsageError

# A record nests `content` objects and `refs`; 64 levels is far beyond any real tool output
# and far below the ~1,000 levels where the recursive steps that follow would fail.
MAX_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")
# JSON integers longer than this (Python's own int/str conversion limit) are not numbers
# memcli can store or compare; the parser keeps them as HugeNumber for `problem` to reject.
MAX_INT_DIGITS = 4300


class HugeNumber(str):
    """An integer literal too long to convert, as its digits."""


def has_bad_text(text: str) -> bool:
    """True when `text` holds a lone surrogate (an invalid UTF-8 byte or a `\\ud800` escape)."""
    return _SURROGATE.search(text) is not None


def problem(value: Any) -> str | None:
    """Why a parsed JSON value cannot be stored (too deep, text not UTF-8), or None."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH} levels"
        if isinstance(item, HugeNumber):
            return f"{where or 'record'}: a number of more than {MAX_INT_DIGITS} digits"
        if isinstance(item, str):
            if has_bad_text(item):
                return f"{where or 'text'}: not valid UTF-8 (an invalid byte or a lone surrogate)"
        elif isinstance(item, dict):
            for key, sub in item.items():
                name = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and has_bad_text(key):
                    return f"{where or 'record'}: a key is not valid UTF-8"
                stack.append((sub, name, depth + 1))
        elif isinstance(item, list):
            stack.extend((sub, f"{where}[{i}]", depth + 1) for i, sub in enumerate(item))
    return None


def check_text(text: str, what: str) -> str:
    """`text` unchanged, or a UsageError when it is not valid UTF-8."""
    if has_bad_text(text):
        raise UsageError(f"{what} is not valid UTF-8 (an invalid byte or a lone surrogate)",
                         "send UTF-8 text")
    return text


def check_value(value: Any, what: str) -> Any:
    """`value` unchanged, or a UsageError saying why it cannot be used."""
    reason = problem(value)
    if reason is not None:
        raise UsageError(f"{what}: {reason}")
    return value
