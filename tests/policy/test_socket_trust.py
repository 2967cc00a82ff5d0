"""A daemon socket someone else could have planted gets nothing from memcli.

Anyone can compute where a user's daemon socket lives. The tests plant a listener there, as a
real second user where the attack needs one (root only: the listener runs as `nobody`), and
record every byte it receives: the CLI, the agent hooks (through the CLI client) and `memcli
mcp`'s bridge must send it nothing, answer in-process, and say why in one warning line. A
socket the user's own process serves gets only the environment a command can read.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memcli.service.daemon import client, paths
from tests.support.daemon import start_serve, stop
from tests.support.sockets import Listener, python_of, second_user, short_tempdir
from tests.support.trust import memcli_env

pytestmark = pytest.mark.daemon  # planted listeners and `memcli` as processes

SECRET = "s3cret-token-never-forwarded"
KEY = base64.b64encode(b"k" * 32).decode()

def other_user() -> tuple[int, int]:
    """(uid, gid) of a second, unprivileged user: creating its sockets needs root."""
    user = second_user()
    if user is None:
        pytest.skip("a listener of another user needs root (CI runs the tests as root) and a "
                    "user `nobody`")
    return user


def python_for(user: tuple[int, int], folder: Path) -> str:
    python = python_of(user, folder)
    if python is None:
        pytest.skip("no python3 the second user can run")
    return python


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder like /tmp (sticky, open to all), inside the real temporary folder; removed."""
    base = Path(tempfile.mkdtemp(prefix="memcli-trust-", dir=short_tempdir()))
    try:
        os.chmod(base, 0o1777)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def caller_env(home: Path, runtime: Path) -> dict[str, str]:
    env = memcli_env(home, home / "m.db")
    env.update(XDG_RUNTIME_DIR=str(runtime), MEMCLI_KEY=KEY, SECRET_API_TOKEN=SECRET)
    env.pop("MEMCLI_SOCKET", None)
    env.pop("MEMCLI_NO_DAEMON", None)
    return env


def memcli(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memcli", *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=120)


def assert_nothing_sent(listener: Listener) -> None:
    everything = b"".join(listener.received)
    assert SECRET.encode() not in everything and KEY.encode() not in everything
    assert everything == b"", everything[:200]


NOT_YOURS = ("have {folder} removed (it is not yours), or set XDG_RUNTIME_DIR to a folder only "
             "you can enter")
CHMOD = "run `chmod 700 {folder}`"
FOREIGN_LISTENER = "remove the sockets there that another user listens on"


def assert_one_warning(stderr: str, folder: Path, why: str, fix: str) -> None:
    """The one warning line: what was refused, why, and what the user can do about it."""
    assert stderr.splitlines() == [f"memcli: warning: not using the daemon socket in {folder} "
                                   f"({why}); running in-process ({fix.format(folder=folder)})"
                                   ], stderr


@pytest.fixture
def fallbacks() -> Iterator[list[Path]]:
    """Runtime folders a test made outside its temporary folders (a long TMPDIR sends them to
    /tmp: memcli.service.daemon.paths.runtime_dir), removed at its end."""
    made: list[Path] = []
    yield made
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def runtime_folder(env: dict[str, str], fallbacks: list[Path]) -> Path:
    folder = Path(paths.runtime_dir(env))
    if not folder.is_relative_to(env["XDG_RUNTIME_DIR"]):
        fallbacks.append(folder)
    return folder


# Each way memcli reaches a daemon: (arguments, stdin, which socket, check of the answer).
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}) + "\n"
ROUTES = {
    "cli": (["remember", "Alice likes green tea"], "", "socket",
            lambda out: json.loads(out)["id"] >= 1),
    "hook": (["hook", "record", "--strict"], json.dumps({"session_id": "s", "prompt": "hi"}),
             "socket", lambda out: out == ""),
    "mcp": (["mcp"], INITIALIZE, "http_socket",
            lambda out: json.loads(out.splitlines()[0])["result"]["serverInfo"]),
}


def daemon_files(env: dict[str, str], kind: str) -> paths.Endpoint:
    """The files of the daemon a client looks for: the database's own, or the user's (the
    one it looks for next, and starts)."""
    return paths.endpoint(env["MEMCLI_DB"], env) if kind == "database" \
        else paths.user_endpoint(env)


@pytest.mark.parametrize("kind", ["database", "user"])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_folder_planted_by_another_user_gets_nothing(tmp_path, shared_tmp, fallbacks,
                                                       route, kind):
    """The attack: another user made the caller's runtime folder first (mode 777) with a
    listening socket of the right name (the database's daemon's, or the user's)."""
    user = other_user()
    args, stdin, which, answered = ROUTES[route]
    env = caller_env(tmp_path / "home", shared_tmp)
    folder = runtime_folder(env, fallbacks)
    name = os.path.basename(getattr(daemon_files(env, kind), which))
    with Listener(python_for(user, shared_tmp), folder, 0o777, name, user) as listener:
        done = memcli(env, *args, stdin=stdin)
    assert_nothing_sent(listener)
    assert done.returncode == 0, done.stderr
    assert answered(done.stdout)
    assert_one_warning(done.stderr, folder, f"owned by uid {user[0]}, mode 0777", NOT_YOURS)


