"""Read another tool's history and write its turns as events through ingest (redaction
included), a batch at a time.

An import reads its input twice. First `open_source` checks all of it before the database
opens: a file of another format, a broken JSON file or one past the stated limits
(memcli.importers.stream) is a one-line error (exit 2) and nothing is created; a conversation
or line that cannot be read is left out with a note naming it, and the rest goes on. Then
`load` reads it again and writes BATCH turns per ingest call, so memory holds one conversation
and one batch, whatever the size of the export."""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcli.core.progress import report as report_progress
from memcli.errors import UsageError
from memcli.importers import FORMATS
from memcli.importers.stream import json_items, spooled
from memcli.importers.turns import HINTS, Notes, Turn
from memcli.policy.redaction import redact_text
from memcli.store.events import contents_by_id

# Turns per ingest call, one short write transaction each. With the default models loaded, a
# 2,000-message import peaked at 369 MB in batches of 250, 417 MB in batches of 1,000, for the
# same CPU (bench/results/importers-memory-default.md).
BATCH = 250


@dataclass
class Source:
    """A checked input: its format's module, where it is, the notes of the check, and what
    the check counted (turns kept, conversations)."""

    fmt: str
    module: Any
    path: Path
    project: str | None
    notes: Notes
    turns: int = 0
    conversations: set[str] = field(default_factory=set)

    def read(self, notes: Notes | None = None) -> Iterator[Turn]:
        """The kept turns, in order, read from the input again."""
        notes = Notes() if notes is None else notes
        if hasattr(self.module, "item_turns"):
            found = _json_turns(self.fmt, self.module, self.path, notes)
        else:
            found = self.module.read(self.path, notes)
        for turn in found:
            if self.project is None or self.project in turn.project:
                yield turn


@contextmanager
def open_source(fmt: str, path: str | None, read_stdin: Any, project: str | None = None,
                ) -> Iterator[Source]:
    """PATH (`-`: standard input, a binary stream's `read`; None: where the tool keeps its
    files) checked whole, or a one-line UsageError (exit 2)."""
    module = _module(fmt)
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
    if path == "-" and not hasattr(module, "item_turns"):
        raise UsageError(f"--from {fmt} reads files, not stdin", HINTS[fmt])
    if path == "-":
        with spooled(read_stdin, fmt) as copy:
            yield _checked(fmt, module, copy, project)
        return
    if hasattr(module, "item_turns") and not Path(path).is_file() \
            and not Path(path).is_char_device() and not Path(path).is_fifo():
        raise UsageError(f"cannot read {path}: not a file", "give an export file or `-`")
    yield _checked(fmt, module, Path(path), project)


def _checked(fmt: str, module: Any, path: Path, project: str | None) -> Source:
    source = Source(fmt, module, path, project, Notes())
    for turn in source.read(source.notes):
        source.turns += 1
        source.conversations.add(turn.conversation_id)
    if project is not None and not source.turns:
        source.notes.append(f"no {fmt} turns of project {project!r} under {path}")
    return source


def _json_turns(fmt: str, module: Any, path: Path, notes: Notes) -> Iterator[Turn]:
    """The turns of a JSON export, an item (conversation, memory) at a time. An item that
    cannot be read is left out with a note; a file none of whose items can be is refused."""
    noun = module.ITEM
    items = kept = 0
    first: UsageError | None = None
    for n, item in enumerate(json_items(path, fmt, getattr(module, "KEYS", ())), 1):
        items += 1
        try:
            turns = list(module.item_turns(item, n, notes))
        except UsageError as exc:
            first = first or exc
            reason = exc.message.removeprefix(f"not a {fmt} export: ")
            notes.append(f"{noun} {n}{_label(item)} left out: {reason}")
            notes.skip(f"unreadable {noun}")
            continue
        kept += 1
        yield from turns
    if items and not kept and first is not None:
        other = sniff(item)
        if other is not None and other != fmt:
            raise UsageError(f"not a {fmt} export: it reads as a {other} export",
                             f"give --from {other}")
        raise first


def _label(item: Any) -> str:
    if isinstance(item, dict):
        for key in ("title", "name", "id", "uuid", "conversation_id"):
            if isinstance(item.get(key), str) and item[key]:
                return f" ({item[key][:60]})"
    return ""


def sniff(item: Any) -> str | None:
    """The format an export's item looks like (for the hint of a refusal), or None."""
    if not isinstance(item, dict):
        return None
    if "mapping" in item:
        return "chatgpt"
    if "chat_messages" in item:
        return "claude"
    if any(isinstance(item.get(k), str) for k in ("memory", "text", "data")) and "id" in item:
        return "mem0"
    return None


def _module(fmt: str) -> Any:
    if fmt not in FORMATS:
        raise UsageError(f"unknown import format {fmt!r}",
                         f"give one of: {', '.join(sorted(FORMATS))}")
    return importlib.import_module(FORMATS[fmt])


