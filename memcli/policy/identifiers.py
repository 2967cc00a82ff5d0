"""Bank accounts and national identity numbers, found by shape and proven by their check digits.

An IBAN or a national id in a memory is not a credential, but it is what identity theft is made
of, and an agent never needs the number itself to remember that a person has one. memcli
redacts them, like credentials, rather than storing them as `high` (encrypted): redaction works
the same through every write entry and needs no key, and the text keeps what matters
("[REDACTED:iban]").

Each kind has a shape (a regex) and a validator from python-stdnum, which keeps the check-digit
algorithms and the per-country formats of some 200 standards: a number of the right shape whose
check digits fail is left alone, so order numbers and phone numbers survive.

| kind | shape | proven by |
|---|---|---|
| iban | 2 letters, 2 digits, 11-30 letters or digits | mod-97, length (`stdnum.iban`) |
| national_id | US SSN `123-45-6789` | area, group and serial rules (`stdnum.us.ssn`) |
| national_id | Spanish DNI `12345678Z`, NIE `X1234567L` | the check letter (`stdnum.es`) |
| national_id | Italian codice fiscale | the check letter (`stdnum.it.codicefiscale`) |
| national_id | Brazilian CPF `123.456.789-09` | two check digits (`stdnum.br.cpf`) |
| national_id | Indian Aadhaar `2345 6789 0123` | Verhoeff (`stdnum.in_.aadhaar`) |
| national_id | French NIR (15 digits) | mod-97 key (`stdnum.fr.nir`) |
| national_id | Swedish personnummer `YYMMDD-NNNN` | the date and Luhn (`stdnum.se.personnummer`) |

Payment card numbers (Luhn) are found here too, without python-stdnum: the check is three lines.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from typing import Any

__all__ = ["DETECTORS", "DIGITS"]

Span = tuple[str, int, int]

# (kind, python-stdnum module, shape). The shapes are anchored on both sides so that a number
# inside a longer one is not taken.
_SHAPES: tuple[tuple[str, str, str], ...] = (
    (
        "iban",
        "stdnum.iban",
        r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,4})?"
        r"(?![A-Za-z0-9])",
    ),
    ("national_id", "stdnum.us.ssn", r"(?<![\w-])[0-9]{3}-[0-9]{2}-[0-9]{4}(?![\w-])"),
    ("national_id", "stdnum.es.dni", r"(?<![\w-])[0-9]{8}-?[A-Z](?![\w-])"),
    ("national_id", "stdnum.es.nie", r"(?<![\w-])[XYZ]-?[0-9]{7}-?[A-Z](?![\w-])"),
    (
        "national_id",
        "stdnum.it.codicefiscale",
        r"(?<![\w-])[A-Z]{6}[0-9LMNPQRSTUV]{2}[A-EHLMPRST][0-9LMNPQRSTUV]{2}[A-Z]"
        r"[0-9LMNPQRSTUV]{3}[A-Z](?![\w-])",
    ),
    ("national_id", "stdnum.br.cpf", r"(?<![\w.-])[0-9]{3}\.[0-9]{3}\.[0-9]{3}-[0-9]{2}(?![\w-])"),
    ("national_id", "stdnum.in_.aadhaar", r"(?<![\w-])[2-9][0-9]{3} [0-9]{4} [0-9]{4}(?![\w-])"),
    (
        "national_id",
        "stdnum.fr.nir",
        r"(?<![\w-])[12] ?[0-9]{2} ?[0-9]{2} ?(?:[0-9]{2}|2[AB]) ?[0-9]{3} ?[0-9]{3} ?[0-9]{2}"
        r"(?![\w-])",
    ),
    ("national_id", "stdnum.se.personnummer", r"(?<![\w-])(?:19|20)?[0-9]{6}[-+][0-9]{4}(?![\w-])"),
)


# Payment card numbers: 13-19 digits starting with 2-6 (the card networks' first digits), whole
# or in groups split by single spaces or by single dashes (4 digits, then groups of 3-6: 4-4-4-4,
# 4-6-5, 4-4-4-4-3), not glued to letters or other digits, and passing the Luhn check, which one
# in ten other numbers passes: most order numbers, epoch milliseconds (they start with 1) and
# phone numbers survive. The pattern finds only that shape (a run of digits costs the scan, not
# a Python check per position); the digit count and the Luhn check are done in code.
_CARD_RE = re.compile(
    r"(?<![0-9A-Za-z_])[2-6][0-9]{3}"
    r"(?: [0-9]{3,6}(?: [0-9]{3,6}){1,3}|-[0-9]{3,6}(?:-[0-9]{3,6}){1,3}|[0-9]{9,15})"
    r"(?![0-9A-Za-z_])"
)


_DOUBLED = str.maketrans("0123456789", "0246813579")  # a doubled digit's digit sum


def _luhn(digits: str) -> bool:
    total = sum(map(int, digits[-1::-2])) + sum(map(int, digits[-2::-2].translate(_DOUBLED)))
    return total % 10 == 0


def _check_card(m: re.Match[str], text: str) -> Span | None:
    """The longest card number the match starts with (a shorter one ends where a group ends:
    "4111 1111 1111 1111 2024" holds a card and a year)."""
    value = m.group()
    sep = " " if " " in value else "-" if "-" in value else ""
    groups = value.split(sep) if sep else [value]
    for k in range(len(groups), 0, -1):
        digits = "".join(groups[:k])
        if len(digits) < 13:
            return None
        if len(digits) <= 19 and _luhn(digits):
            return "card_number", m.start(), m.start() + len(sep.join(groups[:k]))
    return None


@cache
def _validator(module: str) -> Any:
    # python-stdnum's first import costs ~35 ms (it loads pydoc): only when a shape matched.
    return importlib.import_module(module).is_valid


def _checker(kind: str, module: str) -> Any:
    def check(m: re.Match[str], text: str) -> Span | None:
        value = m.group()
        if kind == "iban":
            return _iban(m, module)
        return (kind, m.start(), m.end()) if _validator(module)(value) else None

    return check


def _iban(m: re.Match[str], module: str) -> Span | None:
    """The longest valid IBAN the match starts with (a shorter one ends where a group ends:
    the shape may run on into a following code such as a BIC)."""
    value = m.group()
    cuts = [i for i, c in enumerate(value) if c == " "] + [len(value)]
    for cut in reversed(cuts):
        if _validator(module)(value[:cut]):
            return "iban", m.start(), m.start() + cut
    return None


# Each shape alone, with the check that proves it: (pattern, checker), cards first.
_BRANCHES: tuple[tuple[re.Pattern[str], Any], ...] = (
    (_CARD_RE, _check_card),
    *((re.compile(shape), _checker(kind, module)) for kind, module, shape in _SHAPES),
)
# All shapes in one pattern: a text is scanned once, not once per shape (most texts with digits
# hold none of them, and each scan has a fixed cost).
_ANY_RE = re.compile("|".join(f"(?:{p.pattern})" for p, _ in _BRANCHES))


def _check_any(m: re.Match[str], text: str) -> Span | None:
    """The first shape found at the match's start that its check digits prove (two shapes may
    start at the same place: "2345 6789 0124" is too short for a card, and an Aadhaar)."""
    for pattern, check in _BRANCHES:
        found = pattern.match(text, m.start())
        if found is not None:
            span = check(found, text)
            if span is not None:
                return span
    return None


# DIGITS stands for "the text holds two digits in a row": every number here does.
DIGITS = "00"
DETECTORS: tuple[tuple[tuple[str, ...], re.Pattern[str], Any], ...] = (
    ((DIGITS,), _ANY_RE, _check_any),
)
