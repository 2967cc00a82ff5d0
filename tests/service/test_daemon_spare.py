"""The spare command process: forked and warmed before a command comes, it takes the command.

`memcli serve` keeps one process waiting on its CLI socket (memcli/service/daemon/server.py,
worker.py); the command a client sends is run by a process that existed before the client
connected, Ctrl-C still reaches it, and `serve stop` ends the spare with the daemon. Real
daemons and real processes, told apart through /proc (tests.support.daemon).
"""

from __future__ import annotations

import json
import os
import signal

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
from tests.support.procs import running

pytestmark = pytest.mark.daemon  # real `memcli serve` processes


def spares(daemon: int) -> set[int]:
    """The daemon's children waiting on its CLI socket: they hold the socket it listens on (a
    command's process closes it once it has taken its connection; the HTTP process and the
    indexer never hold it)."""
    sockets = {name for name in open_files(daemon) if name.startswith("socket:")}
    return {pid for pid in children_of(daemon) if open_files(pid) & sockets}


def steady_spare(daemon: int) -> int:
    """The one spare, once the same one has waited for a second (the start's probe of the
    socket is a connection too: the spare that took it ends, and another is forked)."""
    seen: list[set[int]] = []

    def steady() -> bool:
        seen.append(spares(daemon))
        return len(seen) > 10 and len(seen[-1]) == 1 and all(s == seen[-1] for s in seen[-10:])

    assert wait_until(steady, timeout=60, step=0.1)
    return next(iter(seen[-1]))


def command_process(daemon: int, stdin: str) -> int:
    """The daemon's child that holds the client's stdin: the process running its command."""
    found: list[int] = []
    assert wait_until(lambda: bool(found.extend(
        pid for pid in children_of(daemon) if stdin in open_files(pid)) or found), timeout=60)
    return found[0]


def test_a_command_is_answered_by_a_process_forked_before_it_connected(tmp_path):
    db = tmp_path / "s.db"
    env = daemon_env(tmp_path / "home", db)
    routes = tmp_path / "routes.log"
    with Daemon(db, env) as daemon:
        waiting = steady_spare(daemon.pid)
        # `ingest -` blocks reading its stdin until the test writes it: the command's process
        # can be looked at while it runs.
        with piped_client(["ingest", "-"], env, routes=routes) as client:
            stdin = os.readlink(f"/proc/{client.pid}/fd/0")
            assert command_process(daemon.pid, stdin) == waiting
            # It took the connection: the daemon has forked the next spare.
            assert wait_until(lambda: len(spares(daemon.pid) - {waiting}) == 1, timeout=60)
            assert waiting not in spares(daemon.pid)
            out, err = client.communicate(json.dumps({"text": "spare"}).encode(), timeout=60)
        assert last_route(routes).startswith("daemon")
        assert (client.returncode, err) == (0, b""), err
        assert len(json.loads(out)["created"]) == 1
        assert wait_until(lambda: not running(waiting), timeout=60)


def test_ctrl_c_stops_a_command_a_spare_took(tmp_path):
    db = tmp_path / "c.db"
    env = daemon_env(tmp_path / "home", db)
    routes = tmp_path / "routes.log"
    with Daemon(db, env) as daemon:
        waiting = steady_spare(daemon.pid)
        with piped_client(["ingest", "-"], env, routes=routes) as client:
            stdin = os.readlink(f"/proc/{client.pid}/fd/0")
            served = command_process(daemon.pid, stdin)
            assert wait_until(lambda: reading(daemon.pid, stdin), timeout=60)
            client.send_signal(signal.SIGINT)
            client.wait(timeout=60)  # its stdin stays open: only the signal ends the read
            out, err = client.stdout.read(), client.stderr.read()
        assert served == waiting
        assert (client.returncode, out, err) == (130, b"", b"memcli: error: interrupted\n")
        assert wait_until(lambda: not running(served), timeout=60)
        assert daemon.proc.poll() is None  # the daemon serves on, with a spare again
        assert wait_until(lambda: len(spares(daemon.pid)) == 1, timeout=60)
        status = run_client(["serve", "status"], env, routes=routes)
        assert last_route(routes).startswith("daemon")
        assert json.loads(status.stdout)["pid"] == daemon.pid


def test_serve_stop_with_a_spare_waiting_leaves_no_process(tmp_path):
    db = tmp_path / "p.db"
    env = daemon_env(tmp_path / "home", db)
    routes = tmp_path / "routes.log"
    with Daemon(db, env) as daemon:
        spare = steady_spare(daemon.pid)
        family = [daemon.pid, *children_of(daemon.pid)]  # its HTTP process, the spare, ...
        assert spare in family
        stopped = run_client(["serve", "stop"], env, routes=routes)
        assert json.loads(stopped.stdout)["stopped"] is True
        daemon.proc.wait(timeout=60)
        assert wait_until(lambda: not any(running(pid) for pid in family), timeout=60)
