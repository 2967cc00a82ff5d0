"""Reading an export as a stream, within stated limits: a whole file is never held in memory.

A JSON export (ChatGPT, Claude, mem0) is read item by item with ijson (its C parser), so memory
holds one conversation at a time; a transcript (Claude Code, Codex) line by line. Two limits,
each a one-line error (exit 2) when passed, before anything is written:
- MAX_INPUT_BYTES, the whole input: an endless stream (`/dev/zero`, a pipe that never closes)
  stops there instead of filling memory or disk;
- MAX_ITEM_BYTES, one conversation, memory or transcript line: the most that is parsed into
  memory at once. A transcript line past it is left out with a note (the rest of the file
  still reads); a JSON item past it refuses the file, since its end cannot be found without
  parsing it.
Standard input is copied to a temporary file first (within MAX_INPUT_BYTES): an import reads
its input twice, once to check it before the database opens and once to write it."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from memcli.errors import UsageError
from memcli.importers.turns import bad

MAX_INPUT_BYTES = 8 << 30  # 8 GiB: a heavy user's ChatGPT export is around 1 GiB
MAX_ITEM_BYTES = 256 << 20  # 256 MiB of JSON for one conversation, memory or line
CHUNK = 1 << 16


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


def too_large(what: str, limit: int) -> UsageError:
    return UsageError(
        f"{what} is larger than {_size(limit)}, the most an import reads",
        "split the export, or check that PATH is the export file",
    )


class Limited(io.RawIOBase):
    """A binary file read through byte limits: the whole input, and since `mark()` (one
    item). A leading UTF-8 byte order mark is dropped (Windows tools write one)."""

    def __init__(self, raw: IO[bytes], what: str, item_limit: int | None = None) -> None:
        super().__init__()
        self.raw, self.what = raw, what
        self.item_limit = MAX_ITEM_BYTES if item_limit is None else item_limit
        self.input_limit = MAX_INPUT_BYTES
        self.total = self.since_mark = 0
        self._first = True

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.raw.close()
        super().close()

    def mark(self) -> None:
        self.since_mark = 0

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        if self._first and data:
            self._first = False
            if data.startswith(b"\xef\xbb\xbf"):
                data = data[3:] or self.raw.read(len(buffer))
        self.total += len(data)
        self.since_mark += len(data)
        if self.total > self.input_limit:
            raise too_large(self.what, self.input_limit)
        if self.since_mark > self.item_limit:
            raise too_large(f"one item of {self.what}", self.item_limit)
        buffer[: len(data)] = data
        return len(data)


@contextmanager
def spooled(read_stdin: Any, fmt: str) -> Iterator[Path]:
    """Standard input copied to a private temporary file (removed on leaving), within
    MAX_INPUT_BYTES; `read_stdin` is a binary stream's `read`. Input that does not open as
    JSON does (`[` or `{`) is refused at its first bytes, not copied."""
    handle = tempfile.NamedTemporaryFile(prefix="memcli-import-", delete=False)
    try:
        with handle:
            copied, opened = 0, False
            while chunk := read_stdin(CHUNK):
                if not opened:
                    start = chunk.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
                    if start and start[:1] not in (b"[", b"{"):
                        raise bad(fmt, "not JSON (it does not open with [ or {)")
                    opened = bool(start)
                copied += len(chunk)
                if copied > MAX_INPUT_BYTES:
                    raise too_large("standard input", MAX_INPUT_BYTES)
                handle.write(chunk)
        yield Path(handle.name)
    finally:
        os.unlink(handle.name)


def open_limited(path: Path, what: str, item_limit: int | None = None) -> Limited:
    """PATH opened for reading through the limits; a one-line error when it cannot be."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - Limited.close closes it
    except OSError as exc:
        raise UsageError(
            f"cannot read {path}: {exc.strerror}", "give an export file or `-`"
        ) from None
    return Limited(raw, what, item_limit)


def lines(path: Path, what: str) -> Iterator[tuple[int, bytes | None]]:
    """(line number from 1, its bytes) of a text file, read a line at a time; a line longer
    than MAX_ITEM_BYTES comes as None (skipped unread to its end)."""
    # the line limit is kept here (a long line is skipped), the input's by the stream
    with (
        open_limited(path, what, MAX_INPUT_BYTES) as stream,
        io.BufferedReader(stream, CHUNK) as buffered,
    ):
        number = 0
        while True:
            line = buffered.readline(MAX_ITEM_BYTES + 1)
            if not line:
                return
            number += 1
            if len(line) > MAX_ITEM_BYTES and not line.endswith(b"\n"):
                while (rest := buffered.readline(CHUNK)) and not rest.endswith(b"\n"):
                    pass
                yield number, None
                continue
            yield number, line


def json_items(path: Path, fmt: str, keys: tuple[str, ...] = ()) -> Iterator[Any]:
    """The items of a JSON export, each parsed alone: a top-level array's items; of a top-level
    object, the items of the array under the first of `keys` it holds, else (no `keys`) the
    object itself as the one item. A file that is not JSON is a one-line error."""
    import ijson  # noqa: PLC0415 - its C parser, only when importing

    top = _first_byte(path, fmt)
    prefix = "item" if top == b"[" else ""
    if top == b"{" and keys:
        found = _top_key(path, fmt, keys)
        if found is None:
            raise bad(fmt, f"the file has neither a list nor {' nor '.join(map(repr, keys))}")
        prefix = f"{found}.item"
    elif top not in (b"[", b"{"):
        raise bad(fmt, "not JSON (it does not open with [ or {)")
    with open_limited(path, f"the {fmt} export") as stream:
        try:
            for item in ijson.items(stream, prefix, use_float=True):
                yield item
                stream.mark()
        except ijson.JSONError as exc:
            raise bad(fmt, _json_problem(exc)) from None


def _first_byte(path: Path, fmt: str) -> bytes | None:
    with open_limited(path, f"the {fmt} export") as stream:
        while chunk := stream.read(CHUNK):
            stripped = chunk.lstrip(b" \t\r\n")
            if stripped:
                return stripped[:1]

    raise bad(fmt, "the file is empty")


def _top_key(path: Path, fmt: str, keys: tuple[str, ...]) -> str | None:
    """The first of `keys` that a top-level object holds (its values are skipped, not
    built)."""
    import ijson  # noqa: PLC0415 - its C parser, only when importing

    with open_limited(path, f"the {fmt} export", MAX_INPUT_BYTES) as stream:
        try:
            events = ijson.parse(stream)
            for prefix, event, value in events:
                if prefix == "" and event == "map_key" and value in keys:
                    if next(events, (None, None, None))[1] != "start_array":
                        raise bad(fmt, f"the {value} is not a list")
                    return str(value)
        except ijson.JSONError as exc:
            raise bad(fmt, _json_problem(exc)) from None
    return None


def _json_problem(exc: Exception) -> str:
    said = str(exc).strip().split("\n")[0]
    if "UTF8" in said or "utf-8" in said.lower():
        return "not UTF-8"
    return f"not JSON ({said.removeprefix('lexical error: ').rstrip('.')})"
