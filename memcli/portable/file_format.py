"""The export file format, `memcli-export` version 1: one JSON object per line.

Line 1 is the header; every other line is one record `{"record": KIND, <fields>}`. Records come
grouped by kind in `KINDS` order, each group sorted by its stable key (see
memcli/store/portable_sql.py), each object's fields in `SPECS` order (JSON values keep the key order
they have at rest), so the same database always gives the same bytes (the header has no export
timestamp on purpose).

Nothing in a record is specific to SQLite: no rowids as identity (an event is its `event_id`,
a memory its `id` label plus its natural key, see memcli/portable/importer.py), no event `seq`
(a memory points at its event by `event_id`; a consolidation's progress is the `event_id` it
reached), JSON columns as JSON values (not JSON text), binary artifact bodies as base64.
A value stored encrypted (`high` items, `enc:v1:...`) is exported as that ciphertext string,
in place of the text or JSON value it seals.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from memcli.core import inputs
from memcli.core.progress import Progress, report
from memcli.core.roles import canonical_role
from memcli.errors import UsageError
from memcli.policy.encryption import PREFIX, envelope_key_id, is_encrypted

FORMAT = "memcli-export"
# The key naming a line's record kind ("kind" is a field of events, memories and relations).
RECORD = "record"
VERSION = 1

# Column kinds: text, integer, real number, JSON value (or a ciphertext string); `?`: nullable.
T, T0, N, N0, R, J, J0 = "t", "t?", "i", "i?", "r", "j", "j?"

_SCOPE = {"tenant_id": T, "user_id": T0, "agent_id": T0, "session_id": T0, "app_id": T0,
          "run_id": T0}

# kind -> {field: column kind}, in the order the kinds are written.
SPECS: dict[str, dict[str, str]] = {
    "event": {
        "event_id": T, "ts": T, "recorded_at": T, **_SCOPE, "channel": T, "actor_type": T,
        "actor_id": T0, "kind": T, "sensitivity": T, "tags": J, "content": J, "refs": J,
        "content_hash": T, "redactions": J,
    },
    "memory": {
        "id": N, "kind": T, "category": T0, "content": T, **_SCOPE, "channel": T,
        "sensitivity": T, "actor_type": T0, "actor_id": T0, "event_id": T0, "chunk_index": N,
        "token_count": N, "importance": R, "pinned": N, "confidence": R, "decay_rate": R,
        "access_count": N, "last_accessed": T0, "event_time": T, "created_at": T,
        "updated_at": T, "valid_from": T0, "valid_to": T0, "state": T, "purge_at": T0,
        "source_ids": J, "attributes": J, "history": "history",
    },
    "decision": {
        "id": N, "memory_id": N0, "tenant_id": T, "user_id": T0, "session_id": T0,
        "agent_id": T0, "app_id": T0, "status": T, "scope": T, "decision": T, "rationale": J,
        "constraints": J, "alternatives": J, "consequences": J, "refs": J, "supersedes": N0,
        "superseded_by": N0, "created_at": T, "updated_at": T,
    },
    "task": {
        "id": N, "memory_id": N0, "tenant_id": T, "user_id": T0, "session_id": T0,
        "agent_id": T0, "app_id": T0, "status": T, "title": T, "details": T, "refs": J,
        "created_at": T, "updated_at": T,
    },
    "checkpoint": {
        "tenant_id": T, "user_id": T, "thread_id": T, "data": J, "sensitivity": T,
        "version": N, "created_at": T, "updated_at": T,
    },
    "relation": {"src_id": N, "dst_id": N, "kind": T, "strength": R, "created_at": T},
    "proposal": {
        "id": N, "tenant_id": T, "user_id": T0, "field": T, "value": T, "text": T,
        "old_memory_id": N0, "old_text": T0, "session_id": T0, "source_ids": J, "origin": T,
        "status": T, "created_at": T, "expires_at": T, "decided_at": T0, "decided_by": T0,
        "memory_id": N0, "reason": T0,
    },
    "artifact": {
        "artifact_id": T, "event_id": T, "mime": T, "bytes": N, "sha256": T, "body": T,
        "body_encoding": T, "created_at": T,
    },
    "session": {
        "tenant_id": T, "session_id": T, "user_id": T0, "started_at": T, "last_event_at": T,
        "event_count": N, "consolidated_at": T0, "summary": J0,
    },
    "consolidation": {
        "tenant_id": T, "session_id": T, "last_event_id": T0, "method": T0,
        "consolidated_at": T0, "failures": N, "last_error": T0,
    },
}
HISTORY: dict[str, str] = {
    "event_id": T0, "op": T, "old_ref": T0, "new_ref": T0, "actor": T, "tenant_id": T0,
    "user_id": T0, "session_id": T0, "meta": J, "ts": T,
}
KINDS = tuple(SPECS)
# JSON columns their writers store with ensure_ascii (the others keep non-ASCII as is): the
# import writes them back the same way, so the imported file holds the same text.
ASCII_JSON = {("event", "redactions"), ("history", "meta")}
# Fields that are keys (ids, hashes, scope), never text to redact (memcli.policy.redaction leaves
# scope ids
# alone for the same reason: rewriting one would merge two scopes).
KEY_FIELDS = {"id", "event_id", "tenant_id", "user_id", "agent_id", "session_id", "app_id",
              "run_id", "actor_id", "content_hash", "artifact_id", "sha256", "thread_id",
              "memory_id", "old_memory_id", "src_id", "dst_id", "supersedes", "superseded_by",
              "last_event_id", "body_encoding"}


class FormatError(UsageError):
    """A line of an export file that cannot be loaded (exit 2, nothing loaded)."""

    def __init__(self, line: int, what: str) -> None:
        super().__init__(f"line {line}: {what}", "nothing was imported; fix or re-export the file")


def header(*, memcli_version: str, schema: int, embedder: str | None, sparse: str | None,
           key_id: str | None, scope: dict[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "memcli": memcli_version, "schema": schema,
            "embedder": embedder, "sparse": sparse, "key_id": key_id, "scope": scope,
            "kinds": list(KINDS)}


def dumps(obj: dict[str, Any]) -> str:
    """One line of the file: fields in the order given, non-ASCII kept."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