def event_id(fmt: str, turn: Turn, variant: str | None = None) -> str:
    """Stable across imports: the same message of the same conversation is the same event.
    `variant`: a digest of the text, for a second turn under a message id already used by a
    different turn of this import (two conversations sharing an id)."""
    if turn.event_id is not None and variant is None:
        return turn.event_id
    parts = (fmt, turn.conversation_id, turn.message_id) + ((variant,) if variant else ())
    return f"imp_{fmt}_{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:32]}"


class Keys:
    """The event ids of one import. Two conversations sharing an id (exports merged by hand,
    exporters' files that all say `fixture`, a session's rollout copied) may reuse a message
    id for a different turn: that turn gets an id of its own, from a digest of its redacted
    text (kept in its source as `digest`), whether the other turn came earlier in this import
    or in one before. The first keeps the usual id, so importing again finds it."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}  # event id -> digest of its turn

    def of(self, fmt: str, turn: Turn) -> tuple[str, str]:
        """The turn's event id and digest."""
        said, _ = redact_text(f"{turn.kind}\0{turn.text}")  # no secret in a digest
        digest = hashlib.sha256(said.encode()).hexdigest()[:16]
        key = event_id(fmt, turn)
        if self.seen.setdefault(key, digest) != digest:
            key = event_id(fmt, turn, digest)
            self.seen.setdefault(key, digest)
        return key, digest

    def settle(self, db: Any, fmt: str, batch: list[tuple[int, dict[str, Any]]],
               turns: list[Turn]) -> None:
        """Give a new id to each record whose id the database holds for a different turn (its
        stored digest differs; an event stored without one, by the hooks or an older import,
        is taken for the same turn)."""
        stored = contents_by_id(db, [r["event_id"] for _, r in batch])
        for (_, rec), turn in zip(batch, turns, strict=True):
            content = stored.get(rec["event_id"])
            if content is None:
                continue
            try:
                theirs = json.loads(content).get("source", {}).get("digest")
            except (ValueError, AttributeError):
                theirs = None
            mine = rec["content"]["source"]["digest"]
            if theirs is not None and theirs != mine:
                rec["event_id"] = event_id(fmt, turn, mine)


def record(fmt: str, turn: Turn, key: tuple[str, str], scope: dict[str, Any],
           ) -> dict[str, Any]:
    """The ingest record of a turn: its id, time, role, conversation as the session; the
    user, agent and app the source names where `scope` gives none (a project: the app)."""
    source = {"format": fmt, "conversation_id": turn.conversation_id,
              "message_id": turn.message_id, "title": turn.title, "digest": key[1]}
    content: dict[str, Any] = {k: v for k, v in turn.extra.items() if v is not None}
    if turn.kind == "message":
        content["text"] = turn.text
    out: dict[str, Any] = {
        "event_id": key[0], "kind": turn.kind, "role": turn.role,
        "session_id": turn.session_id or f"{fmt}:{turn.conversation_id}",
        "tags": list(dict.fromkeys((f"import:{fmt}", *turn.tags))),
        "content": {**content, "source": source},
    }
    named = {**({"app_id": turn.project[0]} if turn.project else {}), **turn.scope}
    for name, value in named.items():
        if scope.get(name) is None:
            out[name] = value
    if turn.ts is not None:
        out["ts"] = turn.ts
    return out


def load(memory: Any, source: Source, scope: dict[str, Any], *, defer_embed: bool = False,
         progress: Any = None) -> dict[str, Any]:
    """Write the source's turns in `scope` (tenant, user, app: None is the default), BATCH at
    a time, and report as `memcli import` does."""
    fmt, keys = source.fmt, Keys()
    added = skipped = done = 0
    redacted: list[Any] = []
    batch: list[tuple[int, dict[str, Any]]] = []
    turns: list[Turn] = []

    def write() -> None:
        nonlocal added, skipped
        keys.settle(memory.db, fmt, batch, turns)
        report = memory.ingest(batch, defaults=scope, strict=True, defer_embed=defer_embed)
        if report.rejected:
            first = report.rejected[0]
            raise UsageError(f"{fmt} export: turn {first.line}: {first.reason}",
                             f"the {done - len(batch)} turns before its batch were imported")
        added += len(report.created)
        skipped += len(report.skipped)
        redacted.extend(report.redacted)
        report_progress(progress, "writing", done, source.turns)
        batch.clear()
        turns.clear()

    for turn in source.read():
        done += 1
        batch.append((done, record(fmt, turn, keys.of(fmt, turn), scope)))
        turns.append(turn)
        if len(batch) >= BATCH:
            write()
    if batch:
        write()
    notes = list(source.notes)
    left_out = source.notes.summary(fmt)
    if left_out:
        notes.append(left_out)
    return {"format": fmt, "conversations": len(source.conversations),
            "added": added, "skipped": skipped,
            "counts": {"events": {"added": added, "skipped": skipped}},
            "left_out": dict(sorted(source.notes.left_out.items())),
            "redacted": redacted, "notes": notes}
