"""Reading the files of the formats kept as folders (agent transcripts, notes): which files a
PATH names, their text, and their JSON lines. What cannot be read whole is read as far as it
can be and said in a note (printed on stderr): a transcript is written while its agent runs,
so its last line may be cut, and a note may hold bytes of another encoding."""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

from memcli.importers import stream
from memcli.importers.turns import Notes, Turn, bad


def each_file(files: list[Path], turns_of: Callable[[Path, dict[str, int]], Iterator[Turn]],
              notes: Notes, what: str) -> Generator[Turn, None, int]:
    """The turns of each file (`turns_of(file, counts)` counts the lines of the format it
    knows in `counts["lines"]`); a file holding none of `what` is noted and counted as left
    out. Returns how many lines of the format all files held."""
    known = 0
    for file in files:
        counts = {"lines": 0}
        yield from turns_of(file, counts)
        known += counts["lines"]
        if not counts["lines"]:
            notes.append(f"{file.name}: no {what} line: left out")
            notes.skip("file of another format")
    return known


def find(path: Path, pattern: str, fmt: str, notes: Notes) -> list[Path]:
    """PATH itself when it is a file, else the files under it matching `pattern`, in name
    order (the order of their conversations does not matter: events carry their times).
    Links are not followed out of PATH: a linked folder is not entered, a linked file whose
    target lies outside PATH is left out, and a note counts them."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise bad(fmt, f"{path} is neither a file nor a folder")
    root, found, outside = path.resolve(), [], 0
    for folder, dirs, files in os.walk(path, followlinks=False):
        outside += sum(1 for d in dirs if (Path(folder) / d).is_symlink()
                       and not (Path(folder) / d).resolve().is_relative_to(root))
        for name in files:
            file = Path(folder) / name
            if not fnmatch.fnmatchcase(name, pattern):
                continue
            if file.is_symlink() and not file.resolve().is_relative_to(root):
                outside += 1
            elif file.is_file():
                found.append(file)
    if outside:
        notes.append(f"{outside} link(s) out of {path} not followed")
        notes.skip("link out of the folder", outside)
    return sorted(found)


def text(path: Path, fmt: str, notes: Notes) -> str | None:
    """A file's text; bytes that are not UTF-8 become U+FFFD, and a note says where. A file
    past MAX_ITEM_BYTES is left out (None), with a note."""
    try:
        size = path.stat().st_size
        raw = path.read_bytes() if size <= stream.MAX_ITEM_BYTES else None
    except OSError as exc:
        raise bad(fmt, f"cannot read {path}: {exc.strerror}") from None
    if raw is None:
        notes.append(f"{path.name}: larger than {stream.MAX_ITEM_BYTES >> 20} MiB: left out")
        notes.skip("file too large")
        return None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        notes.append(f"{path.name}: bytes that are not UTF-8 (first at byte {exc.start}) "
                     "were replaced by U+FFFD")
        return raw.decode("utf-8-sig", errors="replace")


def json_lines(path: Path, fmt: str, notes: Notes) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number from 1, object) for each line that holds a JSON object, read a line at a
    time; the others are counted in one note per file (a transcript is written while its
    agent runs: its last line may be cut)."""
    skipped = long = 0
    not_utf8: int | None = None  # the first line holding bytes that are not UTF-8
    # lines end at "\n" only: a JSON string may hold U+2028 unescaped
    for number, raw in stream.lines(path, f"{path.name}"):
        if raw is None:
            long += 1
            continue
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            not_utf8 = not_utf8 or number
            line = raw.decode("utf-8-sig", errors="replace")
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            yield number, value
        else:
            skipped += 1
    if not_utf8:
        notes.append(f"{path.name}: bytes that are not UTF-8 (first on line {not_utf8}) "
                     "were replaced by U+FFFD")
    if skipped:
        notes.append(f"{path.name}: {skipped} line(s) not a JSON object were left out")
        notes.skip("line not a JSON object", skipped)
    if long:
        notes.append(f"{path.name}: {long} line(s) longer than {stream.MAX_ITEM_BYTES >> 20} MiB "
                     "were left out")
        notes.skip("line too long", long)


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
