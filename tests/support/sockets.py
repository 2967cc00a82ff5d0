"""A listener planted at a daemon socket's path, recording every byte it receives.

Shared by tests/policy/test_socket_trust.py and bench/trust_attacks.py (standard library only): the
listener runs as a real second user (`nobody`, which needs root) or as this process's own, in a
folder of the mode it is given, and reports each connection's bytes when it is stopped.
`answers(path)` says whether anything listens at a socket path.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

SHORT_TEMP = 24  # characters of TMPDIR that leave a test's socket paths under sun_path


def short_tempdir() -> str | None:
    """The folder for temporary folders that hold sockets: TMPDIR's (None: tempfile's own)
    while it leaves room under sun_path (108 bytes), else /tmp. A CI runner's deep TMPDIR would
    otherwise make the sockets a test binds at paths of its own too long to bind."""
    return None if len(tempfile.gettempdir()) <= SHORT_TEMP else "/tmp"

# The planted listener (standard library only, so any python3 runs it as another user): makes
# its folder with the given mode, listens, prints "ready", then one line per connection with
# the hex of every byte received (and closes any file descriptors passed to it).
LISTENER = r"""
import array, os, socket, sys
folder, mode, name = sys.argv[1], int(sys.argv[2], 8), sys.argv[3]
os.makedirs(folder, exist_ok=True)
os.chmod(folder, mode)
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(os.path.join(folder, name))
os.chmod(os.path.join(folder, name), 0o777)
srv.listen(8)
print("ready", flush=True)
while True:
    conn, _ = srv.accept()
    conn.settimeout(1.0)
    got = b""
    try:
        while True:
            if got[4:12] == b"memcli/1" and len(got) >= 4 + int.from_bytes(got[:4], "big"):
                break  # a whole CLI request
            data, anc, _flags, _addr = conn.recvmsg(1 << 16, socket.CMSG_SPACE(64))
            for _level, _kind, payload in anc:
                for fd in array.array("i", payload[: len(payload) - len(payload) % 4]):
                    os.close(fd)
            if not data:
                break
            got += data
    except OSError:
        pass
    print("conn", got.hex(), flush=True)
    conn.close()
"""


class Listener:
    """LISTENER as `user` (uid, gid; None: this process's own), killed on leaving."""

    def __init__(self, python: str, folder: Path, mode: int, name: str,
                 user: tuple[int, int] | None = None) -> None:
        ids = {"user": user[0], "group": user[1], "extra_groups": []} if user else {}
        self.proc = subprocess.Popen(
            [python, "-c", LISTENER, str(folder), f"{mode:o}", name], cwd="/",
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **ids)
        self.received: list[bytes] = []

    def __enter__(self) -> Listener:
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            self.stop()
            raise AssertionError(f"the listener did not start: {self.proc.stderr.read()}")
        return self

    def stop(self) -> None:
        self.proc.kill()
        out, _err = self.proc.communicate()
        self.received = [bytes.fromhex(line.split()[1] if len(line.split()) > 1 else "")
                         for line in out.splitlines() if line.startswith("conn")]

    def __exit__(self, *exc: object) -> None:
        self.stop()


def second_user() -> tuple[int, int] | None:
    """(uid, gid) of `nobody`, a second, unprivileged user; None unless this process is root
    (creating another user's sockets needs it) and the user exists."""
    if os.getuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def python_of(user: tuple[int, int], folder: Path) -> str | None:
    """A python3 that `user` can run and that can reach `folder` (this process's own may sit in
    root's home), or None."""
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if not candidate:
            continue
        try:
            done = subprocess.run([candidate, "-c", "import os, sys; os.stat(sys.argv[1])",
                                   str(folder)], user=user[0], group=user[1],
                                  extra_groups=[], cwd="/", capture_output=True, timeout=60)
        except OSError:
            continue
        if done.returncode == 0:
            return candidate
    return None


def answers(path: str) -> bool:
    """Something listens on the unix socket at `path` (a connect succeeds)."""
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()
