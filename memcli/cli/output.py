"""The CLI's single place for output, input and errors.

stdout carries only the payload (JSON when piped, a rich table on a terminal); warnings and
errors go to stderr as `memcli: error: <what> (<hint>)`; exit codes: 0 ok, 1 runtime error,
2 usage/bad input, 75 database busy.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any

from memcli.errors import MemcliError, UsageError


class Format(StrEnum):
    json = "json"
    jsonl = "jsonl"
    text = "text"


def resolve_format(fmt: Format | None, as_json: bool) -> Format:
    if as_json:
        return Format.json
    if fmt is not None:
        return fmt
    return Format.text if sys.stdout.isatty() else Format.json


# Every character str.splitlines() breaks a line at (and the other C0 controls): user text
# quoted in a message (a record key, a flag value) must not split it into several lines.
_BREAKS = {c: repr(chr(c))[1:-1] for c in (*range(0x20), 0x7F, 0x85, 0x2028, 0x2029)}


def one_line(text: str) -> str:
    """`text` with line breaks and control characters escaped (`\\r`, `\\x1c`), and lone
    surrogates (bytes that were not UTF-8) escaped too, so stderr can always print it."""
    text = text.translate(_BREAKS)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def warn(message: str) -> None:
    print(f"memcli: warning: {one_line(message)}", file=sys.stderr)


# The version that drops the old spellings of flags (memcli.cli.options.OLD; the MCP bridge's).
OLD_SPELLINGS_UNTIL = "0.2.0"


def said_old(old: str, new: str) -> None:
    """The one-line notice of an old flag spelling, on stderr (stdout keeps only the payload)."""
    warn(f"{old} is deprecated, use {new} (removed in {OLD_SPELLINGS_UNTIL})")


def warn_redacted(row: dict[str, Any]) -> None:
    """Say on stderr what a write redacted (its `redacted` kinds), so a text-format user sees it
    too; the JSON on stdout keeps the list, always present."""
    if row.get("redacted"):
        warn(f"redacted {', '.join(row['redacted'])} before storing (the secret was not stored)")
    # A write to an app scope over its limit dropped the oldest memory (`compaction`).
    for report in row.get("compaction") or []:
        dropped = ", ".join(str(a["target_id"]) for a in report.get("actions", []))
        warn(f"app {report['app_id']} is over its limit of {report['limit']}: "
             f"soft-deleted the oldest memory {dropped} (`memcli restore ID` brings it back)")


def fail(message: str, code: int = 1) -> SystemExit:
    """Print the one-line error; the caller raises what this returns (the exit code)."""
    print(f"memcli: error: {one_line(message)}", file=sys.stderr)
    return SystemExit(code)


def _own_exit(exc: Exception) -> bool:
    """A Typer/click exit or abort raised by a command (already reported): it keeps its code.
    (Looked up, not imported: where Typer is not loaded, none of its exceptions can exist.)"""
    typer = sys.modules.get("typer")
    return typer is not None and isinstance(exc, (typer.Exit, typer.Abort))


@contextmanager
def errors() -> Iterator[None]:
    """Turn every expected failure into one line on stderr and its exit code (no tracebacks)."""
    try:
        yield
    except MemcliError as exc:
        raise fail(str(exc), exc.exit_code) from None
    except KeyboardInterrupt:
        raise fail("interrupted", 130) from None
    except BrokenPipeError:
        raise SystemExit(0) from None
    except OSError as exc:
        raise fail(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), 1) from None
    except RecursionError:
        raise fail("input nested too deeply", 2) from None
    except Exception as exc:  # anything unforeseen: one line, exit 1, no exception name
        if _own_exit(exc):
            raise
        name = type(exc).__name__
        text = str(exc).splitlines()[0] if str(exc) else ""
        text = text[len(name) + 2:] if text.startswith(name + ": ") else text
        raise fail(f"unexpected error: {text or 'no message'} (a bug in memcli: please "
                   "report it with the command that failed)", 1) from None


def emit(payload: Any, fmt: Format, text: Callable[[Any], None] | None = None) -> None:
    """Print the payload: JSON, one JSON value per line, or a human rendering."""
    if fmt is Format.json:
        sys.stdout.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
    elif fmt is Format.jsonl:
        items = payload if isinstance(payload, list) else [payload]
        for item in items:
            sys.stdout.write(json.dumps(item, ensure_ascii=False) + "\n")
    elif text is not None:
        text(payload)
    else:
        from rich.console import Console
        from rich.pretty import Pretty

        Console().print(Pretty(payload))


def read_stdin() -> str:
    """All of stdin as text. Bytes that are not UTF-8 become lone surrogates (surrogateescape)
    instead of failing the whole read: ingest then rejects only the records holding them, and
    a query or request says it is not UTF-8."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:
        return sys.stdin.read()
    return _decode(buffer.read())


def _decode(data: bytes) -> str:
    text = data.decode("utf-8", errors="surrogateescape")
    return text[1:] if text.startswith("\ufeff") else text  # a BOM is not content


def read_inputs(paths: list[str], text: str | None) -> list[tuple[str, str]]:
    """(source name, text) from --text and files; stdin only when a path is `-`."""
    parts: list[tuple[str, str]] = []
    if text is not None:
        parts.append(("--text", json.dumps({"text": text}, ensure_ascii=False)))
    for p in paths:
        if p == "-":
            parts.append(("<stdin>", read_stdin()))
            continue
        try:
            parts.append((p, _decode(Path(p).read_bytes())))
        except OSError as exc:
            raise fail(f"cannot read {p}: {exc.strerror}", 2) from None
    return parts


def json_object(text: str, what: str) -> dict[str, Any]:
    """One JSON object parsed from `text` (a request on stdin or in a file), or a one-line
    UsageError (exit 2)."""
    from memcli.core.inputs import check_value

    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not JSON: {exc.msg} at line {exc.lineno}") from exc
    except RecursionError as exc:
        raise UsageError(f"{what} is nested too deeply") from exc
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise UsageError(f"{what} is not usable JSON: {exc}".splitlines()[0]) from exc
    if not isinstance(data, dict):
        raise UsageError(f"{what} must be one JSON object")
    return check_value(data, what)
