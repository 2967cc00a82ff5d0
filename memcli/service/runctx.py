"""Per-request process state inside `memcli serve`: environment, stdio and working folder.

The daemon runs the very same Typer app for each forwarded command line, on a thread of its
own, so the command must see the caller's world, not the daemon's:

- `os.environ` becomes a proxy whose contents are the current request's environment (a
  contextvar), so `config.py`, rich (COLUMNS, NO_COLOR) and everything else read the caller's
  MEMCLI_TENANT, MEMCLI_KEY, HOME... Outside a request it is the daemon's own environment.
- `sys.stdin`, `sys.stdout`, `sys.stderr` become proxies to the request's streams, opened on the
  file descriptors the client passed over the socket (the caller's own terminal or pipes).
- the thread gets a working folder of its own (Linux: `unshare(CLONE_FS)`, then `chdir`), so
  relative paths (`--db ./x.db`, `ingest notes.json`, a config's relative `db:`) resolve exactly
  as in the caller's process, and messages print them exactly as given. Where that call does not
  exist, requests whose folders differ take turns (`CwdGate`).

Installed only by the daemon (`install()`); this is, with `config.py`, the one module that
touches the environment. Threads a request starts themselves see the daemon's defaults (their
context is empty): the command bodies read the environment and print on the request's thread.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import os
import sys
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, TextIO

_ENV: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("memcli_env",
                                                                               default=None)
_STREAMS: contextvars.ContextVar[tuple[TextIO, TextIO, TextIO] | None] = contextvars.ContextVar(
    "memcli_streams", default=None)
_CLONE_FS = 0x200
_installed = False


class EnvProxy(MutableMapping[str, str]):
    """`os.environ` for the daemon: the current request's environment, else the real one."""

    def __init__(self, real: MutableMapping[str, str]) -> None:
        self.real = real

    def _target(self) -> MutableMapping[str, str]:
        env = _ENV.get()
        return self.real if env is None else env

    def __getitem__(self, key: str) -> str:
        return self._target()[key]

    def __setitem__(self, key: str, value: str) -> None:
        self._target()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._target()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._target()))

    def __len__(self) -> int:
        return len(self._target())

    def copy(self) -> dict[str, str]:
        return dict(self._target())

    def __repr__(self) -> str:
        return f"EnvProxy({dict(self._target())!r})"


class StreamProxy:
    """`sys.stdin` / `sys.stdout` / `sys.stderr` for the daemon: the current request's stream,
    else the daemon's own."""

    def __init__(self, index: int, real: TextIO) -> None:
        self._index = index
        self._real = real

    def _target(self) -> TextIO:
        streams = _STREAMS.get()
        return self._real if streams is None else streams[self._index]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._target())

    def __next__(self) -> str:
        return next(self._target())


def install() -> None:
    """Put the proxies in place (once, in the daemon, before any request runs)."""
    global _installed
    if _installed:
        return
    # Replaced on purpose (not cleared): os.getenv and os.path.expanduser look it up anew.
    os.environ = EnvProxy(os.environ)  # type: ignore[assignment]  # noqa: B003
    sys.stdin = StreamProxy(0, sys.stdin)  # type: ignore[assignment]
    sys.stdout = StreamProxy(1, sys.stdout)  # type: ignore[assignment]
    sys.stderr = StreamProxy(2, sys.stderr)  # type: ignore[assignment]
    _installed = True


@contextlib.contextmanager
def request(env: Mapping[str, str], streams: tuple[TextIO, TextIO, TextIO]) -> Iterator[None]:
    """Run the block with `env` as os.environ and `streams` as sys.std* (this thread only)."""
    env_token = _ENV.set(dict(env))
    stream_token = _STREAMS.set(streams)
    try:
        yield
    finally:
        _STREAMS.reset(stream_token)
        _ENV.reset(env_token)


def _unshare_fs() -> bool:
    """Give the calling thread its own working folder and umask (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.unshare(_CLONE_FS) == 0
    except (OSError, AttributeError):
        return False


class CwdGate:
    """Enter a request's working folder on the current thread.

    With a per-thread folder (Linux) every request just changes its own. Otherwise the folder
    is the process's: requests in the same folder run side by side, a request for another
    folder waits until they are done."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._cwd: str | None = None
        self._users = 0

    @contextlib.contextmanager
    def enter(self, cwd: str, umask: int | None) -> Iterator[None]:
        if _unshare_fs():
            os.chdir(cwd)
            if umask is not None:
                os.umask(umask)
            yield
            return
        with self._cond:
            while self._users and self._cwd != cwd:
                self._cond.wait()
            if not self._users:
                os.chdir(cwd)
                self._cwd = cwd
            self._users += 1
        try:
            yield
        finally:
            with self._cond:
                self._users -= 1
                self._cond.notify_all()
