"""Secret redaction applied to everything before it is stored.

A memory file outlives the session that wrote it and is easy to copy around, so ingest must never
persist credentials. `redact()` finds secrets with a set of narrow, prefix- or label-anchored
patterns (false positives on prose, UUIDs, git SHAs and plain URLs cost recall, so every pattern
needs a distinctive anchor) and replaces each with `[REDACTED:<kind>]`. A `Finding` records only the
kind and the position in the original text, never the secret itself, so findings can be logged and
stored safely.

Redaction is idempotent: running it on its own output changes nothing, because every detector
skips a value that already is a `[REDACTED:...]` marker.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Finding",
    "Redaction",
    "redact",
    "redact_json",
    "is_secret_key",
    "MARKER_PREFIX",
]

MARKER_PREFIX = "[REDACTED:"


@dataclass(frozen=True, slots=True)
class Finding:
    """One redacted secret: its kind and `[start, end)` in the original string.

    `path` is empty for `redact()`; `redact_json()` sets it to the JSON path (dict keys and list
    indexes) of the string the positions refer to.
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

_MARKER_RE = re.compile(r"\[REDACTED:[a-z_]+\]")


def _marker(kind: str) -> str:
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


def _is_placeholder(value: str) -> bool:
    return not value or bool(_PLACEHOLDER_RE.match(value))


# --- detectors -----------------------------------------------------------------------------------
# Each detector yields (kind, start, end) spans of the secret part only (labels, schemes, user
# names and hosts stay readable). Overlapping spans are merged afterwards, so detectors may overlap.

Span = tuple[str, int, int]

# Bounded repetition ({0,40}, {8,512}) keeps every pattern linear on adversarial input.
_PRIVATE_RE = re.compile(
    r"<private\b[^>]{0,200}>.*?(?:</private\s*>|\Z)", re.IGNORECASE | re.DOTALL
)

