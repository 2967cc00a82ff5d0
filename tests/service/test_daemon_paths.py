"""Where a daemon is looked for, without starting one: the runtime folder (short enough for a
unix socket, trusted or named in one warning line), the database a command line targets (the
config file's `db:` as the app's settings read it), and `memcli ui` / `serve status` / `serve
stop` as a client finds them (`--socket`, `MEMCLI_SOCKET`). The daemons themselves are in
tests/service/test_daemon_identity.py."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from memcli.cli import mcp_bridge
from memcli.config import load_settings
from memcli.service.daemon import autostart, paths
from tests.support.http_api import serving
from tests.support.viewer import build_viewer_app

LONG = 100  # characters of a runtime folder a CI machine may well have (issue: 100)


def long_folder(tmp_path: Path, length: int = LONG) -> Path:
    """A folder whose path is `length` characters long, made 0700."""
    pad = length - len(str(tmp_path)) - 1
    assert pad > 0
    folder = tmp_path / ("r" * pad)
    folder.mkdir(mode=0o700)
    assert len(str(folder)) == length
    return folder


def test_a_long_runtime_folder_falls_back_to_a_short_private_one(tmp_path):
    run = long_folder(tmp_path)
    env = {"XDG_RUNTIME_DIR": str(run)}
    ep = paths.endpoint(str(tmp_path / "m.db"), env)
    assert len(os.fsencode(ep.http_socket)) < paths.SUN_PATH
    folder = os.path.dirname(ep.socket)
    assert folder.startswith(f"/tmp/memcli-{os.getuid()}-")
    # Every process computing it from the same environment meets at the same folder; another
    # runtime folder gets another one.
    assert paths.runtime_dir(env) == folder
    other = paths.runtime_dir({"XDG_RUNTIME_DIR": str(run) + "x"})
    assert other != folder and other.startswith(f"/tmp/memcli-{os.getuid()}-")
    # A unix socket binds there once the folder is made under the trust rule.
    paths.ensure_private_dir(folder)
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(ep.http_socket)
        sock.close()
        os.unlink(ep.http_socket)
        assert os.stat(folder).st_mode & 0o777 == 0o700
    finally:
        os.rmdir(folder)
    # A runtime folder short enough stays where it was.
    short = {"XDG_RUNTIME_DIR": str(tmp_path)}
    assert paths.runtime_dir(short) == str(tmp_path / "memcli")


@pytest.mark.parametrize(("line", "value"), [
    ("db: {db}", "{db}"),
    ("db: '{db}'", "{db}"),
    ('db: "{db}"  # the team memory', "{db}"),
    ("db: {db} # the team memory", "{db}"),
    ("db: rel/m.db", "rel/m.db"),
    ("db:", None),
    ("db: ~", None),
    ("db: null", None),
])
def test_the_clients_reading_of_db_agrees_with_the_settings(tmp_path, monkeypatch, line,
                                                             value):
    """The client reads `db:` as text (no yaml on its route), the settings with yaml: the
    same database, so client and daemon meet at its socket."""
    db = str(tmp_path / "team.db")
    config = tmp_path / "config.yaml"
    config.write_text(f"tenant: t\n{line.format(db=db)}\ndaemon: manual\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    monkeypatch.delenv("MEMCLI_DB", raising=False)
    settings = load_settings()
    expected = value.format(db=db) if value else str(paths.default_db(os.environ))
    assert paths.guess_db([], os.environ) == expected == str(settings.db)
    assert paths.db_key(expected) == paths.db_key(settings.db)
    # --db and MEMCLI_DB still come first.
    assert paths.guess_db(["--db", "x.db"], os.environ) == "x.db"
    monkeypatch.setenv("MEMCLI_DB", "y.db")
    assert paths.guess_db([], os.environ) == "y.db"


@pytest.mark.parametrize("line", ["db: &anchor /x.db", "db: [a]", "db: !!str /x.db",
                                  "db: 'it''s.db'", 'db: "a\\tb.db"', "db:\n  /x.db",
                                  "db: /x\n  .db"])
def test_a_db_value_the_client_cannot_read_for_sure_routes_nowhere(tmp_path, monkeypatch,
                                                                    line):
    """YAML beyond a plain or simply quoted scalar: the client does not guess (the command
    runs in-process and starts no daemon for another database)."""
    config = tmp_path / "config.yaml"
    config.write_text(line + "\n")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    monkeypatch.delenv("MEMCLI_DB", raising=False)
    assert paths.guess_db([], os.environ) is None
    assert paths.guess_db(["--db", "x.db"], os.environ) == "x.db"


def test_the_daemons_environment_is_the_allowlist(tmp_path):
    """What an auto-started daemon is given: the config file's path, memcli's settings of the
    memory and what Python needs; never a database (each command names its own), a scope or
    another tool's token."""
    starter = {"PATH": "/usr/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
               "LC_ALL": "C.UTF-8", "PYTHONPATH": "/src", "TMPDIR": "/var/tmp",
               "XDG_RUNTIME_DIR": "/run/user/1", "MEMCLI_EMBEDDER": "hash",
               "MEMCLI_KEY": "k", "PGPASSFILE": "/p", "https_proxy": "http://proxy:3128",
               "MEMCLI_CATEGORIES": "cats.yaml",
               # what it must not get
               "MEMCLI_TENANT": "acme", "MEMCLI_USER": "ann", "MEMCLI_AGENT": "a",
               "MEMCLI_APP": "app", "MEMCLI_SOCKET": "/s.sock", "MEMCLI_NO_DAEMON": "0",
               "MEMCLI_AUTOSTART": "1", "GITHUB_TOKEN": "ghp_x", "AWS_SECRET_ACCESS_KEY": "y",
               "SSH_AUTH_SOCK": "/agent", "MEMCLI_DB": "other.db"}
    got = autostart.daemon_env(starter)
    assert got["MEMCLI_CONFIG"] == str(tmp_path / ".config" / "memcli" / "config.yaml")
    assert got["MEMCLI_CATEGORIES"] == os.path.abspath("cats.yaml")
    for key in ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "TMPDIR", "XDG_RUNTIME_DIR",
                "MEMCLI_EMBEDDER", "MEMCLI_KEY", "https_proxy"):
        assert got[key] == starter[key], key
    for key in ("MEMCLI_TENANT", "MEMCLI_USER", "MEMCLI_AGENT", "MEMCLI_APP", "MEMCLI_SOCKET",
                "MEMCLI_NO_DAEMON", "MEMCLI_AUTOSTART", "GITHUB_TOKEN",
                "AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "PGPASSFILE", "MEMCLI_DB"):
        assert key not in got, key


def test_the_users_daemon_is_one_per_configuration(tmp_path, monkeypatch):
    """The user's daemon's key: the same for every database, scope and routing setting of a
    command; another for another config file's bytes or path, or another model or key
    setting (a relative path counted as the absolute one it names)."""
    config = tmp_path / "config.yaml"
    config.write_text("tenant: t\n")
    base = {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path), "MEMCLI_CONFIG": str(config),
            "MEMCLI_EMBEDDER": "hash"}
    key = paths.user_key(base)
    assert len(key) == 16 and int(key, 16) >= 0
    same = [{**base, "MEMCLI_DB": str(tmp_path / "a.db")}, {**base, "MEMCLI_TENANT": "acme",
            "MEMCLI_USER": "ann", "MEMCLI_AUTOSTART": "1", "GITHUB_TOKEN": "x"}]
    for env in same:
        assert paths.user_key(env) == key
    other_config = tmp_path / "other.yaml"
    other_config.write_text("tenant: t\n")
    monkeypatch.chdir(tmp_path)
    differ = [{**base, "MEMCLI_EMBEDDER": "e5-small"}, {**base, "MEMCLI_KEY": "k"},
              {**base, "MEMCLI_CONFIG": str(other_config)}, {**base, "OPENAI_BASE_URL": "u"}]
    keys = {paths.user_key(env) for env in differ}
    assert key not in keys and len(keys) == len(differ)
    relative = paths.user_key({**base, "MEMCLI_CATEGORIES": "cats.yaml"})
    assert relative == paths.user_key({**base, "MEMCLI_CATEGORIES": str(tmp_path / "cats.yaml")})
    config.write_text("tenant: t\nembedder:\n  provider: e5-small\n")  # the bytes changed
    assert paths.user_key(base) != key
    ep = paths.user_endpoint(base)
    assert os.path.basename(ep.socket) == f"u-{paths.user_key(base)}.sock"
    assert ep.http_socket.endswith(".http.sock") and paths.fits(ep.http_socket)


