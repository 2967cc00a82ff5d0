"""The databases a user's daemon has open, and the state every one of its processes can read.

`memcli serve --all-databases` has no database of its own: each command's process names the
database it works on (`D<location>\\n` on the report pipe, memcli/service/daemon/worker.py), and
the main process keeps the registry here: when each database was last used and how many
commands it answered. A database unused for `DB_IDLE_CLOSE` seconds is closed: dropped from the
registry, and the HTTP process told to let go of what it holds for it (`c<location>\\n`). A
command never waits for anything of this: it opens its database itself, as in-process.

`serve status` runs in a command's process, which may have been forked long before it asks
(a spare process waits for its request). So the main process publishes what status shows on a
`Board`: a shared anonymous mmap made before the first fork (`mmap.mmap(-1, size)` maps
MAP_SHARED), a generation counter and a JSON body. The writer makes the generation odd, writes,
then even again; a reader takes a body whose generation was even and the same before and
after (a seqlock): one writer, any number of readers, no lock to leave held by a killed reader.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from memcli.service.daemon.lines import Lines

DB_IDLE_CLOSE = 600.0  # seconds a database stays open unused: a coding session's pauses pass
# (a command a minute keeps it), a scratch database of a test run goes within minutes.
BOARD_SIZE = 1 << 20  # bytes: ~5,000 open databases' entries
_HEAD = struct.Struct("=QI")  # generation, body length


class Board:
    """The daemon's published state: one writer (the main process), readers in any fork."""

    def __init__(self, size: int = BOARD_SIZE) -> None:
        self.map = mmap.mmap(-1, size)
        self.size = size
        self.generation = 0

    def publish(self, data: dict[str, Any]) -> None:
        body = json.dumps(data, separators=(",", ":")).encode()
        if len(body) > self.size - _HEAD.size:
            return  # readers keep the last state that fitted
        self.generation += 1  # odd: being written
        self.map[: _HEAD.size] = _HEAD.pack(self.generation, 0)
        self.map[_HEAD.size : _HEAD.size + len(body)] = body
        self.generation += 1
        self.map[: _HEAD.size] = _HEAD.pack(self.generation, len(body))

    def read(self, tries: int = 200) -> dict[str, Any] | None:
        """The last state published (None: none yet, or it kept changing while read)."""
        for _ in range(tries):
            before, size = _HEAD.unpack(self.map[: _HEAD.size])
            if before % 2 == 0:
                body = self.map[_HEAD.size : _HEAD.size + size]
                after, _ = _HEAD.unpack(self.map[: _HEAD.size])
                if after == before:
                    if before == 0:
                        return None
                    with contextlib.suppress(ValueError):
                        return json.loads(body)
                    return None
            time.sleep(0.001)
        return None


@dataclass
class Opened:
    """One database the daemon has open."""

    last: float = field(default_factory=time.monotonic)  # when a command last named it
    last_wall: float = field(default_factory=time.time)
    requests: int = 0


class Registry:
    """The open databases, learned from the commands' reports (`D<location>` lines)."""

    def __init__(self, idle_close: float = DB_IDLE_CLOSE) -> None:
        self.idle_close = idle_close
        self.open: dict[str, Opened] = {}
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self.lines = Lines(self.read_fd)

    def read_reports(self) -> list[str]:
        """The databases the commands started since the last call named, in order."""
        used = []
        for line in self.lines.read() or []:
            if line.startswith(b"D") and len(line) > 1:
                location = os.fsdecode(line[1:])
                self.use(location)
                used.append(location)
        return used

    def use(self, location: str) -> None:
        entry = self.open.get(location)
        if entry is None:
            entry = self.open[location] = Opened()
        entry.last, entry.last_wall = time.monotonic(), time.time()
        entry.requests += 1

    def close_idle(self, now: float | None = None) -> list[str]:
        """Close the databases unused for `idle_close` seconds; their locations."""
        now = time.monotonic() if now is None else now
        idle = [loc for loc, entry in self.open.items() if now - entry.last >= self.idle_close]
        for location in idle:
            del self.open[location]
        return idle

    def next_close(self, now: float | None = None) -> float | None:
        """Seconds until the next database is closed (None: none open)."""
        if not self.open:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, min(e.last for e in self.open.values()) + self.idle_close - now)

    def snapshot(self) -> list[dict[str, Any]]:
        """The open databases as published: location, last use (epoch seconds), commands."""
        return [
            {"db": loc, "last_used": e.last_wall, "requests": e.requests}
            for loc, e in sorted(self.open.items())
        ]

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