_PEM_RE = re.compile(
    r"-----BEGIN[ A-Z0-9]{0,40} PRIVATE KEY(?: BLOCK)?-----"
    r".*?(?:-----END[ A-Z0-9]{0,40} PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)

# Fixed-prefix token formats: (kind, pattern, needs the _looks_like_credential check). Patterns
# start with their literal prefix, which lets `re` skip ahead quickly; the "not glued to a longer
# identifier" check is done in code because a leading lookbehind would disable that fast path.
_PREFIXED: tuple[tuple[str, str, re.Pattern[str], bool], ...] = (
    # (kind, lower-case needle, pattern, needs the _looks_like_credential check)
    ("anthropic_key", "sk-ant-", re.compile(r"sk-ant-[A-Za-z0-9_-]{20,}"), False),
    (
        "openai_key",
        "sk-",
        re.compile(r"sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
        True,  # "sk-" + 20 letters could be a long hyphenated slug; real keys carry digits
    ),
    ("github_token", "gh", re.compile(r"gh[pousr]_[A-Za-z0-9]{30,}"), False),
    ("github_token", "github_pat_", re.compile(r"github_pat_[A-Za-z0-9_]{30,}"), False),
    ("slack_token", "xox", re.compile(r"xox[baprs]-[A-Za-z0-9-]{10,}"), False),
    ("google_api_key", "aiza", re.compile(r"AIza[0-9A-Za-z_-]{30,}"), False),
    ("stripe_key", "k_", re.compile(r"[rs]k_(?:live|test)_[0-9A-Za-z]{16,}"), False),
    ("aws_access_key_id", "a", re.compile(r"A(?:KIA|SIA)[A-Z0-9]{16}(?![A-Za-z0-9])"), False),
    ("jwt", "eyj", re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), False),
)

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
    r"|api[_-]?key|apikey|token|private[_-]?key"
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

_SECRET_KEY_RE = re.compile(rf"(?i)^[A-Za-z0-9_.-]{{0,40}}?(?:{_KEY_TERMS})$")


def is_secret_key(name: str) -> bool:
    """True if a field or variable called `name` holds a secret (`password`, `DB_PASSWORD`...)."""
    return bool(_SECRET_KEY_RE.match(name))


def _kind_for_key(key: str) -> str:
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


def _find_private(text: str) -> Iterator[Span]:
    for m in _PRIVATE_RE.finditer(text):
        yield "private", m.start(), m.end()


def _find_pem(text: str) -> Iterator[Span]:
    for m in _PEM_RE.finditer(text):
        yield "private_key", m.start(), m.end()


def _glued(text: str, pos: int) -> bool:
    """True if the character before `pos` continues an identifier (so no token starts here)."""
    return pos > 0 and (text[pos - 1].isalnum() or text[pos - 1] in "_-")


def _prefixed_detector(
    kind: str, pattern: re.Pattern[str], check: bool
) -> Callable[[str], Iterator[Span]]:
    def detect(text: str) -> Iterator[Span]:
        for m in pattern.finditer(text):
            if not _glued(text, m.start()) and (not check or _looks_like_credential(m.group())):
                yield kind, m.start(), m.end()

    return detect


def _find_aws_secret(text: str) -> Iterator[Span]:
    for m in _AWS_SECRET_RE.finditer(text):
        yield "aws_secret_access_key", m.start("v"), m.end("v")


def _find_bearer(text: str) -> Iterator[Span]:
    for m in _BEARER_RE.finditer(text):
        if _looks_like_credential(m.group("v")):
            yield "bearer_token", m.start("v"), m.end("v")


def _find_authorization(text: str) -> Iterator[Span]:
    for m in _AUTHORIZATION_RE.finditer(text):
        if m.group("digest") is not None:
            value, start = m.group("digest").rstrip(), m.start("digest")
        else:
            value, start = m.group("v"), m.start("v")
            # A bare scheme word ("Authorization: Bearer") is not a credential; prose such as
            # "authorization: required" is filtered by the credential heuristic.
            if not _looks_like_credential(value):
                continue
        if not _is_placeholder(value):
            yield "authorization", start, start + len(value)


def _find_url_password(text: str) -> Iterator[Span]:
    for m in _URL_PASSWORD_RE.finditer(text):
        if not m.group("v").startswith(MARKER_PREFIX):
            yield "url_password", m.start("v"), m.end("v")


def _find_assignments(text: str) -> Iterator[Span]:
    for m in _ASSIGNMENT_RE.finditer(text):
        kind = _kind_for_key(m.group("key"))
        group = (
            m.lastgroup or "bare"
        )  # the value alternatives close last, so this names the one hit
        value, start = m.group(group), m.start(group)
        if group == "bare":
            value = _trim_closers(value)
        if _is_placeholder(value):
            continue
        # `key: value` is also how prose introduces things ("Token: a unit of text"): for labels
        # other than passwords, require the value to look machine-generated.
        if (
            m.group("sep") == ":"
            and group == "bare"
            and kind != "password"
            and not _looks_like_credential(value)
        ):
            continue
        yield kind, start, start + len(value)


# (needles, detector): a detector runs only if one of its lower-case needles occurs in the text,
# a substring test that is far cheaper than a regex scan, so ordinary prose costs little.
# Order matters only for ties when two detectors report the same span: the first one names it.
_DETECTORS: tuple[tuple[tuple[str, ...], Callable[[str], Iterator[Span]]], ...] = (
    (("<private",), _find_private),
    (("-----begin",), _find_pem),
    *(
        ((needle,), _prefixed_detector(kind, pattern, check))
        for kind, needle, pattern, check in _PREFIXED
    ),
    (("secret",), _find_aws_secret),
    (("bearer",), _find_bearer),
    (("authorization",), _find_authorization),
    (("://",), _find_url_password),
    (("pass", "secret", "key", "token"), _find_assignments),
)


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
    markers = [(m.start(), m.end()) for m in _MARKER_RE.finditer(text)]
    found: list[tuple[int, int, int, str]] = []
    lowered = text.lower()
    for order, (needles, detector) in enumerate(_DETECTORS):
        if not any(needle in lowered for needle in needles):
            continue
        for kind, start, end in detector(text):
            if end <= start:
                continue
            # A span touching one of our own markers is a re-run on redacted output (the marker
            # already stands for the secret): redacting again would break idempotency.
            if any(start < me and ms < end for ms, me in markers):
                continue
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
        parts.append(_marker(kind))
        findings.append(Finding(kind, start, end))
        pos = end
    parts.append(text[pos:])
    return Redaction("".join(parts), tuple(findings))


def redact_json(value: Any) -> tuple[Any, tuple[Finding, ...]]:
    """Redact every string inside a JSON-like value (dicts, lists, tuples, scalars).

    Returns a new value (the input is not modified) and all findings, each with `path` set to the
    location of its string. A string stored under a secret-looking key (`"password"`,
    `"api_key"`, `"GITHUB_TOKEN"`...) is redacted whole, since the key already says what it is.
    Dict keys themselves are kept as they are. Non-string scalars pass through unchanged.
    """
    findings: list[Finding] = []

    def walk(node: Any, path: tuple[str | int, ...], key: str | None) -> Any:
        if isinstance(node, str):
            if key is not None and is_secret_key(key) and not _is_placeholder(node):
                kind = _kind_for_key(key)
                findings.append(Finding(kind, 0, len(node), path))
                return _marker(kind)
            result = redact(node)
            findings.extend(Finding(f.kind, f.start, f.end, path) for f in result.findings)
            return result.text
        if isinstance(node, dict):
            return {
                k: walk(v, (*path, k), k if isinstance(k, str) else None) for k, v in node.items()
            }
        if isinstance(node, list | tuple):
            items = [walk(v, (*path, i), None) for i, v in enumerate(node)]
            return items if isinstance(node, list) else tuple(items)
        return node

    return walk(value, (), None), tuple(findings)
