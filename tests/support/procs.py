"""The running processes, read from Linux /proc: the one walk the test support shares.

`processes()` yields a `Process` per pid: its parent, session and state from /proc/PID/stat
(read at once), its command line, program and environment read on first use, so a walk that looks
only at parents reads one file per process. A process that ends during the walk is left out
(its stat gone) or, read later, has an empty command line and no environment; a process of
another user has no readable environment (None). Tests find their processes by parent,
session, command line or environment through this, never by a name pattern over all users'
processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property


@dataclass
class Process:
    """One process. `state`: its /proc state letter ("R", "S", "Z" for a zombie, ...)."""

    pid: int
    ppid: int
    session: int
    state: str

    @property
    def zombie(self) -> bool:
        return self.state == "Z"

    @cached_property
    def argv(self) -> list[bytes]:
        """Its command line's arguments (empty for a kernel thread or a process gone)."""
        return _argv(self.pid)

    @cached_property
    def exe(self) -> str | None:
        """The path of the program it runs; None when not ours to read or gone."""
        try:
            return os.readlink(f"/proc/{self.pid}/exe")
        except OSError:
            return None

    @cached_property
    def environ(self) -> list[bytes] | None:
        """Its environment's `NAME=value` entries; None when not ours to read or gone."""
        raw = _read(f"/proc/{self.pid}/environ")
        return None if raw is None else [v for v in raw.split(b"\0") if v]


def processes() -> Iterator[Process]:
    """Every process running now (zombies included: `Process.zombie` says which)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (process := _process(int(entry))) is not None:
            yield process


def children(parent: int) -> list[Process]:
    """The running processes `parent` started (zombies included), from the kernel's list of
    each of its threads' children: a few files, not a walk of every process (autouse checks
    run this after every test)."""
    pids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{parent}/task")
    except OSError:  # the parent is gone
        return []
    for task in tasks:
        listed = _read(f"/proc/{parent}/task/{task}/children") or b""
        pids.extend(int(pid) for pid in listed.split())
    return [p for p in map(_process, pids) if p is not None]


def with_argument(argument: bytes) -> list[Process]:
    """The running processes with `argument` among their command line's arguments, reading
    one file per process (a process's stat only when its command line matches)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and argument in _argv(int(entry)):
            if (process := _process(int(entry))) is not None:
                found.append(process)
    return found


def running(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie has)."""
    process = _process(pid)
    return process is not None and not process.zombie


def _process(pid: int) -> Process | None:
    """`pid` as a Process, its stat read now; None when it is gone."""
    stat = _read(f"/proc/{pid}/stat")
    try:
        # The command name in parentheses may hold spaces and ")": the fields after the
        # last ")" are state, ppid, pgrp, session, ...
        fields = stat.rsplit(b")", 1)[1].split()  # type: ignore[union-attr]
        return Process(pid, int(fields[1]), int(fields[3]), fields[0].decode())
    except (AttributeError, IndexError, ValueError):
        return None


def _argv(pid: int) -> list[bytes]:
    raw = _read(f"/proc/{pid}/cmdline") or b""
    return raw.split(b"\0")[:-1] if raw.endswith(b"\0") else raw.split(b"\0")


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def stop(proc: subprocess.Popen, timeout: float = 60.0) -> tuple[str | None, str | None]:
    """SIGTERM, then SIGKILL if it is still running after `timeout` s; the output it had left
    (None for a stream not piped)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()