def test_own_folder_open_to_others_is_refused(tmp_path, fallbacks):
    """The caller's own folder, but mode 777: anyone could have replaced the socket in it."""
    env = caller_env(tmp_path / "home", tmp_path / "run")
    folder = runtime_folder(env, fallbacks)
    name = os.path.basename(paths.endpoint(env["MEMCLI_DB"], env).socket)
    with Listener(sys.executable, folder, 0o777, name) as listener:
        done = memcli(env, "remember", "Alice likes green tea")
    assert_nothing_sent(listener)
    assert done.returncode == 0 and json.loads(done.stdout)["id"] >= 1, done.stderr
    assert_one_warning(done.stderr, folder, f"owned by uid {os.getuid()}, mode 0777", CHMOD)


@pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="SO_PEERCRED is Linux's")
@pytest.mark.parametrize("how", ["runtime folder", "user's daemon", "MEMCLI_SOCKET"])
def test_a_listener_of_another_user_is_refused(tmp_path, shared_tmp, fallbacks, how):
    """The folder looks right (the caller's, 0700) but the process listening in it runs as
    another user: found by the connection's peer credentials, before anything is sent."""
    user = other_user()
    env = caller_env(tmp_path / "home", shared_tmp)
    folder = (shared_tmp / "elsewhere" if how == "MEMCLI_SOCKET"
              else runtime_folder(env, fallbacks))
    name = ("d.sock" if how == "MEMCLI_SOCKET" else os.path.basename(
        daemon_files(env, "database" if how == "runtime folder" else "user").socket))
    if how == "MEMCLI_SOCKET":
        env.update(MEMCLI_SOCKET=str(folder / name), XDG_RUNTIME_DIR=str(tmp_path / "run"))
    with Listener(python_for(user, shared_tmp), folder, 0o700, name, user) as listener:
        os.chown(folder, os.getuid(), os.getgid())  # the folder is now the caller's, 0700
        info = folder.stat()
        assert info.st_uid == os.getuid() and info.st_mode & 0o777 == 0o700
        done = memcli(env, "remember", "Alice likes green tea")
    assert_nothing_sent(listener)
    assert done.returncode == 0 and json.loads(done.stdout)["id"] >= 1, done.stderr
    assert_one_warning(done.stderr, folder, f"its listener runs as uid {user[0]}",
                       FOREIGN_LISTENER)


def test_only_the_environment_a_command_reads_is_forwarded(monkeypatch):
    for key, value in {"SECRET_API_TOKEN": SECRET, "AWS_SECRET_ACCESS_KEY": "aws",
                       "MEMCLI_TENANT": "acme", "MEMCLI_KEY": KEY, "LANG": "C.UTF-8",
                       "LC_ALL": "C.UTF-8", "COLUMNS": "90", "NO_COLOR": "1",
                       "PGHOST": "/run/pg", "OPENAI_API_KEY": "sk-x", "TZ": "UTC",
                       "https_proxy": "http://proxy:3128"}.items():
        monkeypatch.setenv(key, value)
    env = client.decode_request(client.encode_request(["stats"]))["env"]
    assert "SECRET_API_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert SECRET not in json.dumps(env)
    for key in ("MEMCLI_TENANT", "MEMCLI_KEY", "LANG", "LC_ALL", "COLUMNS", "NO_COLOR",
                "PGHOST", "OPENAI_API_KEY", "TZ", "https_proxy", "HOME", "XDG_DATA_HOME"):
        assert env[key] == os.environ[key], key


@pytest.mark.parametrize("kind", ["database", "user"])
def test_the_users_own_socket_receives_the_forwarded_environment_only(tmp_path, fallbacks,
                                                                      kind):
    """Through the real client process: a listener of the caller's own, in a private folder,
    gets the request, with MEMCLI_* and without another tool's secret."""
    env = caller_env(tmp_path / "home", tmp_path / "run")
    folder = runtime_folder(env, fallbacks)
    name = os.path.basename(daemon_files(env, kind).socket)
    with Listener(sys.executable, folder, 0o700, name) as listener:
        done = memcli(env, "remember", "Alice likes green tea")
    assert done.returncode == 0 and done.stderr == "", done.stderr  # in-process after it
    request = b"".join(listener.received)
    sent = client.decode_request(request[4:])
    assert sent["argv"] == ["remember", "Alice likes green tea"]
    assert sent["env"]["MEMCLI_KEY"] == KEY and sent["env"]["MEMCLI_DB"] == env["MEMCLI_DB"]
    assert "SECRET_API_TOKEN" not in sent["env"] and SECRET.encode() not in request


def test_serve_refuses_a_socket_folder_its_clients_would_refuse(tmp_path):
    env = caller_env(tmp_path / "home", tmp_path / "run")
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    proc = start_serve(env, "--socket", str(folder / "d.sock"))
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    code, _out, err = stop(proc)
    assert code == 1 and "is open to other users (mode 755)" in err, err
    assert "choose a --socket folder only you can enter" in err
    assert not (folder / "d.sock").exists()