# -- `memcli ui`, `serve status`, `serve stop` as clients ------------------------------------
def _own_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "own"
    folder.mkdir(mode=0o700)
    return folder


def test_ui_honours_memcli_socket(cli, db_path, tmp_path, monkeypatch) -> None:
    app = build_viewer_app(db_path, tmp_path, monkeypatch, ui_url="http://127.0.0.1:8767")
    folder = _own_folder(tmp_path)
    with serving(app, uds=folder / "d.http.sock"):
        monkeypatch.setenv("MEMCLI_SOCKET", str(folder / "d.sock"))
        r = cli("ui", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["url"].startswith("http://127.0.0.1:8767/ui/login?code=")


def test_ui_never_says_to_start_a_daemon_that_runs(cli, db_path, tmp_path, monkeypatch) -> None:
    """A daemon without a TCP port (one the CLI started, say): `memcli serve --port` would
    exit 75 beside it, so the user is told to stop it first."""
    app = build_viewer_app(db_path, tmp_path, monkeypatch, ui_url=None)
    ep = paths.endpoint(load_settings(db_path).db)
    paths.ensure_private_dir(os.path.dirname(ep.socket))
    with serving(app, uds=Path(ep.http_socket)):
        r = cli("ui")
    assert r.exit_code == 1 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("memcli: error: the daemon serves no TCP port")
    assert "`memcli serve stop`" in r.stderr and "then start `memcli serve --port 8765`" in \
        r.stderr


def test_serve_status_and_stop_take_json_and_memcli_socket(cli, tmp_path, monkeypatch) -> None:
    folder = _own_folder(tmp_path)
    monkeypatch.setenv("MEMCLI_SOCKET", str(folder / "d.sock"))
    status = cli("serve", "status", "--json")
    assert status.exit_code == 1  # none runs
    assert json.loads(status.stdout) == {"running": False, "pid": None, "answered": False,
                                         "socket": str(folder / "d.sock")}
    text = cli("serve", "status", "--format", "text")
    assert text.stdout == f"memcli serve: not running ({folder / 'd.sock'})\n"
    stop = cli("serve", "stop", "--json")
    assert stop.exit_code == 0, stop.stderr
    assert json.loads(stop.stdout) == {"stopped": False, "running": False, "pid": None,
                                       "socket": str(folder / "d.sock")}


def test_serve_stop_takes_no_pid_from_a_folder_others_could_write(cli, tmp_path,
                                                                  monkeypatch) -> None:
    folder = tmp_path / "open"
    folder.mkdir()
    os.chmod(folder, 0o777)
    (folder / "d.pid").write_text(f"{os.getpid()}\n")  # would name the test's own process
    monkeypatch.setenv("MEMCLI_SOCKET", str(folder / "d.sock"))
    r = cli("serve", "stop")
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"memcli: error: not using the daemon files in {folder} (owned by uid {os.getuid()}, "
        f"mode 0777) (run `chmod 700 {folder}`)"]