# -- database value <-> file value ---------------------------------------------------------------
def from_column(kind: str, value: Any) -> Any:
    """A stored column value as it goes in the file (JSON text parsed; ciphertext kept)."""
    if kind in (J, J0) and isinstance(value, str) and not is_encrypted(value):
        try:
            return json.loads(value)
        except ValueError:
            return value  # not JSON at rest: carried as the string it is
    return value


def to_column(owner: str, field: str, kind: str, value: Any) -> Any:
    """A file value as it is stored (JSON values back to JSON text; ciphertext kept; an
    actor type in one vocabulary, as schema 8 stores it: an older export's `user` is `human`)."""
    if field == "actor_type" and isinstance(value, str):
        return canonical_role(value)
    if kind in (J, J0) and not (value is None and kind == J0) and not is_encrypted(value):
        return json.dumps(value, ensure_ascii=(owner, field) in ASCII_JSON)
    return value


# -- validation -----------------------------------------------------------------------------------
def _check(fields: dict[str, str], obj: dict[str, Any], line: int, where: str) -> None:
    missing = [f for f in fields if f not in obj]
    if missing:
        raise FormatError(line, f"{where} lacks field {missing[0]!r}")
    extra = sorted(set(obj) - set(fields))
    if extra:
        raise FormatError(line, f"{where} has an unknown field {extra[0]!r}")
    for name, kind in fields.items():
        value = obj[name]
        if kind == "history":
            if not isinstance(value, list):
                raise FormatError(line, f"{where}.history must be a list")
            for item in value:
                if not isinstance(item, dict):
                    raise FormatError(line, f"{where}.history items must be objects")
                _check(HISTORY, item, line, f"{where}.history")
            continue
        if value is None and (kind.endswith("?") or kind == J):
            if kind == J:
                raise FormatError(line, f"{where}.{name} must not be null")
            continue
        ok = {
            "t": isinstance(value, str),
            "i": isinstance(value, int) and not isinstance(value, bool),
            "r": isinstance(value, int | float) and not isinstance(value, bool),
            "j": True,
        }[kind[0]]
        if not ok:
            raise FormatError(line, f"{where}.{name} has the wrong type")


