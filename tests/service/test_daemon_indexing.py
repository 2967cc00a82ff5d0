"""A real `memcli serve` indexing in the background (memcli.service.daemon.indexer), on both
engines.

The indexer is held with SIGSTOP where a test needs a backlog to stay put (then SIGCONT), so
no assertion depends on how fast it drains. Real daemons and client processes
(tests.support.daemon), the hash embedder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.support.backend import rows
from tests.support.daemon import (
    _CLIENT,
    Daemon,
    last_route,
    run_client,
    wait_until,
)
from tests.support.daemon import daemon_env as support_env

pytestmark = [pytest.mark.daemon, pytest.mark.backends]


def daemon_env(home, db) -> dict[str, str]:
    """The test daemon's environment; its indexer does not exit when idle (the tests hold it
    with SIGSTOP once idle: tests/service/test_daemon_indexer_lifecycle.py has the idle exit)."""
    return {**support_env(home, db), "MEMCLI_INDEXER_IDLE_EXIT": "3600"}


def _records(n: int, word: str) -> str:
    return "".join(json.dumps({"text": f"note {i} mentions the {word}", "user_id": "u",
                               "session_id": "s"}) + "\n" for i in range(n))


def _status(env, routes) -> dict:
    done = run_client(["serve", "status"], env, routes=routes)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _hold_indexer(env, routes) -> int:
    """Stop the indexer (SIGSTOP) once it is idle, outside any transaction; its pid."""
    assert wait_until(lambda: _status(env, routes)["backlog"]["indexer"]["busy"] is False,
                      timeout=120)
    indexer = _status(env, routes)["backlog"]["indexer"]["pid"]
    os.kill(indexer, signal.SIGSTOP)  # the backlog stays until SIGCONT
    return indexer


def _counts(db) -> tuple[int, int]:
    """(memories, vectors) as the database holds them."""
    return (rows(db, "SELECT count(*) FROM memories")[0][0],
            rows(db, "SELECT count(*) FROM memory_vectors")[0][0])


def test_ingest_is_acknowledged_before_its_vectors_and_wait_waits_for_them(db_path, tmp_path):
    env = daemon_env(tmp_path / "home", db_path)
    routes = tmp_path / "routes.log"
    with Daemon(db_path, env):
        indexer = _hold_indexer(env, routes)
        try:
            done = run_client(["ingest", "-"], env, routes=routes, stdin=_records(40, "otter"))
            assert last_route(routes).startswith("daemon")
            assert done.returncode == 0, done.stderr
            report = json.loads(done.stdout)
            assert report["embedded"] == 0 and report["deferred_embedding"] == 40
            assert _counts(db_path) == (40, 0)
            backlog = _status(env, routes)["backlog"]
            assert backlog["waiting"] == 40 and backlog["oldest_age_s"] >= 0
            stats = json.loads(run_client(["stats"], env, routes=routes).stdout)
            assert stats["backlog"]["waiting"] == 40
            found = run_client(["query", "otter", "--json"], env, routes=routes)
            hits = json.loads(found.stdout)  # found before any vector
            assert len(hits) == 10 and all("otter" in hit["text"] for hit in hits)
            waiting = subprocess.Popen(
                [sys.executable, "-c", _CLIENT, "ingest", "--wait", "--text", "a waited note"],
                env={**env, "MEMCLI_TEST_ROUTE_LOG": str(routes)}, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE)
        finally:
            os.kill(indexer, signal.SIGCONT)
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err
        (memory_id,) = json.loads(out)["memory_ids"]
        assert rows(db_path, "SELECT count(*) FROM memory_vectors WHERE memory_id = ?",
                    (memory_id,)) == [(1,)]  # --wait returned after its vector was written
        assert wait_until(lambda: _counts(db_path) == (41, 41), timeout=300)
        after = _status(env, routes)["backlog"]
        assert after["waiting"] == 0 and after["oldest_age_s"] is None


def test_a_backlog_left_by_a_killed_daemon_is_indexed_by_the_next(db_path, tmp_path):
    env = daemon_env(tmp_path / "home", db_path)
    routes = tmp_path / "routes.log"
    with Daemon(db_path, env) as daemon:
        indexer = _hold_indexer(env, routes)
        done = run_client(["ingest", "-"], env, routes=routes, stdin=_records(30, "heron"))
        assert done.returncode == 0, done.stderr
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait()
        os.kill(indexer, signal.SIGCONT)  # it finds the daemon gone and exits
        assert wait_until(lambda: not _running(indexer))
    assert _counts(db_path) == (30, 0)
    with Daemon(db_path, env):  # on start, what lacks a vector is queued again
        assert wait_until(lambda: _counts(db_path) == (30, 30), timeout=300)
        # The indexer reports its figures at most twice a second: the last batch's report
        # may follow the vectors it wrote.
        assert wait_until(
            lambda: _status(env, routes)["backlog"]["indexer"]["indexed"] == 30, timeout=30)


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for its (new) parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_the_http_route_of_the_daemon_leaves_vectors_to_its_indexer(tmp_path):
    import httpx

    db = tmp_path / "h.db"
    env = daemon_env(tmp_path / "home", db)
    routes = tmp_path / "routes.log"
    with Daemon(db, env) as daemon:
        indexer = _hold_indexer(env, routes)
        try:
            http_sock = str(daemon.socket)[: -len(".sock")] + ".http.sock"
            assert wait_until(lambda: os.path.exists(http_sock), timeout=60)
            with httpx.Client(transport=httpx.HTTPTransport(uds=http_sock),
                              base_url="http://localhost") as client:
                answer = client.post("/api/v1/events", json=[
                    {"text": "an event over HTTP", "user_id": "u"},
                    {"text": "another one", "user_id": "u"}], timeout=60)
            assert answer.status_code == 200, answer.text
            assert [r["deferred_embedding"] for r in answer.json()] == [1, 1]
            assert _counts(db) == (2, 0)
        finally:
            os.kill(indexer, signal.SIGCONT)
        assert wait_until(lambda: _counts(db) == (2, 2), timeout=300)
