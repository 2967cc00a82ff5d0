"""A daemon serves requests, not its starter; a database's own daemon is found by its real path.

Real `memcli serve` processes, started by hand or by the CLI itself (auto-start: these tests
remove `MEMCLI_AUTOSTART=0`, and stop whatever their runtime folder holds in a finally):

- an auto-started daemon keeps nothing of the command that started it (its scope, another
  tool's token): unscoped HTTP and MCP writes land in the config file's tenant, a forwarded
  command still runs with its own caller's environment;
- a link re-pointed while a daemon serves never sends that daemon's writes elsewhere;
- a config file's `db:` is the database of client and daemon alike;
- `serve` on a database it cannot open exits 1 in one line;
- a runtime folder of another user (or open to others) is named in one warning line, with the
  fix; a runtime folder too long for a unix socket still gets its daemon;
- `memcli serve stop` stops it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memcli.service.daemon import autostart, paths
from tests.support.daemon import (
    ROOT,
    Daemon,
    daemon_env,
    last_route,
    run_client,
    start_serve,
    stop,
    stop_started,
    wait_until,
)
from tests.support.sockets import answers, second_user
from tests.support.trust import NO_SPARSE

pytestmark = pytest.mark.daemon  # real `memcli serve` processes

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "X-Memcli-Tools": "all"}
STARTER = {"MEMCLI_TENANT": "acme", "MEMCLI_USER": "mallory", "GITHUB_TOKEN": "ghp_starter",
           "AWS_SECRET_ACCESS_KEY": "aws-starter-secret"}


def environ_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.decode(errors="replace").partition("=") for item in f.read().split(b"\0")
                 if item]
    return {key: value for key, _sep, value in pairs}


def tenants_of(db: Path) -> dict[str, str]:
    """text -> tenant of every memory in the database file."""
    import apsw

    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return dict(conn.execute("SELECT content, tenant_id FROM memories"))
    finally:
        conn.close()


def http_client(ep: paths.Endpoint, db: Path | None = None) -> httpx.Client:
    """A client of the daemon's HTTP socket; `db`: the database named to the user's daemon."""
    headers = {"X-Memcli-Db": str(db)} if db is not None else {}
    return httpx.Client(transport=httpx.HTTPTransport(uds=ep.http_socket),
                        base_url="http://localhost", timeout=120, headers=headers)


def mcp_remember(client: httpx.Client, text: str) -> None:
    """An unscoped MCP agent: `remember` (whatever its tool's spelling) with no tenant."""
    listed = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                         headers=MCP_HEADERS)
    assert listed.status_code == 200, listed.text
    (name,) = [t["name"] for t in listed.json()["result"]["tools"]
               if t["name"].endswith("remember")]
    called = client.post("/mcp", headers=MCP_HEADERS, json={
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": name, "arguments": {"text": text}}})
    assert called.status_code == 200 and not called.json()["result"].get("isError"), called.text


@pytest.fixture
def auto(tmp_path) -> Iterator[tuple[Path, dict[str, str], paths.Endpoint]]:
    """(database, environment with auto-start on and `tenant: home-team` in its config file,
    the user's daemon's files); every daemon started from its runtime folder is stopped at
    the end. The config file names the database too: the user's daemon's HTTP requests that
    name none go there."""
    db = tmp_path / "m.db"
    env = daemon_env(tmp_path / "home", db)
    env.pop("MEMCLI_AUTOSTART", None)
    Path(env["MEMCLI_CONFIG"]).write_text(NO_SPARSE + f"tenant: home-team\ndb: '{db}'\n")
    made = subprocess.run([sys.executable, "-m", "memcli", "--no-daemon", "remember",
                           "seed: the office has a plant", "--user-id", "ann"], env=env, cwd=ROOT,
                          capture_output=True)
    assert made.returncode == 0, made.stderr
    try:
        yield db, env, paths.user_endpoint(env)
    finally:
        stop_started(Path(paths.runtime_dir(env)))


def test_an_auto_started_daemon_serves_requests_not_its_starter(auto, tmp_path):
    db, env, ep = auto
    routes = tmp_path / "routes.log"
    first = run_client(["stats"], {**env, **STARTER}, routes=routes)
    assert first.returncode == 0, first.stderr
    assert wait_until(lambda: answers(ep.http_socket), timeout=90), Path(ep.log).read_text()
    pid = int(Path(ep.pid).read_text())
    daemon = environ_of(pid)
    # Nothing of the starter's scope or tokens, nor its database; only the allowlist and the
    # config file.
    for key, value in STARTER.items():
        assert key not in daemon and all(value not in v for v in daemon.values()), key
    assert "MEMCLI_DB" not in daemon
    assert daemon["MEMCLI_CONFIG"] == env["MEMCLI_CONFIG"]
    assert {key for key in daemon
            if not (key in autostart.DAEMON_NAMES or key.startswith("LC_")
                    or key.lower().endswith("_proxy"))} <= {"MEMCLI_CONFIG"}
    # Unscoped HTTP and MCP writes: the config file's tenant.
    with http_client(ep, db) as client:
        wrote = client.post("/api/v1/memories", json={"text": "http: the plant needs water",
                                                      "user_id": "ann"})
        assert wrote.status_code in (200, 201), wrote.text
        mcp_remember(client, "mcp: the plant sits by the window")
    # A forwarded command still runs with its caller's environment (its own tenant).
    cli = run_client(["remember", "cli: acme waters the plant on Mondays", "--user-id", "ann"],
                     {**env, "MEMCLI_TENANT": "acme"}, routes=routes)
    assert cli.returncode == 0, cli.stderr
    assert last_route(routes).startswith("daemon")
    found = tenants_of(db)
    assert found["http: the plant needs water"] == "home-team"
    assert found["mcp: the plant sits by the window"] == "home-team"
    assert found["cli: acme waters the plant on Mondays"] == "acme"


def test_a_repointed_link_never_reaches_the_old_daemon(tmp_path):
    """The daemon serves the file its link named when it started: re-pointing the link sends
    none of its requests to the other database, and clients of the link find the other
    database's daemon (none here: in-process)."""
    home = tmp_path / "home"
    a, b, link = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "link.db"
    env = daemon_env(home, a)
    for db, text in ((a, "alpha: tea in the morning"), (b, "beta: coffee at noon")):
        done = subprocess.run([sys.executable, "-m", "memcli", "--db", str(db), "remember",
                               text], env=env, cwd=ROOT, capture_output=True)
        assert done.returncode == 0, done.stderr
    link.symlink_to(a)
    routes = tmp_path / "routes.log"
    with Daemon(link, env) as daemon:
        ep = paths.endpoint(str(a), env)
        assert daemon.socket == Path(ep.socket)
        status = json.loads(run_client(["--db", str(link), "serve", "status"], env,
                                       routes=routes).stdout)
        assert status["db"] == str(a)
        tmp = tmp_path / "link.tmp"
        tmp.symlink_to(b)
        os.replace(tmp, link)  # re-pointed while the daemon serves
        with http_client(ep) as client:
            wrote = client.post("/api/v1/memories", json={"text": "after: a note for a"})
            assert wrote.status_code in (200, 201), wrote.text
        done = run_client(["--db", str(link), "stats"], env, routes=routes)
        assert done.returncode == 0 and last_route(routes) == "inprocess", done.stderr
    assert "after: a note for a" in tenants_of(a)
    assert "after: a note for a" not in tenants_of(b)


def test_a_config_files_db_is_the_database_of_client_and_daemon(tmp_path):
    """`db:` in the config file, no MEMCLI_DB: the command, the daemon it starts and the
    commands after it all use that file; nothing appears at the default path."""
    home = tmp_path / "home"
    team = tmp_path / "team.db"
    env = daemon_env(home, team)
    env.pop("MEMCLI_DB")
    env.pop("MEMCLI_AUTOSTART")
    config = Path(env["MEMCLI_CONFIG"])
    config.write_text(NO_SPARSE + f"db: '{team}'  # the team's memory\n")
    default = Path(paths.default_db(env))
    routes = tmp_path / "routes.log"
    try:
        first = run_client(["remember", "the team meets on Tuesdays", "--user-id", "ann"], env,
                           routes=routes)
        assert first.returncode == 0, first.stderr
        ep = paths.user_endpoint(env)
        assert wait_until(lambda: answers(ep.socket), timeout=90), Path(ep.log).read_text()
        second = run_client(["query", "when does the team meet", "--user-id", "ann", "--json"],
                            env, routes=routes)
        assert second.returncode == 0, second.stderr
        assert last_route(routes).startswith("daemon")
        assert "Tuesdays" in second.stdout.decode()
        assert "MEMCLI_DB" not in environ_of(int(Path(ep.pid).read_text()))
        state = json.loads(run_client(["serve", "status"], env, routes=routes).stdout)
        assert [entry["db"] for entry in state["databases"]] == [str(team)]
        stray = paths.endpoint(str(default), env)
        assert not default.exists() and not os.path.exists(stray.lock)
    finally:
        stop_started(Path(paths.runtime_dir(env)))


@pytest.mark.parametrize("db", ["/proc/nope/x.db", "/proc/x.db"])
def test_serve_on_a_database_it_cannot_open_exits_1_in_one_line(tmp_path, db):
    env = daemon_env(tmp_path / "home", tmp_path / "unused.db")
    proc = start_serve(env, "--db", db)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    code, out, err = stop(proc)
    assert code == 1 and out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"memcli: error: cannot open {db}: cannot create")


@pytest.mark.parametrize("how", ["another user's", "open to others"])
@pytest.mark.parametrize("mode", ["manual", "auto"])
def test_a_runtime_folder_not_the_users_is_named_with_its_fix(tmp_path, how, mode):
    """Another user made the runtime folder first (0700: this user cannot even look in it),
    or the user's own is open to others: each command says so in one line, naming the folder
    and the fix, and runs in-process; no daemon is started."""
    env = daemon_env(tmp_path / "home", tmp_path / "m.db")
    if mode == "auto":
        env.pop("MEMCLI_AUTOSTART")
    folder = Path(paths.runtime_dir(env))
    folder.mkdir(mode=0o700, parents=True)
    try:
        if how == "another user's":
            user = second_user()
            if user is None:
                pytest.skip("giving a folder to another user needs root and a user `nobody`")
            os.chown(folder, *user)
            why = f"owned by uid {user[0]}, mode 0700"
            fix = (f"have {folder} removed (it is not yours), or set XDG_RUNTIME_DIR to a "
                   "folder only you can enter")
        else:
            os.chmod(folder, 0o755)
            why = f"owned by uid {os.getuid()}, mode 0755"
            fix = f"run `chmod 700 {folder}`"
        done = run_client(["remember", "the folder is checked", "--user-id", "ann"], env,
                          routes=tmp_path / "routes.log")
        assert done.returncode == 0, done.stderr
        assert done.stderr.decode().splitlines() == [
            f"memcli: warning: not using the daemon socket in {folder} ({why}); running "
            f"in-process ({fix})"]
        assert sorted(os.listdir(folder)) == []
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_runtime_folder_too_long_for_a_socket_still_gets_its_daemon(tmp_path):
    """A 100-character XDG_RUNTIME_DIR (a CI machine's TMPDIR, say): the daemon's files go to a
    short private folder, auto-start works and the next command is forwarded."""
    base = tmp_path / "home"
    env = daemon_env(base, tmp_path / "m.db")
    env.pop("MEMCLI_AUTOSTART")
    run = tmp_path / ("r" * (100 - len(str(tmp_path)) - 1))
    run.mkdir(mode=0o700)
    env["XDG_RUNTIME_DIR"] = str(run)
    ep = paths.user_endpoint(env)
    folder = Path(ep.socket).parent
    assert not folder.is_relative_to(run) and len(os.fsencode(ep.http_socket)) < paths.SUN_PATH
    routes = tmp_path / "routes.log"
    try:
        first = run_client(["remember", "the long folder works", "--user-id", "ann"], env,
                           routes=routes)
        assert first.returncode == 0 and first.stderr == b"", first.stderr
        assert wait_until(lambda: answers(ep.socket), timeout=90), Path(ep.log).read_text()
        assert folder.stat().st_mode & 0o777 == 0o700 and folder.stat().st_uid == os.getuid()
        second = run_client(["query", "long folder", "--user-id", "ann", "--json"], env,
                            routes=routes)
        assert second.returncode == 0 and last_route(routes).startswith("daemon")
        assert "long folder works" in second.stdout.decode()
    finally:
        stop_started(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("how", ["database", "MEMCLI_SOCKET"])
def test_serve_stop_stops_the_daemon_and_waits_for_it(tmp_path, how):
    """`serve status --json` and `serve stop` find the daemon by its database, or by the
    socket `MEMCLI_SOCKET` names (a daemon started with `--socket`), as every client does."""
    db = tmp_path / "m.db"
    env = daemon_env(tmp_path / "home", db)
    args: tuple[str, ...] = ()
    if how == "MEMCLI_SOCKET":
        own = tmp_path / "own"
        own.mkdir(mode=0o700)
        args = ("--socket", str(own / "d.sock"))
    routes = tmp_path / "routes.log"
    daemon = Daemon(db, env, *args)
    if how == "MEMCLI_SOCKET":
        daemon.socket = own / "d.sock"
        env = {**env, "MEMCLI_SOCKET": str(own / "d.sock")}
    with daemon:
        status = run_client(["serve", "status", "--json"], env, routes=routes)
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert state["answered"] and state["pid"] == daemon.pid
        t0 = time.monotonic()
        stopped = run_client(["serve", "stop", "--json"], env, routes=routes)
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout) == {"stopped": True, "running": False,
                                              "pid": daemon.pid, "socket": str(daemon.socket)}
        # It has exited (cleanly) by the time `stop` answers.
        assert daemon.proc.wait(timeout=max(1.0, 60 - (time.monotonic() - t0))) == 0
        assert not daemon.socket.exists()
        again = run_client(["serve", "stop"], env, routes=routes)
        assert again.returncode == 0 and json.loads(again.stdout)["stopped"] is False