def parse_header(text: str) -> dict[str, Any]:
    try:
        head = json.loads(text)
    except ValueError as exc:
        raise FormatError(1, f"not a memcli export header ({exc})".splitlines()[0]) from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise FormatError(1, f"not a memcli export header (no \"format\": \"{FORMAT}\")")
    if head.get("version") != VERSION:
        raise FormatError(1, f"unknown format version {head.get('version')!r} "
                             f"(this memcli reads version {VERSION})")
    return head


def parse_record(text: str, line: int) -> dict[str, Any]:
    """One record line, checked against its kind's fields (FormatError names the line)."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise FormatError(line, f"invalid JSON ({exc})".splitlines()[0]) from None
    except RecursionError:
        raise FormatError(line, "nested too deeply") from None
    if not isinstance(obj, dict):
        raise FormatError(line, "a record must be a JSON object")
    kind = obj.pop(RECORD, None)
    if kind not in SPECS:
        raise FormatError(line, f"unknown record kind {kind!r}")
    # inputs.problem walks every value (depth, lone surrogates from `\ud800` escapes): only
    # for a line that could hold either (bracket count bounds the depth), a 5x faster import.
    deep = text.count("{") + text.count("[") > inputs.MAX_DEPTH
    if deep or "\\ud" in text or "\\uD" in text:
        problem = inputs.problem(obj)
        if problem is not None:
            raise FormatError(line, problem)
    _check(SPECS[kind], obj, line, kind)
    if kind == "artifact":
        _check_body(obj, line)
    obj[RECORD] = kind
    return obj


def _check_body(obj: dict[str, Any], line: int) -> None:
    encoding = obj["body_encoding"]
    if encoding not in ("utf-8", "base64", "text"):
        raise FormatError(line, f"artifact.body_encoding {encoding!r} is not utf-8, base64 or text")
    if encoding == "base64":
        try:
            base64.b64decode(obj["body"], validate=True)
        except (binascii.Error, ValueError):
            raise FormatError(line, "artifact.body is not base64") from None


# -- a whole file -------------------------------------------------------------------------------
Record = dict[str, Any]
_NUMBERED = ("memory", "decision", "task", "proposal")


def parse(text: str, progress: Progress | None = None
          ) -> tuple[dict[str, Any], list[tuple[int, Record]]]:
    """The header and (line number, record) of every record line; FormatError on the first
    bad line. Lines end at "\\n" only (a record may hold U+2028 and the like unescaped)."""
    lines = text.split("\n")
    if lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:]
    if not lines or not lines[0].strip():
        raise FormatError(1, "empty file: no memcli export header")
    head = parse_header(lines[0])
    out: list[tuple[int, Record]] = []
    numbered: set[tuple[str, int]] = set()  # ids are labels references use: one each
    key_id = head.get("key_id")
    for number, line in enumerate(lines[1:], start=2):
        if number % 256 == 0:
            report(progress, "checking", number, len(lines))
        line = line.rstrip("\r")
        if not line.strip():
            continue
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # bytes that were not UTF-8 (read with surrogateescape)
            raise FormatError(number, "not UTF-8") from None
        rec = parse_record(line, number)
        for value in _strings(rec) if PREFIX in line else ():
            if is_encrypted(value) and envelope_key_id(value) != key_id:
                raise FormatError(number, f"a value sealed with key {envelope_key_id(value)}"
                                              f", not the header's key_id {key_id!r}")
        ident = rec.get("id") if rec[RECORD] in _NUMBERED else None
        if ident is not None:
            if (rec[RECORD], ident) in numbered:
                raise FormatError(number, f"a second {rec[RECORD]} with id {ident}")
            numbered.add((rec[RECORD], ident))
        out.append((number, rec))
    report(progress, "checking", len(lines), len(lines))
    return head, out


def _strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
