"""Reading the files of the formats kept as folders (agent transcripts, notes): which files a
PATH names, their text, and their JSON lines. What cannot be read whole is read as far as it
can be and said in a note (printed on stderr): a transcript is written while its agent runs,
so its last line may be cut, and a note may hold bytes of another encoding."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memcli.importers.turns import bad


def find(path: Path, pattern: str, fmt: str) -> list[Path]:
    """PATH itself when it is a file, else the files under it matching `pattern`, in name
    order (the order of their conversations does not matter: events carry their times)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise bad(fmt, f"{path} is neither a file nor a folder")
    return sorted(p for p in path.rglob(pattern) if p.is_file())


def text(path: Path, fmt: str, notes: list[str]) -> str:
    """A file's text; bytes that are not UTF-8 become U+FFFD, and a note says where."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise bad(fmt, f"cannot read {path}: {exc.strerror}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        notes.append(f"{path.name}: bytes that are not UTF-8 (first at byte {exc.start}) "
                     "were replaced by U+FFFD")
        return raw.decode("utf-8-sig", errors="replace")


def json_lines(path: Path, fmt: str, notes: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number from 1, object) for each line that holds a JSON object; the others are
    counted in one note per file."""
    skipped = 0
    # split on newlines only: a JSON string may hold U+2028 unescaped, which splitlines cuts
    for number, line in enumerate(text(path, fmt, notes).split("\n"), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            yield number, value
        else:
            skipped += 1
    if skipped:
        notes.append(f"{path.name}: {skipped} line(s) not a JSON object were left out")


def text_of(content: Any, images: bool = True) -> str:
    """The text blocks of a message's content: a string, or a list of typed blocks (`text`,
    `input_text`, `output_text`); images named as attachments (`images`: the agent hooks
    leave them out, and key a Codex turn by this text)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    pieces = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") in ("text", "input_text", "output_text") and isinstance(
                block.get("text"), str):
            pieces.append(block["text"])
        elif images and block.get("type") in ("image", "input_image"):
            pieces.append("[attachment: image]")
    return "\n".join(p for p in pieces if p)
