"""The one redaction path every write goes through: `redact_record()` over whole records.

`memcli.policy.secrets` finds secrets in one string; this module walks a record (any JSON-like
value:
dicts, lists, tuples, scalars) and redacts every string in it, dict KEYS included, nested at any
depth. Whatever a caller hands to a write is therefore redacted as a whole, not field by field,
so a secret in a tag, a ref object, a checkpoint key or a decision's alternative is caught the same
way as one in the text.

Where it is called (the choke points; a new writer, e.g. import or a daemon, calls the same
functions on its input before it writes):

- At the library's write boundary, before anything is derived from the input (content hash,
  chunks, entities, embeddings, memory text, history): `ingest.prepare` (`redact_event`),
  `ledger.add_decision` / `supersede_decision` / `add_task` / `update_task` / `save_checkpoint`,
  `lifecycle.remember.remember`, and `lifecycle.proposals.propose` / `reject`.
- In the derived-memory writer `writer.write_memory` (content, attributes, sources) and
  `writer.supersede` (reason): every memory a model produced (consolidation facts and summaries,
  reflections, insights, compaction summaries) is written there, so model text is redacted even
  if a model reconstructs a secret. The model text of a consolidation plan that lands elsewhere
  (merge history, the session summary, proposals, the failure reason) is redacted once when the
  plan is applied (`consolidate_apply._redact_plan`).

The store layer stays free of it (imports flow library -> store): it writes what it is given.
`tests/policy/test_secrets.py` plants secrets through every write command and reads the raw bytes of
the database, its WAL and the artifacts.

Redaction is idempotent (markers are never re-redacted), so a value that crosses two choke points
comes out the same as after one. Scope ids (tenant, user, agent, session, app, run, event and
actor ids) are deliberately NOT rewritten: they are keys that rows are found and isolated by, and
rewriting one would silently merge two scopes. Everything else a record carries is text and is
redacted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from memcli.errors import UsageError
from memcli.policy.encryption import PREFIX as SEALED_PREFIX
from memcli.policy.secrets import (
    Finding,
    is_placeholder,
    is_secret_key,
    marker,
    redact,
    secret_kind,
)

if TYPE_CHECKING:
    from memcli.core.records import EventIn

__all__ = ["kinds", "redact_event", "redact_fields", "redact_record", "redact_text"]

Path = tuple[str | int, ...]

# A value `high` sensitivity sealed (memcli.policy.encryption): `enc:v1:<key id>:<base64>`. Its
# base64 is ciphertext, where a 40-character run of the AWS key alphabet or a token-like shape
# occurs by chance; an import carries such values through the same redaction, which must leave
# them as they are (a changed byte would make the value unreadable).
_SEALED_RE = re.compile(rf"{re.escape(SEALED_PREFIX)}[0-9a-f]{{12}}:[A-Za-z0-9+/]{{36,}}={{0,2}}")


def redact_record(value: Any) -> tuple[Any, tuple[Finding, ...]]:
    """Redact every string inside a JSON-like value, dict keys included.

    Returns a new value (the input is not modified) and the findings. A finding's `path` holds the
    REDACTED keys leading to its string (so findings never carry a secret and are safe to log or
    store); a finding in a key has the key's own path. A string under a secret-looking key
    (`"password"`, `"api_key"`, `"GITHUB_TOKEN"`...) is redacted whole, since the key says what it
    is; list items inherit their list's key; numbers under password keys become the marker too.
    Other non-string scalars pass through unchanged. Two keys that redact to the same marker are
    kept apart with a `#2`, `#3` suffix, so no value is lost.
    """
    findings: list[Finding] = []

    def text(node: str, path: Path) -> str:
        if node.startswith(SEALED_PREFIX) and _SEALED_RE.fullmatch(node):
            return node
        result = redact(node)
        findings.extend(Finding(f.kind, f.start, f.end, path) for f in result.findings)
        return result.text

    def walk(node: Any, path: Path, key: str | None) -> Any:
        if isinstance(node, str):
            if key is not None and is_secret_key(key) and not is_placeholder(node):
                kind = secret_kind(key)
                findings.append(Finding(kind, 0, len(node), path))
                return marker(kind)
            return text(node, path)
        if isinstance(node, dict):
            out: dict[Any, Any] = {}
            for k, v in node.items():
                new_key = k
                if isinstance(k, str):
                    before = len(findings)
                    new_key = text(k, ())
                    if new_key != k:
                        new_key = _unique(new_key, out, node)
                        # Point the key's findings at its redacted name, never the secret.
                        findings[before:] = [_at(f, (*path, new_key)) for f in findings[before:]]
                sub = (*path, new_key if isinstance(new_key, str | int) else str(new_key))
                out[new_key] = walk(v, sub, k if isinstance(k, str) else None)
            return out
        if isinstance(node, list | tuple):
            items = [walk(v, (*path, i), key) for i, v in enumerate(node)]
            return items if isinstance(node, list) else tuple(items)
        if (
            key is not None
            and isinstance(node, int | float)
            and not isinstance(node, bool)
            and is_secret_key(key)
            and secret_kind(key) == "password"
        ):
            # A numeric PIN or password must not survive just because it was not quoted. Only
            # password keys: "max_token": 512 is a setting, not a secret.
            findings.append(Finding("password", 0, len(str(node)), path))
            return marker("password")
        return node

    return walk(value, (), None), tuple(findings)


def _at(finding: Finding, path: Path) -> Finding:
    return Finding(finding.kind, finding.start, finding.end, path)


def _unique(key: str, done: dict[Any, Any], original: dict[Any, Any]) -> str:
    """`key`, or `key#2`, `key#3`...: free among the keys written so far and the keys still to
    come (which keep their names), so no value overwrites another."""
    candidate, n = key, 1
    while candidate in done or candidate in original:
        n += 1
        candidate = f"{key}#{n}"
    return candidate


def kinds(findings: Iterable[Finding]) -> list[str]:
    """The distinct kinds of `findings`, sorted: what a command reports as `redacted`."""
    return sorted({f.kind for f in findings})


def redact_text(value: str) -> tuple[str, list[str]]:
    """One string: its redacted text and the kinds removed."""
    result = redact(value)
    return result.text, kinds(result.findings)


def redact_fields(
    record: dict[str, Any], fields: Iterable[str]
) -> tuple[dict[str, Any], list[str]]:
    """A copy of `record` with the named fields redacted (the others, e.g. scope ids, as they
    are), and the kinds removed."""
    out = dict(record)
    found: list[Finding] = []
    for name in fields:
        if name in out:
            out[name], hits = redact_record(out[name])
            found.extend(hits)
    return out, kinds(found)


def redact_event(rec: EventIn) -> tuple[EventIn, list[str]]:
    """An ingest record with every text field redacted: content (keys and values), tags, refs
    (strings and objects) and category. Ids and enumerated fields stay as they are."""
    fields = {"content": rec.content, "tags": rec.tags, "refs": rec.refs, "category": rec.category}
    clean, found = redact_fields(fields, fields)
    if not found:
        return rec, []
    return rec.model_copy(update=clean), found


SENSITIVITIES = ("none", "low", "high")  # secret is never stored


def check_sensitivity(value: str) -> None:
    """A usage error for a sensitivity a write may not carry (`secret` is never stored)."""
    if value == "secret":
        raise UsageError("secret content is never stored", "leave the secret out")
    if value not in SENSITIVITIES:
        raise UsageError(f"unknown sensitivity {value!r}", "use none, low or high")