def test_serve_refuses_a_socket_path_too_long_in_one_line(cli, tmp_path) -> None:
    folder = long_folder(tmp_path)
    r = cli("serve", "--socket", str(folder / "d.sock"))
    assert r.exit_code == 2 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"memcli: error: the socket path {folder}/d.http.sock is too long")
    assert line.endswith("(pass a shorter --socket)")


def test_memcli_mcp_finds_the_databases_daemon_else_the_users(tmp_path, monkeypatch):
    """`memcli mcp`'s bridge: the HTTP socket of the daemon started for the database when one
    listens, else the user's daemon's; the database named as the daemon's processes name it
    (the header X-Memcli-Db), a file by its real path."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    real = tmp_path / "real.db"
    (tmp_path / "link.db").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    env = {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(run), "MEMCLI_DB": "link.db"}
    assert mcp_bridge.database(None, env) == str(real)
    assert mcp_bridge.database("other.db", env) == str(tmp_path / "other.db")
    assert mcp_bridge.daemon_http_socket(None, env) is None  # none listens
    folder = paths.runtime_dir(env)
    paths.ensure_private_dir(folder)
    listening = []
    try:
        for ep in (paths.user_endpoint(env), paths.endpoint("link.db", env)):
            sock = socket.socket(socket.AF_UNIX)
            sock.bind(ep.http_socket)
            sock.listen(4)
            listening.append(sock)
            assert mcp_bridge.daemon_http_socket(None, env) == ep.http_socket
    finally:
        for sock in listening:
            sock.close()
