"""A basic-memory project: a folder of Markdown notes. A note may open with YAML frontmatter
(`title`, `type`, `permalink`, `tags`); its observations are list items `- [category] text
#tag (context)`, its relations list items `- relation_type [[Other note]]`.

A note is a session (`basic-memory:<permalink>`); its prose is one event, each observation one
event (tagged `category:<category>`), each relation one event (`<title> relates_to <Other>`,
the target in its content). Keys are the note's permalink and the text: a note edited since
the last import adds its new parts only. Times are the file's modification time, as
basic-memory's own index takes them."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memcli.importers.files import find, text
from memcli.importers.turns import HUMAN, Notes, Turn, bad

FMT = "basic-memory"
OBSERVATION = re.compile(r"^\s*[-*]\s+\[([^\]\[]+)\]\s+(.+?)\s*$")
RELATION = re.compile(r"^\s*[-*]\s+([\w-]+)\s+\[\[([^\]]+)\]\]\s*(?:\((.*)\))?\s*$")
CONTEXT = re.compile(r"\s+\(([^()]*)\)$")
HASHTAG = re.compile(r"(?:^|\s)#([\w/-]+)")
HEADINGS = re.compile(r"^#{1,6}\s+(observations|relations)\s*$", re.IGNORECASE)


def read(path: Path, notes: Notes) -> Iterator[Turn]:
    if path.is_file() and path.suffix.lower() not in (".md", ".markdown"):
        raise bad(FMT, f"{path.name} is not a Markdown note")
    root = path if path.is_dir() else path.parent
    for file in find(path, "*.md", FMT, notes):
        if any(part.startswith(".") for part in file.relative_to(root).parts):
            continue  # .obsidian, .git and the like
        yield from _note(file, root, notes)


def _note(file: Path, root: Path, notes: Notes) -> Iterator[Turn]:
    whole = text(file, FMT, notes)
    if whole is None:
        return
    front, body = _frontmatter(whole, file, notes)
    title = _string(front.get("title")) or _heading(body) or file.stem
    permalink = _string(front.get("permalink")) or _permalink(file.relative_to(root))
    given = front.get("tags")
    tags = given if isinstance(given, list) else []
    ts = datetime.fromtimestamp(file.stat().st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    base: dict[str, Any] = {"conversation_id": permalink, "ts": ts, "title": title,
                            "role": HUMAN}
    note_tags = tuple(f"tag:{t}" for t in tags if isinstance(t, str | int))
    prose: list[str] = []
    for line in body.split("\n"):
        observation, relation = OBSERVATION.match(line), RELATION.match(line)
        if observation:
            category, said = observation.group(1).strip(), observation.group(2)
            context = CONTEXT.search(said)
            said = said[:context.start()] if context else said
            hashtags = HASHTAG.findall(said)
            extra = {"category": category, **({"context": context.group(1)} if context else {})}
            yield Turn(message_id=f"obs:{_digest(category, said)}", text=said, extra=extra,
                       tags=(*note_tags, f"category:{category}",
                             *(f"tag:{t}" for t in hashtags)), **base)
        elif relation:
            kind, target = relation.group(1), relation.group(2).strip()
            yield Turn(message_id=f"rel:{_digest(kind, target)}", text=f"{title} {kind} "
                       f"{target}", extra={"relation": kind, "target": target},
                       tags=note_tags, **base)
        elif not HEADINGS.match(line):
            prose.append(line)
    said = re.sub(r"\n\s*\n\s*\n", "\n\n", "\n".join(prose).strip())  # the lists' gaps
    if said and said != f"# {title}":
        yield Turn(message_id=f"note:{_digest(said)}", text=said, tags=note_tags,
                   extra={"note_type": _string(front.get("type")) or "note"}, **base)


def _frontmatter(whole: str, file: Path, notes: Notes) -> tuple[dict[str, Any], str]:
    if not whole.startswith("---"):
        return {}, whole
    end = re.search(r"^---\s*$", whole[3:], re.MULTILINE)
    if end is None:
        return {}, whole
    import yaml  # noqa: PLC0415 - front matter: only when importing notes

    try:
        front = yaml.safe_load(whole[3:3 + end.start()])
    except yaml.YAMLError:
        notes.append(f"{file.name}: its frontmatter is not YAML: read as text")
        return {}, whole
    return (front if isinstance(front, dict) else {}), whole[3 + end.end():]


def _string(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _heading(body: str) -> str | None:
    found = re.search(r"^#\s+(.+?)\s*$", body, re.MULTILINE)
    return found.group(1) if found else None


def _permalink(relative: Path) -> str:
    """As basic-memory makes one: the path without `.md`, lower case, words joined by `-`."""
    words = re.sub(r"[^\w/]+", "-", relative.with_suffix("").as_posix().lower())
    return re.sub(r"-+", "-", words).strip("-/")


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]
