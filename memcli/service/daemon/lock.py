"""The daemon's lock and pidfile, and which daemon answers for a database.

One process holds a daemon's lock (flock on `<key>.lock`) while it starts, serves and stops:
a second `memcli serve` for the same files exits 75 naming the pid, `serve stop` and `serve
status` read the pid of the holder. A lock left by a killed daemon is free again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from pathlib import Path
from typing import Any

from memcli.errors import MemcliError
from memcli.service.daemon import paths
from memcli.service.holder import is_server
from memcli.store.opener import open_database

__all__ = ["AlreadyServing", "answering", "stop", "take_lock"]


class AlreadyServing(MemcliError):
    exit_code = 75


def answering(db: str, env: Any = None) -> paths.Endpoint:
    """The daemon that would answer a command for `db`, as the client picks it: the one
    started for that database when it runs (holds its lock), else the user's."""
    own = paths.endpoint(db, env)
    return own if lock_holder(own) is not None else paths.user_endpoint(env)


def lock_holder(ep: paths.Endpoint) -> int | None:
    """The pid in the pidfile when a process holds the daemon lock, else None."""
    try:
        fd = os.open(ep.lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            return int(Path(ep.pid).read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return -1
    finally:
        os.close(fd)
    return None


def stop(ep: paths.Endpoint, wait: float) -> dict[str, Any]:
    """`memcli serve stop`: SIGTERM to the daemon of `ep` (its requests in flight finish, as
    on any stop), then wait at most `wait` seconds until it has released its lock. The pid
    comes from the pidfile, so only from a folder the trust rule accepts (another user's
    folder could name any process of this user's)."""
    folder = os.path.dirname(ep.pid)
    try:
        why = paths.folder_problem(folder)
    except OSError:
        why = None  # no folder: no daemon
    if why is not None:
        raise MemcliError(f"not using the daemon files in {folder} ({why})", paths.remedy(folder))
    pid = lock_holder(ep)
    if pid is not None and pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while pid is not None and lock_holder(ep) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    running = pid is not None and lock_holder(ep) is not None
    return {
        "stopped": pid is not None and not running,
        "running": running,
        "pid": pid,
        "socket": ep.socket,
    }


def take_lock(ep: paths.Endpoint, held: int | None = None) -> int:
    """Hold the daemon lock of `ep` (an open fd, kept until exit) and write the pidfile.
    `held`: the lock's fd handed on by the process that started this one (autostart.py),
    taken already; it must be `ep`'s lock file."""
    if held is not None:
        try:
            same, mine = os.fstat(held), os.stat(ep.lock)
        except OSError as exc:
            raise MemcliError(f"--lock-fd {held}: {exc.strerror}") from None
        if (same.st_dev, same.st_ino) != (mine.st_dev, mine.st_ino):
            raise MemcliError(f"--lock-fd {held} is not the lock file {ep.lock}")
        os.set_inheritable(held, False)
    fd = held if held is not None else os.open(ep.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                                               0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:
            pid = Path(ep.pid).read_text(encoding="ascii").strip() or "?"
        except OSError:
            pid = "?"
        raise AlreadyServing(
            f"memcli serve is already running for this database (pid {pid})",
            f"socket {ep.socket}; stop it with `memcli serve stop` or `kill {pid}`",
        ) from None
    tmp = Path(ep.pid + ".tmp")
    tmp.write_text(f"{os.getpid()}\n", encoding="ascii")
    os.replace(tmp, ep.pid)
    return fd


def check_database(settings: Any) -> None:
    """Before anything binds, say plainly why the database cannot be used (exit 1), rather
    than serve nothing: a PostgreSQL server gets memcli's tables (one plain connection), an
    existing file is opened (and migrated); a file not made yet is left to the first write,
    as in-process (a daemon started by a read creates no empty database), once its folder is
    there and a file can be made in it. Closed again: the main process forks and must hold no
    connection."""

    if is_server(settings.db) or os.path.exists(settings.db):
        open_database(settings.db, busy_timeout=settings.busy_timeout).close()
        return
    folder = os.path.dirname(os.path.abspath(settings.db))
    try:
        os.makedirs(folder, exist_ok=True)  # as the first write would
    except OSError as exc:
        raise MemcliError(
            f"cannot open {settings.db}: cannot create its folder ({exc.strerror})",
            "check --db and the folder's permissions",
        ) from None
    probe = os.path.join(folder, f".{os.path.basename(settings.db)}.{os.getpid()}.probe")
    try:  # a file can be made there (root passes every permission check, not /proc's)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        os.unlink(probe)
    except OSError as exc:
        raise MemcliError(
            f"cannot open {settings.db}: cannot create a file in its folder ({exc.strerror})",
            "check --db and the folder's permissions",
        ) from None
