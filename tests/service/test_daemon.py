"""`memcli serve` and the CLI forwarding to it, through real processes and real sockets.

Parity: every runnable `sh` example of README.md and of the docs site's pages (docs/, in the
order of mkdocs.yml's navigation) runs twice from the same start, once through a daemon and once
in-process (`--no-daemon`), with stdout, stderr and exit codes compared. Then
the error cases, the lifecycle (a second serve, SIGKILL mid-ingest, SIGTERM with a request in
flight, idle exit), tenants per request, relative paths from another folder, and the client's
imports. Every daemon is stopped by `tests.support.daemon.Daemon` (finally: SIGKILL).
"""

from __future__ import annotations

import difflib
import json
import os
import pty
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memcli.service.daemon import paths
from tests.support.daemon import (
    _CLIENT,
    HEAVY,
    ROOT,
    Daemon,
    children_of,
    daemon_env,
    last_route,
    open_files,
    piped_client,
    run_client,
    socket_of,
    start_serve,
    stop,
    wait_until,
)

pytestmark = pytest.mark.daemon  # every test starts `memcli serve` or its client as processes

README = ROOT / "README.md"
DOCS = ROOT / "docs"
# Fenced `sh` blocks that are not memcli usage (installing, benchmarks, development, a script),
# or that start and stop a daemon themselves (the tests below do that). Examples that need what
# a test has not (a PostgreSQL server, a model's API key, a client) are fenced `console`.
NOT_USAGE = ("pip install", "#!/bin/sh", "-m bench.", "pytest", "memcli serve")
CONVERSATION = "".join(json.dumps(r) + "\n" for r in [
    {"text": "We deploy on Fridays after the planning call", "session_id": "s2",
     "role": "assistant", "category": "tasks"},
    {"text": "Anika arrives by train from Porto", "session_id": "s2"},
])
STATE = json.dumps({"step": 3, "todo": ["flights", "hotel"]})
# `memcli import --from chatgpt conversations.json` in the README: a ChatGPT data export of one
# conversation (a `mapping` tree of nodes, the kept branch ending at `current_node`).
CHATGPT = json.dumps([{
    "title": "Tea", "create_time": 1700000000.0, "conversation_id": "conv-tea",
    "current_node": "a1", "mapping": {
        "root": {"id": "root", "parent": None, "children": ["u1"], "message": None},
        "u1": {"id": "u1", "parent": "root", "children": ["a1"], "message": {
            "id": "u1", "author": {"role": "user"}, "create_time": 1700000000.0,
            "content": {"content_type": "text", "parts": ["which teapot suits oolong?"]}}},
        "a1": {"id": "a1", "parent": "u1", "children": [], "message": {
            "id": "a1", "author": {"role": "assistant"}, "create_time": 1700000010.0,
            "content": {"content_type": "text",
                        "parts": ["a yixing clay teapot, and a gooseneck kettle"]}}}}}])


