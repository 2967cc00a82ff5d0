"""A forwarded command runs in a process that is the caller's: what only a real process shows.

Environment and working folder seen by a program the command starts (`acb edit`'s editor) and
by C code (libpq reading PG* variables), and Ctrl-C: it stops the command (a real SIGINT, even
in a blocking read), not the daemon. Real daemons, real processes (tests.support.daemon).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.support.daemon import (
    Daemon,
    children_of,
    daemon_env,
    last_route,
    open_files,
    piped_client,
    reading,
    run_client,
    wait_until,
)

pytestmark = pytest.mark.long  # real daemons


def _without_editor(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in ("EDITOR", "VISUAL")}


def test_the_editor_of_acb_edit_sees_the_callers_environment_and_folder(tmp_path):
    db = tmp_path / "e.db"
    env = _without_editor(daemon_env(tmp_path / "home", db))
    project = tmp_path / "project"
    project.mkdir()
    seen = tmp_path / "seen.json"
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import json, os, sys\n"
        f"json.dump({{'cwd': os.getcwd(), 'note': os.environ.get('MEMCLI_TEST_NOTE'),\n"
        f"           'file': sys.argv[1]}}, open({str(seen)!r}, 'w'))\n")
    routes = tmp_path / "routes.log"
    caller = {**env, "EDITOR": f"{sys.executable} {editor}", "MEMCLI_TEST_NOTE": "the caller's"}
    with Daemon(db, env):  # the daemon's environment has no EDITOR, VISUAL or note
        done = run_client(["acb", "edit", "rules"], caller, routes=routes, cwd=project)
        assert last_route(routes).startswith("daemon")
    assert done.returncode == 0, done.stderr
    got = json.loads(seen.read_text())
    assert got["cwd"] == str(project)
    assert got["note"] == "the caller's"
    assert done.stdout.decode().strip() == got["file"]


def test_libpq_reads_the_callers_pg_variables(tmp_path: Path, pg_db: str) -> None:
    """PGOPTIONS in the caller's environment only: the forwarded command's connection is made
    with it (here a read-only session, so the write fails as it does in-process)."""
    env = daemon_env(tmp_path / "home", pg_db)  # type: ignore[arg-type]
    routes = tmp_path / "routes.log"
    caller = {**env, "PGOPTIONS": "-c default_transaction_read_only=on"}
    write = ["ingest", "--text"]
    with Daemon(pg_db, env) as daemon:  # type: ignore[arg-type]
        via = run_client([*write, "a write through the daemon"], caller, routes=routes)
        assert last_route(routes).startswith("daemon")
        local = run_client(["--no-daemon", *write, "a write in-process"], caller, routes=routes)
        assert daemon.proc.poll() is None
    assert via.returncode == local.returncode != 0, (via.stderr, local.stderr)
    assert via.stderr == local.stderr
    assert b"read-only" in via.stderr


def test_ctrl_c_stops_the_command_not_the_daemon(tmp_path):
    db = tmp_path / "c.db"
    env = daemon_env(tmp_path / "home", db)
    routes = tmp_path / "routes.log"
    with Daemon(db, env) as daemon:
        # `ingest -` blocks reading its stdin: only a real signal interrupts that read.
        with piped_client(["ingest", "-"], env, routes=routes) as client:
            stdin = os.readlink(f"/proc/{client.pid}/fd/0")
            # Ctrl-C once the command is blocked reading that stdin (a signal during start-up
            # is what the in-process command does then: another message).
            assert wait_until(lambda: reading(daemon.pid, stdin), timeout=60)
            client.send_signal(signal.SIGINT)
            # The client's stdin stays open: nothing but the signal can end that read.
            client.wait(timeout=60)
            out, err = client.stdout.read(), client.stderr.read()
        assert last_route(routes).startswith("daemon")
        assert (client.returncode, out, err) == (130, b"", b"memcli: error: interrupted\n")
        assert daemon.proc.poll() is None  # the daemon serves on
        assert not any(stdin in open_files(pid) for pid in children_of(daemon.pid))
        status = run_client(["serve", "status"], env, routes=routes)
        assert last_route(routes).startswith("daemon")
        assert json.loads(status.stdout)["pid"] == daemon.pid


