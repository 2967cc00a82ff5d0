"""Read a chat export and write its turns as events through ingest (redaction included)."""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path
from typing import Any

from memcli.errors import UsageError
from memcli.importers import FORMATS
from memcli.importers.turns import HINTS, Turn


def read_turns(fmt: str, raw: bytes, notes: list[str] | None = None) -> list[Turn]:
    """The kept turns of an export file's bytes, or a one-line UsageError (exit 2)."""
    module = _module(fmt)
    if not hasattr(module, "turns"):
        raise UsageError(f"{fmt} is read from files, not from one file's bytes",
                         HINTS.get(fmt, "give a folder"))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"not a {fmt} export: not UTF-8 (byte {exc.start})",
                         HINTS[fmt]) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"not a {fmt} export: not JSON ({exc.msg} at line {exc.lineno})",
                         HINTS[fmt]) from None
    except RecursionError:
        raise UsageError(f"not a {fmt} export: nested too deeply", HINTS[fmt]) from None
    return list(module.turns(data, [] if notes is None else notes))


def read_source(fmt: str, path: str | None, read_stdin: Any, project: str | None = None,
                ) -> tuple[list[Turn], list[str]]:
    """The turns PATH holds (`-`: stdin's bytes; None: where the tool keeps its files), only
    those of `project` when one is given, and the notes for stderr."""
    module, notes = _module(fmt), []  # type: tuple[Any, list[str]]
    if project is not None and not getattr(module, "PROJECTS", False):
        raise UsageError(f"--project does not apply to --from {fmt}",
                         "it selects the sessions of Claude Code or Codex projects")
    if path is None:
        default = getattr(module, "DEFAULT_PATH", None)
        if default is None:
            raise UsageError(f"--from {fmt} needs PATH", HINTS[fmt])
        path = str(Path(default).expanduser())
        if not Path(path).exists():
            raise UsageError(f"no {fmt} files at {path}", HINTS[fmt])
    if hasattr(module, "turns"):
        try:
            raw = read_stdin() if path == "-" else Path(path).read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}",
                             "give an export file or `-`") from None
        turns = read_turns(fmt, raw, notes)
    else:
        if path == "-":
            raise UsageError(f"--from {fmt} reads files, not stdin", HINTS[fmt])
        turns = list(module.read(Path(path), notes))
    if project is not None:
        turns = [t for t in turns if project in t.project]
        if not turns:
            notes.append(f"no {fmt} turns of project {project!r} under {path}")
    return turns, notes


def _module(fmt: str) -> Any:
    if fmt not in FORMATS:
        raise UsageError(f"unknown import format {fmt!r}",
                         f"give one of: {', '.join(sorted(FORMATS))}")
    return importlib.import_module(FORMATS[fmt])


def event_id(fmt: str, turn: Turn) -> str:
    """Stable across imports: the same message of the same conversation is the same event."""
    if turn.event_id is not None:
        return turn.event_id
    key = "\0".join((fmt, turn.conversation_id, turn.message_id)).encode()
    return f"imp_{fmt}_{hashlib.sha256(key).hexdigest()[:32]}"


def records(fmt: str, turns: list[Turn], scope: dict[str, Any] | None = None,
            ) -> list[dict[str, Any]]:
    """One ingest record per turn: its id, time, role, conversation as the session; the
    user, agent and app the source names where `scope` gives none (a project: the app)."""
    scope = scope or {}
    out = []
    for turn in turns:
        source = {"format": fmt, "conversation_id": turn.conversation_id,
                  "message_id": turn.message_id, "title": turn.title}
        content: dict[str, Any] = {k: v for k, v in turn.extra.items() if v is not None}
        if turn.kind == "message":
            content["text"] = turn.text
        record: dict[str, Any] = {
            "event_id": event_id(fmt, turn), "kind": turn.kind, "role": turn.role,
            "session_id": turn.session_id or f"{fmt}:{turn.conversation_id}",
            "tags": list(dict.fromkeys((f"import:{fmt}", *turn.tags))),
            "content": {**content, "source": source},
        }
        named = {**({"app_id": turn.project[0]} if turn.project else {}), **turn.scope}
        for key, value in named.items():
            if scope.get(key) is None:
                record[key] = value
        if turn.ts is not None:
            record["ts"] = turn.ts
        out.append(record)
    return out


def load(memory: Any, fmt: str, turns: list[Turn], scope: dict[str, Any], *,
         defer_embed: bool = False, progress: Any = None,
         notes: list[str] | None = None) -> dict[str, Any]:
    """Write the turns (all or nothing) in `scope` (tenant, user, app: None is the default)
    and report as `memcli import` does."""
    batch = list(enumerate(records(fmt, turns, scope), 1))
    report = memory.ingest(batch, defaults=scope, strict=True, defer_embed=defer_embed,
                           progress=progress)
    if report.rejected:
        first = report.rejected[0]
        raise UsageError(f"{fmt} export: turn {first.line}: {first.reason}",
                         "nothing was imported")
    added, skipped = len(report.created), len(report.skipped)
    return {"format": fmt, "conversations": len({t.conversation_id for t in turns}),
            "added": added, "skipped": skipped,
            "counts": {"events": {"added": added, "skipped": skipped}},
            "redacted": report.redacted, "notes": list(notes or [])}
