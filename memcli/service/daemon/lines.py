"""Whole lines from a pipe: how the daemon's processes talk to each other.

The commands' reports, the HTTP process's and the indexer's, and the indexer's wake lines are
each one line per `os.write`, at most PIPE_BUF bytes, so the lines of several writers never mix;
a read may still end inside a line, which waits for the next read.
"""

from __future__ import annotations

import os


class Lines:
    """The read end of a pipe, read as lines (a partial last line kept for the next read)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.rest = b""

    def read(self) -> list[bytes] | None:
        """The whole lines waiting (none when nothing is); None at the pipe's end (every
        writer gone) or when it cannot be read."""
        try:
            data = os.read(self.fd, 65536)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            data = b""
        if not data:
            return None
        *lines, self.rest = (self.rest + data).split(b"\n")
        return lines
