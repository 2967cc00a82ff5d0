"""Files only their user can read: every file memcli writes that holds memories or credentials
(the database, whose WAL and shared-memory files SQLite creates with the database's own mode,
exports, views, logs, token and key files) is created 0600, and every folder memcli creates for
them 0700, whatever the umask (a umask can only take bits away).

A folder that already exists is the user's (their home, a project, a folder they made for the
database) and is left as it is: memcli never widens or narrows it. That is what ssh, gpg and
PostgreSQL do with folders they did not make; a database that others can read is named by
`memcli doctor` with the `chmod` that fixes it (memcli.health.checks).

Files are created with their mode (`os.open(..., 0o600)`), never chmod-ed after writing, so no
other user can open one in between. A file memcli rewrites (a view, an export, a log) loses the
group and other bits it had: what memcli writes into it are memories.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

FILE_MODE = 0o600
DIR_MODE = 0o700
OPEN_TO_OTHERS = 0o077  # group and other bits: any of them lets another local user in


def make_dirs(folder: Path) -> None:
    """`folder` and each missing parent created 0700 (`Path.mkdir(parents=True)` gives the
    parents the umask's mode); folders that exist are left as they are."""
    missing = []
    here = Path(folder)
    while not os.path.lexists(here) and here != here.parent:
        missing.append(here)
        here = here.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:  # made by another process meanwhile: theirs is as good
            if not path.is_dir():
                raise


def create_file(path: Path) -> bool:
    """An empty file at `path` created 0600 unless one exists (O_EXCL: of two processes, one
    creates it, the other finds it); True when this call created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return False
    os.close(fd)
    return True


@contextmanager
def open_private(
    path: Path, mode: str = "w", *, encoding: str = "utf-8", newline: str | None = None
) -> Iterator[IO[str]]:
    """`path` opened for writing text (`mode` "w" truncates, "a" appends), created 0600; a
    file that was open to others is closed to them first."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
    flags |= os.O_APPEND if mode == "a" else os.O_TRUNC
    fd = os.open(path, flags, FILE_MODE)
    try:
        now = os.fstat(fd).st_mode
        if stat.S_ISREG(now) and now & OPEN_TO_OTHERS:
            os.fchmod(fd, stat.S_IMODE(now) & ~OPEN_TO_OTHERS)
        handle = os.fdopen(fd, mode, encoding=encoding, newline=newline)
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def write_text(path: Path, text: str, *, encoding: str = "utf-8") -> None:
    """`text` written to `path`, a file created 0600 (see open_private)."""
    with open_private(path, encoding=encoding) as out:
        out.write(text)


def open_to_others(path: str | Path) -> bool:
    """Whether another local user may read or write the file at `path` (False: none there)."""
    try:
        return bool(os.stat(path).st_mode & OPEN_TO_OTHERS)
    except OSError:
        return False