def doc_pages() -> list[Path]:
    """README.md, then the docs site's pages in the order of its navigation, then any page the
    navigation does not list yet (sorted): the order a reader meets their examples in."""
    import yaml

    def walk(entry: object) -> list[str]:
        if isinstance(entry, str):
            return [entry]
        if isinstance(entry, dict):
            return [page for value in entry.values() for page in walk(value)]
        if isinstance(entry, list):
            return [page for item in entry for page in walk(item)]
        return []

    nav = walk(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    pages = [DOCS / page for page in nav if page.endswith(".md")]
    pages += sorted(set(DOCS.rglob("*.md")) - set(pages))
    return [README, *(page for page in pages if page.exists())]


def readme_blocks() -> list[str]:
    """The runnable `sh` examples of the README and the docs, in reading order."""
    blocks = [block for page in doc_pages()
              for block in re.findall(r"^```sh\n(.*?)^```", page.read_text(encoding="utf-8"),
                                      re.S | re.M)]
    return [b for b in blocks if "memcli " in b and not any(s in b for s in NOT_USAGE)]


# A score or other float (bytes: outputs are compared as bytes).
_FLOAT = re.compile(rb"(?<![\w.])-?\d+\.\d+(?:[eE]-?\d+)?")


def _floats(data: bytes, home: Path | None = None) -> list[float]:
    """The floats `_normalise` leaves out, to compare within a tolerance."""
    return [float(x) for x in _FLOAT.findall(_unclocked(data, home) if home else data)]


def _normalise(data: bytes, home: Path) -> bytes:
    """What differs between two runs of the same write on two copies of one database: random
    event ids, clock times, durations, and the world's folder. The rest must be identical;
    scores (recency moves them by ~1e-6 between the two worlds' writes) within a tolerance
    (_floats)."""
    return _FLOAT.sub(b"F", _unclocked(data, home))


def _unclocked(data: bytes, home: Path) -> bytes:
    text = data.decode("utf-8", "surrogateescape").replace(str(home), "HOME")
    text = re.sub(r"(evt|cmd|art|dec|tsk|chk|acb)_[0-9a-f]{8,}", r"\1_ID", text)
    # Token counts of a bundle include those random ids (hex splits into varying tokens).
    # A file's size differs too: the daemon holds the database open, so its WAL is not folded back.
    counts = "token_used|token_used_est|tokens|token_est|used|tokens_used|db_bytes|wal_bytes"
    # Through the daemon ingest leaves the vectors to its indexer: `embedded` 0, the same
    # count `deferred_embedding` (tests/service/test_daemon_indexing.py holds those).
    counts += "|embedded|deferred_embedding"
    text = re.sub(rf'("(?:{counts})"\s*:\s*)\d+', r"\1N", text)
    # `stats` inside a daemon says what its indexer did (none in-process).
    text = re.sub(r'"indexer": (null|\{[^{}]*\})', '"indexer": INDEXER', text)
    # Seconds optional: a bundle shows a turn's time to the minute ("[2026-11-24T04:49]"), and
    # the two worlds' writes may fall on either side of a minute on a busy machine.
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?Z?", "TIME", text)
    text = re.sub(r'("(?:ms|[a-z_]*_ms|elapsed|took)"\s*:\s*)[0-9.]+', r"\1N", text)
    text = re.sub(r"[0-9.]+ ms\b", "N ms", text)
    # `stats` says whether a daemon answered it: that differs by design.
    text = re.sub(r'"daemon": \{[^}]*\}', '"daemon": DAEMON', text)
    return text.encode("utf-8", "surrogateescape")


# After each command through the daemon: wait until its indexer has written every vector, so
# the next command sees what it would see in-process (the file read directly, hash models).
_INDEXED = (
    "import os, sqlite3, sys, time\n"
    "db = os.environ['MEMCLI_DB']\n"
    "sql = ('SELECT count(*) FROM memories m LEFT JOIN memory_vectors v ON v.memory_id = m.id'\n"
    "       \" WHERE v.memory_id IS NULL AND m.state != 'soft_deleted'\")\n"
    "for _ in range(6000):\n"
    "    try:\n"
    "        if not os.path.exists(db) or not sqlite3.connect(db).execute(sql).fetchone()[0]:\n"
    "            sys.exit(0)\n"
    "    except sqlite3.Error:\n"
    "        sys.exit(0)\n"
    "    time.sleep(0.05)\n"
)


def _script(block: str, client: str, no_daemon: bool, rc_log: Path) -> str:
    flag = " --no-daemon" if no_daemon else ""
    indexed = "" if no_daemon else (
        f"{shlex.quote(sys.executable)} -c {shlex.quote(_INDEXED)}; ")
    return (f'memcli() {{ {shlex.quote(sys.executable)} -c {shlex.quote(client)}{flag} "$@"; '
            f'rc=$?; echo $rc >> {shlex.quote(str(rc_log))}; {indexed}return $rc; }}\n{block}')


def _run_block(block: str, env: dict, cwd: Path, no_daemon: bool, tag: str
               ) -> subprocess.CompletedProcess:
    rc_log = cwd / f"rc-{tag}.log"
    return subprocess.run(["bash", "-c", _script(block, _CLIENT, no_daemon, rc_log)],
                          env=env, cwd=cwd, capture_output=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def _readme_world(tmp: Path, name: str) -> tuple[dict, Path, Path]:
    home = tmp / name
    cwd = home / "work"
    cwd.mkdir(parents=True)
    (cwd / "conversation.ndjson").write_text(CONVERSATION)
    (cwd / "state.json").write_text(STATE)
    (cwd / "conversations.json").write_text(CHATGPT)
    db = home / "agent" / "memory.db"
    env = daemon_env(home, db)
    env["EDITOR"] = env["VISUAL"] = "true"  # `$EDITOR file` in an example: leave it as it is
    with open(env["MEMCLI_CONFIG"], "a", encoding="utf-8") as config:
        config.write("consolidate: off\n")  # no summary of the daemon's own between examples
    return env, cwd, db


@pytest.mark.long  # every README and docs example twice, one process per command
def test_readme_examples_same_through_the_daemon(tmp_path):
    blocks = readme_blocks()
    joined = "\n".join(blocks)
    for command in ("memcli ingest", "memcli query", "memcli acb build", "memcli view apply",
                    "memcli mcp install", "memcli consolidate"):
        assert command in joined  # the extraction found the README's and the guides' examples
    a_env, a_cwd, a_db = _readme_world(tmp_path, "a")
    b_env, b_cwd, _ = _readme_world(tmp_path, "b")
    a_home, b_home = tmp_path / "a", tmp_path / "b"
    routes_a, routes_b = a_cwd / "routes.log", b_cwd / "routes.log"
    a_env["MEMCLI_TEST_ROUTE_LOG"], b_env["MEMCLI_TEST_ROUTE_LOG"] = str(routes_a), str(routes_b)
    # `export MEMCLI_DB=~/agent/memory.db` in the README: HOME is each world's own.
    with Daemon(a_db, a_env):
        for i, block in enumerate(blocks):
            via = _run_block(block, a_env, a_cwd, False, str(i))
            local = _run_block(block, b_env, b_cwd, True, str(i))
            rcs_a = (a_cwd / f"rc-{i}.log").read_text()
            rcs_b = (b_cwd / f"rc-{i}.log").read_text()
            assert rcs_a == rcs_b, (block, via.stderr, local.stderr)
            got, want = _normalise(via.stdout, a_home), _normalise(local.stdout, b_home)
            assert got == want, "\n".join(difflib.unified_diff(
                want.decode(errors="replace").splitlines(), got.decode(errors="replace")
                .splitlines(), "in-process", "daemon", lineterm="", n=1))
            assert _floats(via.stdout, a_home) == pytest.approx(_floats(local.stdout, b_home),
                                                              abs=1e-3), block
            assert _normalise(via.stderr, a_home) == _normalise(local.stderr, b_home), block
    a_routes = routes_a.read_text().splitlines()
    # Every command aimed at the daemon's database went to it; only examples naming another
    # file with --db (export/import between two files) ran in-process, and `memcli mcp ...`,
    # which is never forwarded (memcli.service.daemon.client.NEVER_ROUTED), and what an example runs
    # in-process on purpose (`--no-daemon`, `MEMCLI_NO_DAEMON=1`).
    assert set(a_routes) <= {"daemon ", "inprocess other-db", "inprocess"}, a_routes
    in_process = r"\bmemcli mcp\b|\bmemcli --no-daemon\b|MEMCLI_NO_DAEMON=1 memcli\b"
    assert a_routes.count("inprocess") == len(re.findall(in_process, joined)), a_routes
    assert set(routes_b.read_text().splitlines()) <= {"inprocess", "inprocess other-db"}
    assert a_routes.count("daemon ") >= 15  # every example command ran
    # The files written by `> audit.jsonl` are the same too.
    assert _normalise((a_cwd / "audit.jsonl").read_bytes(), a_home) == _normalise(
        (b_cwd / "audit.jsonl").read_bytes(), b_home)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A seeded database, its environment, and a running daemon for it, shared by the module's
    tests: each compares the daemon's answer with an in-process one on the same database, or
    writes only rows of a tenant of its own, so none depends on what another did."""
    tmp_path = tmp_path_factory.mktemp("served")
    db = tmp_path / "m.db"
    env = daemon_env(tmp_path / "home", db)
    records = "".join(json.dumps(r) + "\n" for r in [
        {"text": "Alice likes green tea", "user_id": "alice", "session_id": "s1"},
        {"text": "Bob prefers black coffee", "user_id": "bob", "session_id": "s2"},
    ])
    seeded = subprocess.run([sys.executable, "-m", "memcli", "--no-daemon", "ingest", "-"],
                            input=records, env=env, capture_output=True, text=True, timeout=120)
    assert seeded.returncode == 0, seeded.stderr
    with Daemon(db, env, shared=True) as daemon:
        yield db, env, daemon


def _both(args: list[str], env: dict, routes: Path, **kw) -> tuple:
    via = run_client(args, env, routes=routes, **kw)
    assert last_route(routes).startswith("daemon"), last_route(routes)
    local = run_client(["--no-daemon", *args], env, routes=routes, **kw)
    assert last_route(routes) == "inprocess"
    return via, local


@pytest.mark.parametrize("args, stdin, code", [
    (["query", "--top-k", "zero"], None, 2),                        # usage error
    (["query", "tea", "--db", "missing.db"], None, 1),              # no database
    (["query", "-"], b"\xff\xfe not utf-8", 2),                      # bad stdin
    (["ingest", "-"], b'{"text": 5}\n', 2),                          # bad record
    (["frobnicate"], None, 2),                                       # unknown command
    (["query", "tea", "--json"], None, 0),
    (["acb", "build", "--user", "alice", "-q", "tea"], None, 0),
    (["history", "--user", "alice", "--format", "jsonl"], None, 0),
    (["--help"], None, 0),
    (["query", "--help"], None, 0),
    (["--version"], None, 0),
])
def test_errors_and_outputs_are_the_same(served, tmp_path, args, stdin, code):
    _db, env, daemon = served
    if "--db" in args:  # another database: reach this daemon through MEMCLI_SOCKET
        env = {**env, "MEMCLI_SOCKET": str(daemon.socket)}
    routes = tmp_path / "routes.log"
    via, local = _both(args, env, routes, stdin=stdin)
    assert via.returncode == local.returncode == code, via.stderr
    assert _FLOAT.sub(b"F", via.stdout) == _FLOAT.sub(b"F", local.stdout)  # scores: recency,
    assert _floats(via.stdout) == pytest.approx(_floats(local.stdout), abs=1e-3)  # by the clock
    assert via.stderr == local.stderr


@pytest.mark.parametrize("args", [
    ["query"], ["query", "tea", "--no-such-flag"], ["query", "tea", "--format", "xml"],
    ["query", "tea", "--top-k", "many"], ["history", "99999999999999999999999"],
])
def test_usage_errors_are_one_line_through_the_daemon(served, tmp_path, args):
    _db, env, _daemon = served
    via, local = _both(args, env, tmp_path / "routes.log")
    assert via.returncode == local.returncode == 2
    assert via.stderr == local.stderr
    line, = via.stderr.decode().splitlines()
    assert line.startswith("memcli: error: ") and line.endswith("--help')"), line


def test_busy_database_exits_75_through_the_daemon(served, tmp_path):
    db, env, _daemon = served
    from tests.support.backend import write_lock_held

    env = {**env, "MEMCLI_BUSY_TIMEOUT": "0.5"}
    routes = tmp_path / "routes.log"
    with write_lock_held(db):
        via, local = _both(["ingest", "--text", "a write that must wait"], env, routes)
    assert via.returncode == local.returncode == 75
    assert via.stderr == local.stderr
    assert b"database is busy" in via.stderr


def test_client_imports_only_the_standard_library(served, tmp_path):
    _db, env, _daemon = served
    routes = tmp_path / "routes.log"
    result = run_client(["query", "tea", "--json"], env, routes=routes)
    assert result.returncode == 0, result.stderr
    route = last_route(routes)
    assert route.startswith("daemon"), route
    loaded = route.removeprefix("daemon ").split(",")
    assert not [m for m in HEAVY if m in loaded], route


def test_second_serve_refuses_with_75(served):
    db, env, daemon = served
    second = start_serve(env, "--db", str(db))
    code, _out, err = stop(second, timeout=60) if second.wait(timeout=60) is None else (
        second.returncode, *second.communicate())
    assert code == 75
    assert err.count("\n") == 1 and f"pid {daemon.pid}" in err and err.startswith("memcli: error:")
    assert daemon.proc.poll() is None  # the first one still serves


def test_tenant_comes_from_each_request(served, tmp_path):
    db, env, _daemon = served
    routes = tmp_path / "routes.log"
    for tenant in ("acme", "globex"):
        wrote = run_client(["ingest", "--text", f"{tenant} secret plan", "--user", "u"],
                           {**env, "MEMCLI_TENANT": tenant}, routes=routes)
        assert wrote.returncode == 0, wrote.stderr
    results: dict[str, bytes] = {}

    def ask(tenant: str) -> None:
        out = run_client(["query", "secret plan", "--json"], {**env, "MEMCLI_TENANT": tenant},
                         routes=routes)
        results[tenant] = out.stdout

    threads = [threading.Thread(target=ask, args=(t,)) for t in ("acme", "globex")] * 1
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(routes.read_text().split()) == {"daemon"}
    for tenant, other in (("acme", "globex"), ("globex", "acme")):
        hits = json.loads(results[tenant])
        assert hits and {h["tenant_id"] for h in hits} == {tenant}
        assert all(other not in h["text"] for h in hits)


def test_relative_paths_resolve_in_the_callers_folder(tmp_path):
    home = tmp_path / "home"
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    db = elsewhere / "rel.db"
    env = daemon_env(home, db)
    del env["MEMCLI_DB"]
    (elsewhere / "notes.ndjson").write_text(json.dumps({"text": "relative files work"}) + "\n")
    routes = tmp_path / "routes.log"
    # The daemon runs from another folder; the client names both files relative to its own.
    with Daemon(db, env, cwd=ROOT):
        ingest = run_client(["ingest", "notes.ndjson", "--db", "rel.db"], env, routes=routes,
                            cwd=elsewhere)
        assert last_route(routes).startswith("daemon")
        assert ingest.returncode == 0, ingest.stderr
        missing = run_client(["ingest", "nothere.ndjson", "--db", "rel.db"], env,
                             routes=routes, cwd=elsewhere)
        local = run_client(["--no-daemon", "ingest", "nothere.ndjson", "--db", "rel.db"], env,
                           routes=routes, cwd=elsewhere)
        assert missing.stderr == local.stderr and missing.returncode == local.returncode == 2
        found = run_client(["query", "relative", "--db=rel.db", "--json"], env, routes=routes,
                           cwd=elsewhere)
    assert json.loads(found.stdout)[0]["text"] == "relative files work"
    assert not (ROOT / "rel.db").exists()


def wait_for_events(db: Path, deadline: float) -> bool:
    """True once `db` holds a committed event (read-only reads beside the writing daemon)."""
    import apsw

    while time.monotonic() < deadline:
        try:
            conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
            try:
                if conn.execute("SELECT count(*) FROM events").fetchone()[0] > 0:
                    return True
            finally:
                conn.close()
        except apsw.Error:  # no file or no schema yet
            pass
        time.sleep(0.05)
    return False


def test_sigkill_mid_ingest_leaves_a_clean_database(tmp_path):
    db = tmp_path / "k.db"
    env = daemon_env(tmp_path / "home", db)
    routes = tmp_path / "routes.log"
    big = "".join(json.dumps({"text": f"memory number {i} about tea"}) + "\n"
                  for i in range(3000))
    with Daemon(db, env) as daemon:
        with piped_client(["ingest", "-"], env, routes=routes) as client:
            client.stdin.write(big.encode())
            client.stdin.close()
            # Kill once the ingest has committed something (mid-ingest whatever the load; a
            # fixed sleep could kill a slow daemon before its first migration committed).
            assert wait_for_events(db, deadline=time.monotonic() + 60), "no event stored"
            os.kill(daemon.pid, signal.SIGKILL)
            daemon.proc.wait(timeout=30)
            client.wait(timeout=60)
    assert client.returncode != 0  # the client says the daemon went away
    doctor = subprocess.run([sys.executable, "-m", "memcli", "doctor", "--json"], env=env,
                            capture_output=True, text=True, timeout=120)
    # Clean, but for the vectors the daemon's indexer had not written yet: the next daemon
    # writes them (its indexer finds what lacks a vector).
    problems = [c["check"] for c in json.loads(doctor.stdout)["checks"]
                if c["status"] == "problem"]
    assert problems in ([], ["missing:memory_vectors"]), doctor.stdout + doctor.stderr
    # The stale socket is replaced by the next daemon.
    assert socket_of(db, env).exists()
    with Daemon(db, env):
        again = run_client(["stats", "--json"], env, routes=routes)
        assert again.returncode == 0 and last_route(routes).startswith("daemon")
        assert wait_until(lambda: json.loads(run_client(["stats", "--json"], env, routes=routes)
                                             .stdout)["backlog"]["waiting"] == 0, timeout=300)
    doctor = subprocess.run([sys.executable, "-m", "memcli", "doctor", "--json"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def test_sigterm_lets_a_request_in_flight_finish(tmp_path):
    db = tmp_path / "t.db"
    env = daemon_env(tmp_path / "home", db)
    routes = tmp_path / "routes.log"
    with Daemon(db, env) as daemon:
        # `ingest -` waits for its stdin: the request is in flight until we close it.
        with piped_client(["ingest", "-"], env, routes=routes) as client:
            # In flight = the command's process (a child of the daemon) holds the client's
            # stdin (passed with the request). Not a count of the daemon's sockets: its HTTP
            # server opens three more, seconds after the CLI socket answers on a loaded
            # machine, with or without a client.
            stdin = os.readlink(f"/proc/{client.pid}/fd/0")
            assert wait_until(lambda: any(stdin in open_files(pid)
                                          for pid in children_of(daemon.pid)), timeout=60)
            daemon.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert daemon.proc.poll() is None  # waiting for the request
            out, err = client.communicate(json.dumps({"text": "finished late"}).encode(),
                                          timeout=60)
        assert client.returncode == 0, err
        assert json.loads(out)["created"]
        assert last_route(routes).startswith("daemon")
        code, _out, derr = stop(daemon.proc)
    assert code == 0, derr
    assert not socket_of(db, env).exists()
    assert not Path(str(socket_of(db, env))[:-5] + ".pid").exists()
    assert not Path(str(db) + "-wal").exists() or Path(str(db) + "-wal").stat().st_size == 0
    found = subprocess.run([sys.executable, "-m", "memcli", "query", "finished late", "--json"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert json.loads(found.stdout)[0]["text"] == "finished late"


def test_sigterm_as_soon_as_the_socket_answers_stops_the_daemon(tmp_path):
    """The CLI socket answers before the HTTP server is built (importing uvicorn takes seconds
    on a loaded machine). A SIGTERM then once found no server to stop: uvicorn served on
    until a second signal."""
    db = tmp_path / "e.db"
    env = daemon_env(tmp_path / "home", db)
    with Daemon(db, env) as daemon:
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=60) == 0
        assert "serve stopped" in daemon.proc.stderr.read()
    assert not daemon.socket.exists()


def test_idle_exit(tmp_path):
    db = tmp_path / "i.db"
    env = daemon_env(tmp_path / "home", db)
    # Not waiting for the socket: a test process starved for a second (a loaded machine)
    # could look only after the idle daemon had gone. Its log says it served.
    with Daemon(db, env, "--idle-exit", "0.02", wait=False) as daemon:  # 1.2 s
        assert daemon.proc.wait(timeout=60) == 0
        assert not daemon.socket.exists()
        log = daemon.proc.stderr.read()
        assert f"serving {db} on {daemon.socket}" in log and "serve stopped" in log


def test_no_daemon_and_never_routed(served, tmp_path):
    _db, env, _daemon = served
    routes = tmp_path / "routes.log"
    run_client(["stats"], {**env, "MEMCLI_NO_DAEMON": "1"}, routes=routes)
    assert last_route(routes) == "inprocess"
    run_client(["--no-daemon", "stats"], env, routes=routes)
    assert last_route(routes) == "inprocess"
    # `acb edit` off a terminal is forwarded (its editor sees the caller's environment and
    # folder: test_daemon_process.py); on a terminal it runs in the caller's process, where the
    # terminal's foreground is.
    edit = ["acb", "edit", "rules", "--no-editor"]
    run_client(edit, env, routes=routes)
    assert last_route(routes).startswith("daemon")
    main_side, terminal = pty.openpty()
    try:
        subprocess.run([sys.executable, "-c", _CLIENT, *edit], stdin=terminal,
                       env={**env, "MEMCLI_TEST_ROUTE_LOG": str(routes)}, capture_output=True,
                       timeout=120)
    finally:
        os.close(main_side)
        os.close(terminal)
    assert last_route(routes) == "inprocess"


def test_socket_and_runtime_dir_are_private(served, tmp_path):
    db, env, _daemon = served
    sock = socket_of(db, env)
    assert sock.stat().st_mode & 0o777 == 0o600
    assert sock.parent.stat().st_mode & 0o777 == 0o700
    # A runtime folder others can enter is refused.
    home = tmp_path / "open"
    env2 = daemon_env(home, tmp_path / "o.db")
    folder = Path(paths.runtime_dir(env2))  # under a long TMPDIR, a short one in /tmp
    try:
        folder.mkdir(parents=True)
        os.chmod(folder, 0o755)
        proc = start_serve(env2, "--db", str(tmp_path / "o.db"))
        code, _out, err = stop(proc) if proc.wait(timeout=60) is None else (
            proc.returncode, "", proc.stderr.read())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert code == 1 and "open to other users" in err


def _same_answer(a, b, where: str = "$") -> None:
    """Equal JSON, floats within 1e-3: a score ages with the clock (recency) between the two
    runs, and the two processes may sum in another order (BLAS threads)."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, int | float) and isinstance(b, int | float), where
        assert abs(a - b) <= 1e-3, (where, a, b)
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _same_answer(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_answer(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


@pytest.mark.slow  # e5-small and SPLADE in the daemon and in the local process
def test_daemon_with_the_default_models_answers_like_in_process(tmp_path):
    """e5-small + SPLADE, warm in the daemon: the same answers as in-process (scores within
    1e-3). The forked commands encode queries through the engine, as the in-process command
    does, so a bundle's `acb_id` is the same too; the HTTP process encodes them through
    onnxruntime (`serve status` says so) and ranks alike. The warm-up leaves no thread to
    fork (a warning in the log otherwise)."""
    import httpx

    from memcli.service.daemon import paths

    db = tmp_path / "d.db"
    env = daemon_env(tmp_path / "home", db, models="default")
    seeded = subprocess.run([sys.executable, "-m", "memcli", "ingest", "-"], env=env,
                            input="".join(json.dumps({"text": t, "user_id": "u"}) + "\n" for t in
                                          ("Alice likes green tea", "The deploy is on Friday",
                                           "Bob drinks coffee at noon")),
                            capture_output=True, text=True, timeout=300)
    assert seeded.returncode == 0, seeded.stderr
    routes = tmp_path / "routes.log"

    def status() -> dict:
        return json.loads(run_client(["serve", "status"], env, routes=routes).stdout)

    def runtimes() -> dict:
        return {m["role"]: m["query_runtime"] for m in status()["models"]}

    with Daemon(db, env) as daemon:
        # models_ready: loaded, and the HTTP process's query session built
        assert wait_until(lambda: status()["models_ready"] is True, timeout=120)
        assert runtimes() == {"dense": {"commands": "engine", "http": "onnxruntime"},
                              "sparse": {"commands": "numpy", "http": "numpy"}}
        question = ["query", "what does alice drink", "--json", "--user", "u"]
        local_answers = []
        for args in (question, ["acb", "build", "--user", "u", "-q", "when is the deploy"]):
            via, local = _both(args, env, routes)
            assert via.returncode == local.returncode == 0, via.stderr
            local_answers.append(json.loads(local.stdout))
            _same_answer(json.loads(via.stdout), local_answers[-1])
            assert via.stderr == local.stderr
        http_socket = paths.endpoint(str(db), env).http_socket
        with httpx.Client(transport=httpx.HTTPTransport(uds=http_socket),
                          base_url="http://localhost", timeout=120) as client:
            asked = client.post("/api/v1/query", json={"query": question[1], "user_id": "u"})
        assert asked.status_code == 200, asked.text
        local_hits = local_answers[0]
        assert [hit["id"] for hit in asked.json()] == [hit["id"] for hit in local_hits]
        for over_http, here in zip(asked.json(), local_hits, strict=True):
            assert abs(over_http["score"] - here["score"]) <= 1e-3
        code, _out, log = stop(daemon.proc)
    assert code == 0 and "warning" not in log, log


@pytest.mark.slow  # loads SPLADE
def test_local_models_are_shared_by_every_memory_in_a_process():
    """A daemon (or a library user) opening many Memory objects loads each model once."""
    from memcli.config import load_settings
    from memcli.operations.memory import make_embedder, make_sparse

    settings = load_settings("unused.db")
    assert make_embedder(settings) is make_embedder(settings)
    first, second = make_sparse(settings), make_sparse(settings)
    assert first is not None and first._model() is second._model()


def test_serve_status_is_answered_by_the_daemon(tmp_path):
    db = tmp_path / "s.db"
    env = daemon_env(tmp_path / "home", db)
    routes = tmp_path / "routes.log"

    def status() -> tuple[int, dict]:
        done = run_client(["serve", "status"], env, routes=routes)
        return done.returncode, json.loads(done.stdout)

    with Daemon(db, env) as daemon:
        assert wait_until(lambda: status()[1].get("models_ready") is True, timeout=60)
        code, state = status()
        assert last_route(routes).startswith("daemon")
        assert code == 0 and state["running"] and state["pid"] == daemon.pid
        assert state["requests"] >= 1
        stop(daemon.proc)
    code, state = status()
    assert code == 1 and state["running"] is False
    assert last_route(routes) == "inprocess"


def test_serve_answers_http_on_its_unix_socket_and_port(tmp_path):
    """One uvicorn server: the daemon's `<key>.http.sock` (no token: the socket is 0600) and,
    with --port, loopback TCP (--no-token)."""
    import httpx

    db = tmp_path / "h.db"
    env = daemon_env(tmp_path / "home", db)
    routes = tmp_path / "routes.log"
    # --port 0: the daemon binds a free port itself and `serve status` names it (a port
    # probed free here could be taken by the other worker while the daemon starts).
    with Daemon(db, env, "--port", "0", "--no-token") as daemon:
        url = json.loads(run_client(["serve", "status"], env, routes=routes).stdout)["http_url"]
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
        http_sock = Path(str(daemon.socket)[: -len(".sock")] + ".http.sock")
        assert wait_until(http_sock.exists, timeout=60)
        assert http_sock.stat().st_mode & 0o777 == 0o600
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(http_sock)),
                          base_url="http://localhost") as client:
            assert wait_until(lambda: _ok(client), timeout=60)
        with httpx.Client(base_url=url) as client:
            assert client.get("/healthz").status_code == 200
        code, _out, err = stop(daemon.proc)
    assert code == 0, err
    assert not http_sock.exists()


def _ok(client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except Exception:  # noqa: BLE001 - not listening yet
        return False


def test_a_connection_kept_open_reads_high_rows_sealed_after_it_opened(tmp_path):
    """The daemon's HTTP service keeps one connection per thread: the database's first `high`
    write, made by another connection (a forwarded CLI command), must not show it `enc:v1:`."""
    from memcli import Memory
    from memcli.config import load_settings
    from memcli.providers.embedders import HashEmbedder
    from memcli.service.api import Service

    db = tmp_path / "c.db"
    with Memory.open(db, embedder=HashEmbedder(64)) as first:
        first.ingest([{"text": "plain note about tea"}])
    service = Service(load_settings(db, embedder={"provider": "hash"},
                                    retrieval={"leg_weights": {"lexical": 1.0, "dense": 1.0}}))
    kept = service.memory()  # opened before any `high` write
    with Memory.open(db, embedder=HashEmbedder(64)) as other:
        other.ingest([{"text": "secret diary about tea", "sensitivity": "high"}])
    assert service.memory() is kept
    texts = [h.text for h in kept.query("tea").hits]
    assert "secret diary about tea" in texts
    assert not [t for t in texts if t.startswith("enc:")]
