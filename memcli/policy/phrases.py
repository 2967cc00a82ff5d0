"""Credentials given in a sentence: "my PIN is 4821", "the wifi password is Tulip7Garden".

A person tells an agent a password the way they would tell a friend, so no rule set written for
source code sees it (there is no `=` and no token prefix). This detector reads a credential word
(password, passphrase, passcode, PIN, a door or alarm code, an API key or token...), optionally
what it is for ("the password for the router"), a linking word ("is", "was", ":", "=", "set
to"...) and the value after it, and accepts the value by the word's kind:

- a PIN or a code: 4 to 12 digits, optionally split by dashes or blanks ("4821", "12-34-56");
- a password, passphrase or passcode: a quoted value of any shape, or one unbroken word that is
  not a word of description ("is incorrect", "is too short", "is the same");
- a key, token or secret: a value that looks machine-made (a digit, or mixed case, or 24+
  characters without a blank), since "the key is patience" is prose.

A label repeated before its value ("password: password: Orchid5Lake") never hides the value: a
value that is itself a credential word is not taken, and the scan goes on from the next
character, where the second label starts.
"""

from __future__ import annotations

import re

__all__ = ["NEEDLES", "PATTERN", "check"]

# What wakes the detector, lower-cased: a credential word and the character after it, since the
# bare words hide inside common ones ("shopping", "monkey", "passed") and would wake it on most
# conversation for nothing.
NEEDLES = (
    "password",
    "passphrase",
    "passcode",
    "passwd",
    "combination",
    *(
        f"{word}{after}"
        for word in ("pin", "code", "key", "token", "secret")
        for after in " :=-\n\t"
    ),
)

_PIN_WORDS = (
    r"pin(?:[ -]?(?:code|number))?|(?:door|gate|alarm|garage|lock|safe|locker|entry"
    r"|entrance|access|security|building|keypad|wi-?fi)[ -]?code|combination"
)
_PASSWORD_WORDS = r"pass(?:word|phrase|code)s?|passwd"
_KEY_WORDS = (
    r"(?:api|access|secret|private|license|licence|product|recovery|backup|auth|bot)"
    r"[ _-]?(?:key|token|code)|token|secret"
)

PATTERN = re.compile(
    rf"""(?ix)
    \b(?P<label>{_PASSWORD_WORDS}|{_PIN_WORDS}|{_KEY_WORDS})\b
    (?:\s+(?:for|to|of|on|at)\s+(?:the\s+|my\s+|our\s+|your\s+|his\s+|her\s+|their\s+)?
       [\w'.-]{{1,40}}(?:\s+[\w'.-]{{1,40}})?)?          # what it opens: "for the router"
    (?:\s*(?:is|was|are|were|remains|will\s+be|should\s+be)\b|\s*(?::=|=|:)|\s+(?:-|\u2014)(?=\s))
    \s*(?:(?:now|still|just|set\s+to|changed\s+to)\s+)?
    (?:
        "(?P<dq>[^"\r\n]{{1,200}})"
      | '(?P<sq>[^'\r\n]{{1,200}})'
      | \u201c(?P<cq>[^\u201d\r\n]{{1,200}})\u201d
      | `(?P<bq>[^`\r\n]{{1,200}})`
      | (?P<pin>[0-9]{{2,6}}(?:[ -][0-9]{{2,6}}){{0,3}})(?![\w-])
      | (?P<word>[^\s"'`,;&\u201c\u201d]{{1,200}})
    )
    """
)

_PIN_RE = re.compile(rf"(?i)^(?:{_PIN_WORDS})$")
_PASSWORD_RE = re.compile(rf"(?i)^(?:{_PASSWORD_WORDS})$")
_LABEL_RE = re.compile(rf"(?i)^(?:{_PASSWORD_WORDS}|{_PIN_WORDS}|{_KEY_WORDS})\W*$")

# Words that describe a password rather than being one ("the password is incorrect").
_DESCRIPTIONS = frozenset(
    """
    a an the my your his her our their its this that these those it one same different
    incorrect wrong correct right required invalid valid expired weak strong secure safe unsafe
    simple easy hard difficult long short too very not still now also just here there
    changed reset saved stored protected needed missing blank empty hidden encrypted set
    unknown forgotten lost gone visible shown printed below above attached written somewhere
    what which case-sensitive sensitive optional mandatory ready done fine ok okay good bad
    in on at of for to with by from and or but so if when then than
    """.split()
)

_TRAILING = ".,:;!?)]}>"
_TEMPLATES = "<$%{*[/~"


def _digits_ok(value: str) -> bool:
    digits = sum(c.isdigit() for c in value)
    return 4 <= digits <= 12


def _machine_made(value: str) -> bool:
    if len(value) < 8:
        return False
    if any(c.isdigit() for c in value):
        return any(c.isalpha() for c in value) or len(value) >= 10
    return (any(c.isupper() for c in value[1:]) and any(c.islower() for c in value)) or (
        len(value) >= 24
    )


def check(m: re.Match[str], text: str) -> tuple[str, int, int] | None:
    """The value `m` gives for its credential word, as (kind, start, end), or None."""
    label = m.group("label")
    group = next(g for g in ("dq", "sq", "cq", "bq", "pin", "word") if m.group(g) is not None)
    value, start = m.group(group), m.start(group)
    if group == "word":
        value = value.rstrip(_TRAILING)
    quoted = group in ("dq", "sq", "cq", "bq")
    if not value or _LABEL_RE.match(value):
        return None  # a repeated label: the value comes after the next one
    if value[0] in _TEMPLATES and not quoted:
        return None  # a placeholder or a reference: `<your-password>`, `$PASS`, `[REDACTED:x]`
    if _PIN_RE.match(label):
        ok = _digits_ok(value) and not any(c.isalpha() for c in value)
        kind = "pin"
    elif _PASSWORD_RE.match(label):
        ok = (
            quoted
            or group == "pin"
            or (len(value) >= 4 and value.lower() not in _DESCRIPTIONS and not value.isdigit())
            or (value.isdigit() and len(value) >= 4)
        )
        kind = "password"
    else:
        ok = _machine_made(value) or (quoted and _machine_made(value.replace(" ", "")))
        lowered = label.lower()
        kind = "api_key" if "api" in lowered else "token" if "token" in lowered else "secret"
    return (kind, start, start + len(value)) if ok else None
