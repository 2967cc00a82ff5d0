"""The process walk the test support shares (tests/support/procs.py): a child found by its
parent, session, command line and environment; a process gone is not listed."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.procs import children, processes, with_argument


def test_a_child_is_found_by_parent_session_argv_and_environment() -> None:
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys; print('up', flush=True); sys.stdin.read()", "marker-x"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             start_new_session=True,
                             env={**os.environ, "MEMCLI_PROCS_PROBE": "yes"})
    try:
        assert child.stdout.readline() == b"up\n"  # past its exec: its own argv and environment
        (found,) = [p for p in processes() if p.pid == child.pid]
        assert found.ppid == os.getpid() and found.session == child.pid
        assert not found.zombie and found.argv[-1] == b"marker-x"
        assert b"MEMCLI_PROCS_PROBE=yes" in (found.environ or [])
        assert found.exe is not None and os.path.exists(found.exe)
        assert child.pid in {p.pid for p in processes() if p.session == child.pid}
    finally:
        child.communicate(b"")
    assert child.pid not in {p.pid for p in processes()}


def test_children_and_a_command_line_argument_find_a_child_without_a_full_walk() -> None:
    """The autouse daemon check's two cheap walks (run after every test): this process's
    children from the kernel's lists, and processes by one argument of their command line."""
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys; print('up', flush=True); sys.stdin.read()",
                              "marker-children"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"up\n"
        assert child.pid in {p.pid for p in children(os.getpid())}
        (found,) = [p for p in with_argument(b"marker-children") if p.pid == child.pid]
        assert found.ppid == os.getpid() and found.argv[-1] == b"marker-children"
        assert not [p for p in with_argument(b"marker-children") if p.pid != child.pid]
    finally:
        child.communicate(b"")
    assert child.pid not in {p.pid for p in children(os.getpid())}
