"""Warm by default: a command that finds no daemon starts `memcli serve` in the background.

Every other test runs with `MEMCLI_AUTOSTART=0` (tests/conftest.py); these remove it. An
auto-started daemon is detached (not a child of the test), so each test kills whatever
process names its runtime folder on its command line, in a finally (`stop_started`).
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memcli.config import load_settings
from memcli.service.daemon import autostart, paths
from tests.support.daemon import (
    _CLIENT,
    ROOT,
    Daemon,
    daemon_env,
    last_route,
    processes_naming,
    run_client,
    stop_started,
    wait_until,
)

pytestmark = pytest.mark.daemon  # real `memcli serve` processes, started by the CLI


@pytest.fixture
def warm(tmp_path) -> Iterator[tuple[Path, dict[str, str], paths.Endpoint]]:
    """(database, environment with auto-start on, the daemon's files); every daemon started
    from its runtime folder is stopped at the end."""
    db = tmp_path / "m.db"
    env = daemon_env(tmp_path / "home", db)
    env.pop("MEMCLI_AUTOSTART", None)
    ep = paths.user_endpoint(env)  # the user's daemon: what the CLI starts
    made = subprocess.run([sys.executable, "-m", "memcli", "--no-daemon", "remember",
                           "I drink green tea", "--user", "ann"], env=env, cwd=ROOT,
                          capture_output=True)
    assert made.returncode == 0 and not os.path.exists(ep.log), made.stderr
    try:
        yield db, env, ep
    finally:
        stop_started(Path(paths.runtime_dir(env)))


def answers(ep: paths.Endpoint) -> bool:
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(ep.socket)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def test_first_command_starts_a_daemon_that_answers_the_next(warm, tmp_path):
    db, env, ep = warm
    routes = tmp_path / "routes.log"
    held_r, held_w = os.pipe()  # an fd the caller has beside 0-2, as a shell may pass one
    try:
        first = subprocess.run([sys.executable, "-c", _CLIENT, "remember",
                                "I drink black coffee", "--user", "ann"],
                               env={**env, "MEMCLI_TEST_ROUTE_LOG": str(routes)}, cwd=ROOT,
                               capture_output=True, pass_fds=[held_w], timeout=120)
        os.close(held_w)
        assert first.returncode == 0, first.stderr
        assert last_route(routes) == "inprocess"  # the first command does not wait for it
        assert wait_until(lambda: answers(ep), timeout=60), Path(ep.log).read_text()
        # The daemon keeps none of the caller's fds open: its end of the pipe is closed.
        assert select.select([held_r], [], [], 30)[0] and os.read(held_r, 1) == b""
    finally:
        os.close(held_r)
    second = run_client(["query", "tea", "--user", "ann", "--json"], env, routes=routes)
    assert second.returncode == 0, second.stderr
    assert last_route(routes).startswith("daemon")
    assert "green tea" in second.stdout.decode()
    status = run_client(["serve", "status"], env, routes=routes)
    state = json.loads(status.stdout)
    assert state["answered"] and state["auto_started"]
    assert state["idle_exit_min"] == pytest.approx(autostart.DEFAULT_IDLE_EXIT)
    assert state["log"] == ep.log and "serving every database" in Path(ep.log).read_text()
    assert [entry["db"] for entry in state["databases"]] == [str(db.resolve())]
    assert state["pid"] == int(Path(ep.pid).read_text())
    stats = json.loads(run_client(["stats"], env, routes=routes).stdout)
    assert stats["daemon"]["answered"] and stats["daemon"]["pid"] == state["pid"]
    assert stats["daemon"]["started_at"] == state["started_at"]
    # Detached: a session of its own (not its leader: it can never take a terminal), stdin
    # /dev/null, output to the log.
    pid = state["pid"]
    assert os.getsid(pid) not in (pid, os.getsid(0))
    assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull
    assert os.readlink(f"/proc/{pid}/fd/2") == ep.log


def test_idle_exit_ends_the_auto_started_daemon(warm, tmp_path):
    _db, env, ep = warm
    env["MEMCLI_DAEMON_IDLE_EXIT"] = "0.04"  # minutes: 2.4 s
    run_client(["stats"], env, routes=tmp_path / "routes.log")
    assert wait_until(lambda: os.path.exists(ep.pid), timeout=60)
    pid = int(Path(ep.pid).read_text())
    assert wait_until(lambda: not processes_naming(ep.socket), timeout=60)
    # Its files go as it ends (at load 13 a check right after its processes were gone still
    # saw the pid file once, the socket gone, then nothing).
    assert wait_until(lambda: not os.path.exists(ep.socket) and not os.path.exists(ep.pid),
                      timeout=30)
    assert f"pid {pid}" in Path(ep.log).read_text() and "serve stopped" in Path(ep.log).read_text()


def test_two_racing_first_commands_leave_one_daemon(warm, tmp_path):
    _db, env, ep = warm
    racers = [subprocess.Popen([sys.executable, "-c", _CLIENT, "stats"], cwd=ROOT,
                               env={**env, "MEMCLI_TEST_ROUTE_LOG": str(tmp_path / f"r{i}")},
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE) for i in range(2)]
    try:
        for proc in racers:
            assert proc.wait(timeout=120) == 0, proc.stderr.read()
    finally:
        for proc in racers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stderr.close()
    assert wait_until(lambda: answers(ep), timeout=60)
    # A second daemon, if both started one, finds the lock taken and exits 75.
    assert wait_until(lambda: len(processes_naming(ep.socket)) == 1, timeout=60), \
        Path(ep.log).read_text()


@pytest.mark.parametrize("how", ["flag", "env", "config off", "config manual", "autostart 0"])
def test_each_opt_out_starts_nothing(warm, tmp_path, how):
    _db, env, ep = warm
    args = ["stats"]
    if how == "flag":
        args = ["--no-daemon", "stats"]
    elif how == "env":
        env["MEMCLI_NO_DAEMON"] = "1"
    elif how == "autostart 0":
        env["MEMCLI_AUTOSTART"] = "0"
    else:
        config = Path(env["MEMCLI_CONFIG"])
        config.write_text(config.read_text() + f"daemon: {how.split()[1]}\n")
    done = run_client(args, env, routes=tmp_path / "routes.log")
    assert done.returncode == 0, done.stderr
    assert not os.path.exists(ep.log) and not os.path.exists(ep.lock)


@pytest.mark.parametrize("args", [["--help"], ["query", "--help"], ["--version"], ["mcp", "--help"],
                                  ["serve", "status"], []])
def test_commands_that_start_nothing(warm, tmp_path, args):
    _db, env, ep = warm
    run_client(args, env, routes=tmp_path / "routes.log")
    assert not os.path.exists(ep.log) and not os.path.exists(ep.lock)


def test_an_untrusted_socket_folder_starts_nothing(warm, tmp_path):
    _db, env, ep = warm
    folder = Path(ep.socket).parent
    folder.mkdir(parents=True, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o755)  # others may enter: a socket here could be someone else's
    done = run_client(["stats"], env, routes=tmp_path / "routes.log")
    assert done.returncode == 0
    assert b"memcli: warning: not using the daemon socket in" in done.stderr
    assert not os.path.exists(ep.log) and not os.path.exists(ep.lock)
    # A socket file planted there: refused, and nothing started either.
    Path(ep.socket).touch()
    done = run_client(["stats"], env, routes=tmp_path / "routes.log")
    assert b"memcli: warning: not using the daemon socket in" in done.stderr
    assert not os.path.exists(ep.log) and not os.path.exists(ep.lock)


def test_mode_and_idle_exit_from_env_and_config():
    assert autostart.mode({}, {}) == "auto"
    assert autostart.mode({"MEMCLI_NO_DAEMON": "1"}, {}) == "off"
    assert autostart.mode({"MEMCLI_AUTOSTART": "0"}, {}) == "manual"
    assert autostart.mode({"MEMCLI_AUTOSTART": "0"}, {"daemon": "off"}) == "off"
    assert autostart.mode({}, {"daemon": "false"}) == "off"
    assert autostart.idle_exit({}, {}) == autostart.DEFAULT_IDLE_EXIT
    assert autostart.idle_exit({}, {"daemon_idle_exit": "2"}) == 2
    assert autostart.idle_exit({"MEMCLI_DAEMON_IDLE_EXIT": "0.5"}, {"daemon_idle_exit": "2"}) \
        == pytest.approx(0.5)


@pytest.mark.parametrize(("text", "mode"), [("off", "off"), ("manual", "manual"),
                                            ("'auto'", "auto"), ("no  # never", "off")])
def test_config_key_read_alike_by_client_and_settings(tmp_path, monkeypatch, text, mode):
    """The client reads `daemon:` as text, the app's settings as YAML: they agree."""
    config = tmp_path / "config.yaml"
    config.write_text(f"tenant: t\ndaemon: {text}\ndaemon_idle_exit: 3\n")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    monkeypatch.delenv("MEMCLI_AUTOSTART")
    settings = load_settings(str(tmp_path / "m.db"))
    assert autostart.mode(os.environ) == settings.daemon == mode
    assert autostart.idle_exit(os.environ, autostart.config_values(os.environ)) \
        == pytest.approx(settings.daemon_idle_exit) == pytest.approx(3)


def test_config_off_leaves_a_running_daemon_alone_and_manual_uses_it(warm, tmp_path):
    db, env, _ep = warm
    env["MEMCLI_AUTOSTART"] = "0"
    config = Path(env["MEMCLI_CONFIG"])
    routes = tmp_path / "routes.log"
    with Daemon(db, env):
        for word, route in (("off", "inprocess"), ("manual", "daemon")):
            config.write_text(config.read_text() + f"daemon: {word}\n")
            done = run_client(["stats"], env, routes=routes)
            assert done.returncode == 0, done.stderr
            assert last_route(routes).startswith(route)
            assert json.loads(done.stdout)["daemon"]["running"]
            assert json.loads(done.stdout)["daemon"]["answered"] is (route == "daemon")
            assert json.loads(done.stdout)["daemon"]["auto_started"] is (
                False if route == "daemon" else None)


def test_a_postgresql_database_gets_its_daemon_too(tmp_path, pg_db):
    env = daemon_env(tmp_path / "home", pg_db)  # type: ignore[arg-type]
    env.pop("MEMCLI_AUTOSTART", None)
    ep = paths.user_endpoint(env)
    routes = tmp_path / "routes.log"
    try:
        first = run_client(["remember", "I drink green tea", "--user", "ann"], env,
                           routes=routes)
        assert first.returncode == 0, first.stderr
        assert last_route(routes) == "inprocess"
        assert wait_until(lambda: answers(ep), timeout=60), Path(ep.log).read_text()
        found = run_client(["query", "tea", "--user", "ann", "--json"], env, routes=routes)
        assert found.returncode == 0, found.stderr
        assert last_route(routes).startswith("daemon") and "green tea" in found.stdout.decode()
        # The location (a password in it, often) is never on the daemon's command line,
        # which every user can read, nor in its environment: each command brings its own.
        pid = int(Path(ep.pid).read_text())
        for what in ("cmdline", "environ"):
            with open(f"/proc/{pid}/{what}", "rb") as f:
                assert pg_db.encode() not in f.read()
    finally:
        stop_started(Path(paths.runtime_dir(env)))
