"""Secret redaction applied to everything before it is stored.

A memory file outlives the session that wrote it and is easy to copy around, so ingest must never
persist credentials. `redact()` finds secrets and replaces each with `[REDACTED:<kind>]`, with
detectors from four places (the choice and its measurements: docs/design/secrets.md):

- gitleaks' rule set, read as data (`memcli.policy.gitleaks`): token shapes of ~200 services;
- memcli's own narrow, prefix- or label-anchored patterns here (false positives on prose, UUIDs,
  git SHAs and plain URLs cost recall, so every pattern needs a distinctive anchor): shapes
  gitleaks finds only beside a label, labelled values, headers, URL passwords, `<private>`;
- credentials said in a sentence (`memcli.policy.phrases`): "my PIN is 4821";
- numbers proven by their check digits (`memcli.policy.identifiers`): cards, IBANs, national ids.

A detector runs only when one of its needles occurs (one Aho-Corasick pass finds them all), so
ordinary prose costs little. A `Finding` records only the kind and the position in the original
text, never the secret itself, so findings can be logged and stored safely.

Redaction is idempotent: running it on its own output changes nothing, because a detection that
touches an existing `[REDACTED:...]` marker is dropped, and a rejected match never hides a later
one (see `_detect`).

This module looks at one string; `memcli.policy.redaction` walks whole records (keys too) and is
the path every write takes.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

from memcli.policy import gitleaks, identifiers, phrases
from memcli.policy.identifiers import DIGITS

__all__ = [
    "Finding",
    "Redaction",
    "redact",
    "is_placeholder",
    "is_secret_key",
    "marker",
    "secret_kind",
    "MARKER_PREFIX",
]

MARKER_PREFIX = "[REDACTED:"
DIGIT = "0"  # a pseudo-needle: the text holds a digit (identifiers.DIGITS: two in a row)


@dataclass(frozen=True, slots=True)
class Finding:
    """One redacted secret: its kind and `[start, end)` in the original string.

    `path` is empty for `redact()`; `memcli.policy.redaction.redact_record()` sets it to the JSON
    path (dict
    keys and list indexes) of the string the positions refer to.
    """

    kind: str
    start: int
    end: int
    path: tuple[str | int, ...] = ()


@dataclass(frozen=True, slots=True)
class Redaction:
    """The redacted text and what was removed from it."""

    text: str
    findings: tuple[Finding, ...]

    @property
    def kinds(self) -> tuple[str, ...]:
        """Distinct kinds found, in order of first appearance (safe to store or log)."""
        return tuple(dict.fromkeys(f.kind for f in self.findings))


# --- helpers -------------------------------------------------------------------------------------

_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9_]+\]")


def marker(kind: str) -> str:
    """The text that stands for a removed secret of `kind`."""
    return f"{MARKER_PREFIX}{kind}]"


def _looks_like_credential(value: str, min_len: int = 8) -> bool:
    """Heuristic for values after prose-prone labels ("token: ...", "Bearer ...").

    Real tokens mix character classes; English words do not. A digit, or an upper-case letter
    after the first character, is enough; very long unbroken strings also qualify.
    """
    if len(value) < min_len:
        return False
    if any(c.isdigit() for c in value):
        return True
    if any(c.isupper() for c in value[1:]) and any(c.islower() for c in value):
        return True
    return len(value) >= 24 and not any(c.isspace() for c in value)


# Values that are plainly not secrets: empty, templating/env references, placeholders, and
# values we produced ourselves (the idempotency guarantee).
_PLACEHOLDER_RE = re.compile(
    r"""
    \[REDACTED: | %\( | \{\{ | < | \*{3,}
    | (?: \$\{?[A-Za-z_][A-Za-z0-9_]*\}? | null | none | nil | true | false | undefined
        | xxx+ | \.\.\. | … )$
    """,
    re.IGNORECASE | re.VERBOSE,
)


def is_placeholder(value: str) -> bool:
    """True for values that are plainly not secrets (empty, `${VAR}`, `<token>`, `***`...)."""
    return not value or bool(_PLACEHOLDER_RE.match(value))


# --- detectors -----------------------------------------------------------------------------------
# Each detector yields (kind, start, end) spans of the secret part only (labels, schemes, user
# names and hosts stay readable). Overlapping spans are merged afterwards, so detectors may overlap.

Span = tuple[str, int, int]

# Repetitions that could backtrack against each other are bounded ({0,40}, {0,512}), which keeps
# the scans linear on adversarial input.
_PRIVATE_RE = re.compile(
    r"<private\b[^>]{0,200}>.*?(?:</private\s*>|\Z)", re.IGNORECASE | re.DOTALL
)

_PEM_RE = re.compile(
    r"-----BEGIN[ A-Z0-9]{0,40} PRIVATE KEY(?: BLOCK)?-----"
    r".*?(?:-----END[ A-Z0-9]{0,40} PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)

# Fixed-prefix token formats. Each pattern starts with its literal prefix, which lets `re` skip
# ahead quickly; the "not glued to a longer identifier" check is done in code because a leading
# lookbehind would disable that fast path.
_PREFIXED: tuple[tuple[str, str | tuple[str, ...], re.Pattern[str], bool], ...] = (
    # (kind, lower-case needle(s), pattern, needs the _looks_like_credential check)
    ("anthropic_key", "sk-ant-", re.compile(r"sk-ant-[A-Za-z0-9_-]{20,}"), False),
    (
        "openai_key",
        "sk-",
        re.compile(r"sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
        True,  # "sk-" + 20 letters could be a long hyphenated slug; real keys carry digits
    ),
    (
        "github_token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        re.compile(r"gh[pousr]_[A-Za-z0-9]{30,}"),
        False,
    ),
    ("github_token", "github_pat_", re.compile(r"github_pat_[A-Za-z0-9_]{30,}"), False),
    ("slack_token", "xox", re.compile(r"xox[baprs]-[A-Za-z0-9-]{10,}"), False),
    ("google_api_key", "aiza", re.compile(r"AIza[0-9A-Za-z_-]{30,}"), False),
    ("stripe_key", "k_", re.compile(r"[rs]k_(?:live|test)_[0-9A-Za-z]{16,}"), False),
    (
        "aws_access_key_id",
        ("akia", "asia"),
        re.compile(r"A(?:KIA|SIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        False,
    ),
    ("jwt", "eyj", re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), False),
    # Shapes gitleaks finds only beside a label ("mailgun ... =", "telegram ... :"), or not at
    # all, while people paste them bare into a sentence.
    ("google_oauth_secret", "gocspx-", re.compile(r"GOCSPX-[A-Za-z0-9_-]{24,}"), False),
    ("mailgun_key", "key-", re.compile(r"key-[0-9a-z]{32}(?![0-9A-Za-z])"), True),
    ("telegram_bot_token", ":aa", re.compile(r"[0-9]{8,10}:AA[A-Za-z0-9_-]{33}"), False),
    (
        "discord_bot_token",
        DIGIT,
        re.compile(r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}"),
        True,
    ),
)

# A bare 40-character AWS secret access key (no label, no prefix): its alphabet, exactly that
# length, all three character classes and a random-looking spread, so that a git SHA (hex, lower
# case) or a long word is never taken.
_BARE_AWS_SECRET_RE = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")


def _check_bare_aws_secret(m: re.Match[str], text: str) -> Span | None:
    value = m.group()
    classes = (str.isupper, str.islower, str.isdigit)
    if not all(any(test(c) for c in value) for test in classes):
        return None
    if gitleaks.entropy(value) < 4.2:
        return None
    return "aws_secret_access_key", m.start(), m.end()


_AWS_SECRET_RE = re.compile(
    r"""(?ix)
    (?:aws_?secret_?(?:access_?)?key|secret_?access_?key)
    ["']?\s{0,10}(?:=>|:=|=|:)\s{0,10}["']?
    (?P<v>[A-Za-z0-9/+=]{20,})
    """
)

_BEARER_RE = re.compile(r"(?i)\bbearer\s{1,10}(?P<v>[A-Za-z0-9\-._~+/]{8,}=*)")

_AUTH_SCHEMES = "bearer|basic|token|apikey|api-key|negotiate|ntlm|aws4-hmac-sha256"
_AUTHORIZATION_RE = re.compile(
    rf"""(?ix)
    \b(?:proxy-)?authorization["']?\s{{0,10}}[:=]\s{{0,10}}["']?
    (?:
        digest\s+(?P<digest>[^\r\n]+)
      | (?:(?:{_AUTH_SCHEMES})\s+)?(?P<v>[A-Za-z0-9\-._~+/:,=]{{8,}})
    )
    """
)

# scheme://user:password@host — the password may itself contain '@', so it is greedy and the last
# '@' before the host wins; '/', '?', '#' and whitespace end the authority.
_URL_PASSWORD_RE = re.compile(r"://[^\s:/?#@]{0,200}:(?P<v>[^\s/?#]{1,200})@(?=[^\s@/?#:])")

_KEY_TERMS = (
    r"password|passwd|passphrase|secret(?:[_-]?key)?|client[_-]?secret"
    r"|api[_-]?key|apikey|token|private[_-]?key(?:[_-]?id)?"
    r"|account[_-]?key|shared[_-]?access[_-]?key"
)
# `key = value`, `"key": "value"`, `KEY=value`, `key == "value"`, `?token=value&`.
_ASSIGNMENT_RE = re.compile(
    rf"""(?ix)
    (?P<key>{_KEY_TERMS})
    ["']?[ \t]{{0,10}}(?P<sep>===?|=>|:=|=|:)[ \t]{{0,10}}
    (?:
        "(?P<dq>[^"\r\n]{{0,512}})"
      | '(?P<sq>[^'\r\n]{{0,512}})'
      | ["']?(?P<bare>[^\s"',;&]{{1,512}})
    )
    """
)

_LABEL_VALUE_RE = re.compile(rf"(?i)^(?:{_KEY_TERMS})\W*$")
_SECRET_KEY_RE = re.compile(rf"(?i)^[A-Za-z0-9_.-]{{0,40}}?(?:{_KEY_TERMS})$")


def is_secret_key(name: str) -> bool:
    """True if a field or variable called `name` holds a secret (`password`, `DB_PASSWORD`...)."""
    return bool(_SECRET_KEY_RE.match(name))


def secret_kind(key: str) -> str:
    """The kind a secret stored under the field `key` is reported as."""
    key = key.lower()
    if "pass" in key:
        return "password"
    if "api" in key:
        return "api_key"
    if "token" in key:
        return "token"
    return "secret"


def _trim_closers(value: str) -> str:
    """Drop trailing brackets that close something opened before the value (`{password=x}`)."""
    pairs = {")": "(", "]": "[", "}": "{", ">": "<"}
    while value and value[-1] in pairs and value.count(value[-1]) > value.count(pairs[value[-1]]):
        value = value[:-1]
    return value


def _glued(text: str, pos: int) -> bool:
    """True if the character before `pos` continues an identifier (so no token starts here)."""
    # '-' deliberately does not glue: a PEM block ends in "-----", and a token right after one
    # must be found both before and after the block is redacted (idempotency).
    return pos > 0 and (text[pos - 1].isalnum() or text[pos - 1] == "_")


# A checker turns a regex match into the span to redact, or None to reject the match.
Checker = Callable[[re.Match[str], str], Span | None]


def _whole(kind: str) -> Checker:
    return lambda m, text: (kind, m.start(), m.end())


def _value(kind: str) -> Checker:
    return lambda m, text: (kind, m.start("v"), m.end("v"))


def _check_prefixed(kind: str, credential_check: bool) -> Checker:
    def check(m: re.Match[str], text: str) -> Span | None:
        if _glued(text, m.start()):
            return None
        if credential_check and not _looks_like_credential(m.group()):
            return None
        return kind, m.start(), m.end()

    return check


def _check_bearer(m: re.Match[str], text: str) -> Span | None:
    if not _looks_like_credential(m.group("v")):
        return None
    return "bearer_token", m.start("v"), m.end("v")


def _check_authorization(m: re.Match[str], text: str) -> Span | None:
    if m.group("digest") is not None:
        value, start = m.group("digest").rstrip(), m.start("digest")
    else:
        value, start = m.group("v"), m.start("v")
        # A bare scheme word ("Authorization: Bearer") is not a credential; prose such as
        # "authorization: required" is filtered by the credential heuristic.
        if not _looks_like_credential(value):
            return None
    if is_placeholder(value):
        return None
    return "authorization", start, start + len(value)


def _check_url_password(m: re.Match[str], text: str) -> Span | None:
    if m.group("v").startswith(MARKER_PREFIX):
        return None
    return "url_password", m.start("v"), m.end("v")


def _check_assignment(m: re.Match[str], text: str) -> Span | None:
    kind = secret_kind(m.group("key"))
    group = m.lastgroup or "bare"  # the value alternatives close last, so this names the one hit
    value, start = m.group(group), m.start(group)
    if group == "bare":
        value = _trim_closers(value)
    if is_placeholder(value) or _LABEL_VALUE_RE.match(value):
        return None  # a repeated label ("password: password: x"): the value follows the next one
    # `key: value` is also how prose introduces things ("Token: a unit of text"): for labels
    # other than passwords, require the value to look machine-generated.
    if (
        m.group("sep") == ":"
        and group == "bare"
        and kind != "password"
        and not _looks_like_credential(value)
    ):
        return None
    return kind, start, start + len(value)


# (needles, pattern, checker). A detector runs only if one of its lower-case needles occurs in
# the text (one Aho-Corasick pass finds them all; the pseudo-needles DIGIT and DIGITS: the text
# holds a digit, two in a row), so ordinary prose costs little. Order matters only for ties when
# two detectors report the same span: the first one names it, so memcli's own kinds keep their
# names where gitleaks' rules find them too.
Detector = tuple[tuple[str, ...], Any, Checker]
_PSEUDO = {DIGIT: re.compile(r"[0-9]"), DIGITS: re.compile(r"[0-9]{2}")}
_OWN: tuple[Detector, ...] = (
    (("<private",), _PRIVATE_RE, _whole("private")),
    (("-----begin",), _PEM_RE, _whole("private_key")),
    *(
        (needle if isinstance(needle, tuple) else (needle,), pattern, _check_prefixed(kind, check))
        for kind, needle, pattern, check in _PREFIXED
    ),
    ((DIGIT,), _BARE_AWS_SECRET_RE, _check_bare_aws_secret),
    (("secret",), _AWS_SECRET_RE, _value("aws_secret_access_key")),
    (("bearer",), _BEARER_RE, _check_bearer),
    (("authorization",), _AUTHORIZATION_RE, _check_authorization),
    (("://",), _URL_PASSWORD_RE, _check_url_password),
    (("pass", "secret", "key", "token"), _ASSIGNMENT_RE, _check_assignment),
    (phrases.NEEDLES, phrases.PATTERN, phrases.check),
    *identifiers.DETECTORS,
)


@cache
def _detectors() -> tuple[
    tuple[Detector, ...], Any, tuple[tuple[re.Pattern[str], tuple[int, ...]], ...]
]:
    """Every detector (memcli's own, then gitleaks' rules), an automaton mapping each needle to
    the detectors it wakes, and the detectors each pseudo-needle wakes. Built on the first
    redaction."""
    rules, common = gitleaks.rules()
    found: tuple[Detector, ...] = (
        *_OWN,
        *((r.keywords, r.pattern, partial(_check_rule, r, common)) for r in rules),
    )
    wakes: dict[str, list[int]] = {}
    for order, (needles, _, _) in enumerate(found):
        for needle in needles:
            wakes.setdefault(needle, []).append(order)
    pseudo = tuple((test, tuple(wakes.pop(needle, ()))) for needle, test in _PSEUDO.items())
    # with the rules, on the first redaction: off every command's start-up
    import ahocorasick_rs  # noqa: PLC0415

    automaton = ahocorasick_rs.AhoCorasick(list(wakes))
    return found, (automaton, tuple(tuple(orders) for orders in wakes.values())), pseudo


def _check_rule(rule: gitleaks.Rule, common: Any, m: Any, text: str) -> Span | None:
    return rule.span(m, text, common)


class _Markers:
    """The `[REDACTED:...]` markers already in a text, for fast overlap tests."""

    def __init__(self, text: str) -> None:
        found = [m.span() for m in _MARKER_RE.finditer(text)] if MARKER_PREFIX in text else []
        self.starts = [start for start, _ in found]
        self.ends = [end for _, end in found]

    def touch(self, start: int, end: int) -> bool:
        # Markers do not overlap, so their ends are sorted too.
        i = bisect_right(self.ends, start)
        return i < len(self.starts) and self.starts[i] < end


def _detect(
    pattern: re.Pattern[str], check: Checker, text: str, markers: _Markers
) -> Iterator[Span]:
    """Like `finditer`, except that a rejected match consumes nothing.

    With plain `finditer`, a rejected match would hide a real secret starting inside it, and that
    secret would then surface on a second run once redaction shortened the text around it.
    A detection touching one of our own markers is rejected: it is a re-run on redacted output
    (the marker already stands for the secret), and redacting again would break idempotency.
    """
    pos = 0
    while pos <= len(text):
        m = pattern.search(text, pos)
        if m is None:
            return
        span = check(m, text)
        if span is None or span[2] <= span[1] or markers.touch(span[1], span[2]):
            pos = m.start() + 1
        else:
            yield span
            # On from the span's end: a card number shorter than its match may be followed by
            # another one inside the match ("<card>-<card>").
            pos = max(span[2], m.start() + 1)


def _merge(spans: list[tuple[int, int, int, str]]) -> list[tuple[int, int, str]]:
    """Union overlapping spans: a partial overlap must never leave part of a secret behind.

    Input tuples are (start, end, detector order, kind); the merged span keeps the kind of the
    span that starts first (longest, then earliest detector, on ties).
    """
    spans.sort(key=lambda s: (s[0], -s[1], s[2]))
    merged: list[tuple[int, int, str]] = []
    for start, end, _, kind in spans:
        if merged and start < merged[-1][1]:
            prev_start, prev_end, prev_kind = merged[-1]
            merged[-1] = (prev_start, max(prev_end, end), prev_kind)
        else:
            merged.append((start, end, kind))
    return merged


def _spans(text: str) -> list[tuple[int, int, str]]:
    detectors, (automaton, wakes), pseudo = _detectors()
    woken: set[int] = set()
    # Overlapping: "sk" inside "sk_live_" must wake its rules as well as "sk_live_" does.
    for needle in {i for i, _, _ in automaton.find_matches_as_indexes(text.lower(), True)}:
        woken.update(wakes[needle])
    for test, orders in pseudo:
        if test.search(text):
            woken.update(orders)
    if not woken:
        return []
    markers = _Markers(text)
    found: list[tuple[int, int, int, str]] = []
    for order in sorted(woken):
        _, pattern, check = detectors[order]
        for kind, start, end in _detect(pattern, check, text, markers):
            found.append((start, end, order, kind))
    return _merge(found)


def redact(text: str) -> Redaction:
    """Replace every detected secret in `text` with `[REDACTED:<kind>]`.

    Findings hold positions in the original `text`, sorted by position.
    """
    spans = _spans(text)
    if not spans:
        return Redaction(text, ())
    parts: list[str] = []
    findings: list[Finding] = []
    pos = 0
    for start, end, kind in spans:
        parts.append(text[pos:start])
        parts.append(marker(kind))
        findings.append(Finding(kind, start, end))
        pos = end
    parts.append(text[pos:])
    return Redaction("".join(parts), tuple(findings))
