"""The user's daemon (`memcli serve --all-databases`): one process serves every database the
user's commands name, and nothing of one database reaches a command for another.

Each database keeps its rows, its settings (the caller's categories file and content key), its
meta (the key that sealed its values) and its backlog; `serve status` lists each open database
with its own figures; a database unused for the daemon's figure is closed; the CLI starts one
daemon for several databases, and another for another configuration.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from memcli.config import package_path
from memcli.service.daemon import paths
from memcli.store.opener import open_database
from tests.support.daemon import (
    children_of,
    daemon_env,
    last_route,
    processes_naming,
    run_client,
    start_serve,
    stop,
    stop_started,
    user_socket,
    wait_for_socket,
    wait_until,
)

pytestmark = pytest.mark.daemon  # real `memcli serve` processes


def _categories(folder: Path, extra: str) -> Path:
    """The shipped categories with one more, `extra`, declared."""
    path = folder / f"categories-{extra}.yaml"
    text = package_path("categories.yaml").read_text(encoding="utf-8")
    path.write_text(text.replace("categories:\n", f"categories:\n  - name: {extra}\n", 1),
                    encoding="utf-8")
    return path


def _key(seed: int) -> str:
    return base64.b64encode(bytes([seed]) * 32).decode()


def _ok(done) -> str:
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def _sealed_record(text: str) -> str:
    return json.dumps({"event_id": f"e-{text}", "session_id": "s1", "user_id": "ann",
                       "sensitivity": "high", "content": {"text": text}})


def test_two_databases_through_one_daemon_never_see_each_other(tmp_path):
    """Writes then reads through one user's daemon for two databases, each caller with its
    own categories file and tenant: each command sees only its own database's rows,
    categories, sealed values (meta: the key id they were sealed with) and backlog. (The
    content key is the daemon's configuration, the same for both: its indexer reads the
    sealed values to embed them.)"""
    home = tmp_path / "home"
    env = {**daemon_env(home, tmp_path / "unused.db"), "MEMCLI_KEY": _key(1)}
    sock = tmp_path / "run" / "u.sock"
    sock.parent.mkdir(mode=0o700)
    callers = {}
    for name, tenant in (("a", "acme"), ("b", "globex")):
        callers[name] = {**env, "MEMCLI_DB": str(tmp_path / f"{name}.db"),
                         "MEMCLI_SOCKET": str(sock), "MEMCLI_TENANT": tenant,
                         "MEMCLI_CATEGORIES": str(_categories(tmp_path, f"only_{name}"))}
    routes = tmp_path / "routes.log"
    proc = start_serve(env, "--all-databases", "--socket", str(sock))
    try:
        wait_for_socket(sock, proc)
        for name, caller in callers.items():
            _ok(run_client(["remember", f"{name}-note about green tea", "--user-id", "ann",
                            "--category", f"only_{name}"], caller, routes=routes))
            assert last_route(routes).startswith("daemon")
            secrets = [f"{name}-secret about green tea"] * (2 if name == "a" else 1)
            _ok(run_client(["ingest", "-", "--wait"], caller, routes=routes,
                           stdin="\n".join(_sealed_record(f"{text} {i}")
                                           for i, text in enumerate(secrets))))
        # A category only the other caller's file declares is refused (exit 2).
        wrong = run_client(["remember", "x", "--user-id", "ann", "--category", "only_b"],
                           callers["a"], routes=routes)
        assert wrong.returncode == 2 and b"only_b" in wrong.stderr
        assert last_route(routes).startswith("daemon")
        sealed = {}
        for name, other in (("a", "b"), ("b", "a")):
            found = json.loads(_ok(run_client(
                ["query", "green tea", "--user-id", "ann", "--json"], callers[name],
                routes=routes)))
            texts = " ".join(hit["text"] for hit in found)
            assert f"{name}-note" in texts and f"{name}-secret" in texts
            assert f"{other}-note" not in texts and f"{other}-secret" not in texts
            key = json.loads(_ok(run_client(["key", "status", "--json"], callers[name],
                                            routes=routes)))
            assert key["database_key_id"] == key["key_id"] and key["all_decrypt"]
            # Each database's own sealed values (a: two turns, b: one), not the other's.
            sealed[name] = key["encrypted_values"]
        assert sealed["a"] > sealed["b"] > 0
        for name, tenant in (("a", "acme"), ("b", "globex")):
            db = open_database(str(tmp_path / f"{name}.db"), readonly=True)
            try:
                tenants = {row[0] for row in db.execute("SELECT DISTINCT tenant_id FROM memories")}
            finally:
                db.close()
            assert tenants == {tenant}

        def backlogs() -> dict[str, int | None]:
            state = json.loads(_ok(run_client(["serve", "status"], callers["b"],
                                              routes=routes)))
            return {os.path.basename(entry["db"]): entry["backlog"]["waiting"]
                    for entry in state["databases"]}

        # Once the daemon's indexer has drained both, one memory of a waits for its vector
        # again: b's backlog stays its own.
        assert wait_until(lambda: backlogs() == {"a.db": 0, "b.db": 0}, timeout=60)
        db = open_database(str(tmp_path / "a.db"))
        try:
            db.execute("DELETE FROM memory_vectors WHERE memory_id = "
                       "(SELECT min(id) FROM memories)")
        finally:
            db.close()
        state = json.loads(_ok(run_client(["serve", "status"], callers["b"], routes=routes)))
        assert last_route(routes).startswith("daemon")
        assert state["all_databases"] and state["db"] is None and state["pid"] == proc.pid
        listed = {entry["db"]: entry for entry in state["databases"]}
        a, b = (listed[os.path.realpath(tmp_path / f"{n}.db")] for n in ("a", "b"))
        assert (a["backlog"]["waiting"], b["backlog"]["waiting"]) == (1, 0)
        assert a["requests"] >= 5 and b["requests"] >= 4
        assert a["last_used_s"] >= 0 and b["last_used_s"] >= 0
    finally:
        code, _out, err = stop(proc)
    assert code == 0, err


def test_a_database_unused_a_while_is_closed(tmp_path):
    home = tmp_path / "home"
    env = daemon_env(home, tmp_path / "a.db")
    sock = tmp_path / "run" / "u.sock"
    sock.parent.mkdir(mode=0o700)
    env["MEMCLI_SOCKET"] = str(sock)
    routes = tmp_path / "routes.log"
    proc = start_serve(env, "--all-databases", "--socket", str(sock), "--db-idle-close", "1")
    try:
        wait_for_socket(sock, proc)
        _ok(run_client(["remember", "a note", "--user-id", "ann"], env, routes=routes))
        a = os.path.realpath(tmp_path / "a.db")
        other = {**env, "MEMCLI_DB": str(tmp_path / "b.db")}

        def listed() -> list[str]:
            state = json.loads(_ok(run_client(["serve", "status"], other, routes=routes)))
            return [entry["db"] for entry in state["databases"]]

        assert a in listed()
        # Asked for b every moment, a unused: a is closed after its second, b stays open.
        assert wait_until(lambda: listed() == [os.path.realpath(tmp_path / "b.db")],
                          timeout=30)
        _ok(run_client(["stats"], env, routes=routes))  # a opens again when named
        assert a in listed()
    finally:
        code, _out, err = stop(proc)
    assert code == 0, err


@pytest.fixture
def autostarting(tmp_path):
    """An environment with auto-start on; every daemon started from its runtime folder is
    stopped at the end."""
    env = daemon_env(tmp_path / "home", tmp_path / "a.db")
    env.pop("MEMCLI_AUTOSTART", None)
    try:
        yield env
    finally:
        stop_started(Path(paths.runtime_dir(env)))


def test_the_auto_started_daemon_serves_a_second_database(autostarting, tmp_path):
    env = autostarting
    routes = tmp_path / "routes.log"
    ep = paths.user_endpoint(env)
    first = run_client(["remember", "a note about tea", "--user-id", "ann"], env, routes=routes)
    _ok(first)
    assert last_route(routes) == "inprocess"
    assert wait_until(lambda: os.path.exists(ep.pid) and processes_naming(ep.socket),
                      timeout=60)
    assert wait_until(lambda: run_client(["stats"], env, routes=routes).returncode == 0
                      and last_route(routes).startswith("daemon"), timeout=90), (
        routes.read_text(), Path(ep.log).read_text(), os.listdir(paths.runtime_dir(env)))
    pid = int(Path(ep.pid).read_text())
    second = {**env, "MEMCLI_DB": str(tmp_path / "b.db")}
    _ok(run_client(["remember", "b note about tea", "--user-id", "ann"], second,
                   routes=routes))
    assert last_route(routes).startswith("daemon")  # no second daemon: the same one answers
    found = _ok(run_client(["query", "tea", "--user-id", "ann", "--json"], second,
                           routes=routes))
    assert "b note" in found and "a note" not in found
    # One daemon: every process of that command line is it or a child of it (its HTTP
    # process; a command's process not reaped yet), and it is the only user's daemon.
    assert set(processes_naming(ep.socket)) <= {pid, *children_of(pid)}
    assert sorted(p.name for p in Path(paths.runtime_dir(env)).glob("*.sock")) == sorted(
        os.path.basename(path) for path in (ep.socket, ep.http_socket))
    state = json.loads(_ok(run_client(["serve", "status"], second, routes=routes)))
    assert state["pid"] == pid and state["auto_started"]
    assert {entry["db"] for entry in state["databases"]} == {
        os.path.realpath(tmp_path / "a.db"), os.path.realpath(tmp_path / "b.db")}
    assert "serving every database" in Path(ep.log).read_text()
    # The daemon was given no database, and the command line that started it names none.
    with open(f"/proc/{pid}/environ", "rb") as f:
        assert b"MEMCLI_DB=" not in f.read()
    # `serve stop` (in-process) stops the daemon that answers for the database: this one.
    stopped = run_client(["serve", "stop", "--json"], second, routes=routes)
    assert json.loads(_ok(stopped))["pid"] == pid
    assert wait_until(lambda: not processes_naming(ep.socket), timeout=60)


def test_another_configuration_gets_its_own_daemon(autostarting, tmp_path):
    env = autostarting
    routes = tmp_path / "routes.log"
    changed = {**env, "MEMCLI_KEY": _key(7)}  # another content key: another daemon
    mine, theirs = paths.user_endpoint(env), paths.user_endpoint(changed)
    assert mine.socket != theirs.socket
    for caller, ep in ((env, mine), (changed, theirs)):
        _ok(run_client(["remember", "a note", "--user-id", "ann"], caller, routes=routes))
        assert wait_until(lambda ep=ep: bool(processes_naming(ep.socket)), timeout=60)
    assert not set(processes_naming(mine.socket)) & set(processes_naming(theirs.socket))
    for caller in (env, changed):
        ok = wait_until(lambda caller=caller: run_client(["stats"], caller, routes=routes)
                        .returncode == 0 and last_route(routes).startswith("daemon"),
                        timeout=90)
        assert ok, routes.read_text()
    key = json.loads(_ok(run_client(["key", "status", "--json"], changed, routes=routes)))
    assert key["source"] == "MEMCLI_KEY"


def test_a_daemon_started_for_the_database_wins_over_the_users(autostarting, tmp_path):
    """`serve --db X` by hand: commands for X go to it, others to the user's daemon."""
    env = {**autostarting, "MEMCLI_AUTOSTART": "0"}
    routes = tmp_path / "routes.log"
    own = start_serve(env, "--db", str(tmp_path / "a.db"))
    users = start_serve(env, "--all-databases")
    try:
        wait_for_socket(Path(paths.endpoint(str(tmp_path / "a.db"), env).socket), own)
        wait_for_socket(user_socket(env), users)
        state = json.loads(_ok(run_client(["serve", "status"], env, routes=routes)))
        assert state["pid"] == own.pid and state["db"] == os.path.realpath(tmp_path / "a.db")
        assert "databases" not in state  # a database's own daemon keeps its fields
        other = {**env, "MEMCLI_DB": str(tmp_path / "b.db")}
        state = json.loads(_ok(run_client(["serve", "status"], other, routes=routes)))
        assert state["pid"] == users.pid and state["all_databases"]
    finally:
        for proc in (own, users):
            stop(proc)
