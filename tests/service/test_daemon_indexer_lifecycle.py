"""The daemon's indexer comes and goes (memcli.service.daemon.indexer): real processes.

One supervisor indexes any number of databases with one indexer process at a time, forked when
a wake line waits, gone once it has been idle for its figure (MEMCLI_INDEXER_IDLE_EXIT, 1 s
here), forked again by the next ingest; an indexer killed in the middle of a backlog is followed
by a new one that finishes it. The supervisor with two databases runs in a small driver process
(the main process's loop, as `memcli serve` runs it, with command processes forked from it);
the rest through a real `memcli serve`. No assertion depends on how fast anything drains: the
indexer killed mid-batch is held in its embeddings request by a gated stub server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.support.backend import rows
from tests.support.daemon import Daemon, daemon_env, pid_alive, run_client, wait_until
from tests.support.llmstub import LLMStub

pytestmark = pytest.mark.daemon

# The main process's side of one daemon for several databases: the supervisor made before any
# fork, ingest in forked command processes, the select loop; it prints what happened as JSON.
_DRIVER = r"""
import json, os, select, sys, time
from memcli.operations.memory import Memory
from memcli.config import load_settings
from memcli.service.daemon import indexer

idle_exit, plan = float(sys.argv[1]), json.loads(sys.argv[2])
log = lambda line: print(line, file=sys.stderr, flush=True)
life_r, life_w = os.pipe()
sup = indexer.Supervisor(load_settings, lambda: [life_w], life_r, log, idle_exit=idle_exit)

def command(db, texts):
    pid = os.fork()
    if pid == 0:  # a command process: it closes the read end, ingest leaves vectors to the indexer
        os.close(sup.wake_read)
        with Memory.configured(db) as memory:
            report = memory.ingest([{"text": t, "user_id": "u"} for t in texts])
        os._exit(0 if report.deferred_embedding == len(texts) else 3)
    assert os.waitpid(pid, 0)[1] == 0

def until_idle_exit():
    # Serve like the daemon's loop until an indexer has run and gone again.
    seen, deadline = [], time.monotonic() + 120
    while time.monotonic() < deadline:
        for fd in select.select(sup.fds(), [], [], 0.1)[0]:
            sup.on_ready(fd)
        if sup.pid and sup.pid not in seen:
            seen.append(sup.pid)
        if seen and not sup.pid:
            return seen
    raise SystemExit("the indexer did not exit")

rounds = []
for step in plan:
    for db, texts in step:
        command(db, texts)
    pids = until_idle_exit()
    rounds.append({"pids": pids, "status": {db: sup.status(db) for db, _ in step},
                   "gone": [p for p in pids if os.path.exists(f"/proc/{p}")]})
sup.stop(10, log)
print(json.dumps(rounds))
"""


def _vector_texts(db) -> set[str]:
    return {
        text
        for (text,) in rows(
            db, "SELECT m.content FROM memories m JOIN memory_vectors v ON v.memory_id = m.id"
        )
    }


def _counts(db) -> tuple[int, int]:
    return (
        rows(db, "SELECT count(*) FROM memories")[0][0],
        rows(db, "SELECT count(*) FROM memory_vectors")[0][0],
    )


def test_one_indexer_indexes_two_databases_and_comes_back_after_its_idle_exit(tmp_path):
    env = daemon_env(tmp_path / "home", tmp_path / "unused.db")
    first, second = str(tmp_path / "one" / "first.db"), str(tmp_path / "two" / "second.db")
    for db in (first, second):
        os.makedirs(os.path.dirname(db))
    plan = [
        [(first, [f"otter note {i}" for i in range(70)]), (second, ["heron note"])],
        [(second, ["heron again"])],
    ]  # after the first indexer's idle exit
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, "1", json.dumps(plan)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    one, two = json.loads(done.stdout)
    assert len(one["pids"]) == 1  # one indexer for both databases
    assert one["status"][first]["indexed"] == 70 and one["status"][second]["indexed"] == 1
    assert not any(s["busy"] or s["pid"] for s in one["status"].values())
    assert len(two["pids"]) == 1 and two["pids"] != one["pids"]  # a new one, forked by ingest
    assert two["status"][second]["indexed"] == 2  # counted over both indexers
    assert one["gone"] == two["gone"] == []  # each exited (and was reaped)
    assert _vector_texts(first) == {f"otter note {i}" for i in range(70)}
    assert _vector_texts(second) == {"heron note", "heron again"}  # nothing of the other's


def _idle_env(tmp_path, db, seconds: str) -> dict[str, str]:
    env = daemon_env(tmp_path / "home", db)
    env["MEMCLI_INDEXER_IDLE_EXIT"] = seconds
    return env


def _status(env, routes) -> dict:
    done = run_client(["serve", "status"], env, routes=routes)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _records(n: int, word: str) -> str:
    return "".join(
        json.dumps({"text": f"note {i} mentions the {word}", "user_id": "u"}) + "\n"
        for i in range(n)
    )


def test_the_served_databases_indexer_exits_when_idle_and_ingest_brings_one_back(tmp_path):
    db = tmp_path / "m.db"
    env = _idle_env(tmp_path, db, "1")
    routes = tmp_path / "routes.log"
    with Daemon(db, env):
        # The indexer forked at start (to find a killed daemon's backlog) has exited.
        assert wait_until(
            lambda: _status(env, routes)["backlog"]["indexer"]["pid"] is None, timeout=120
        )
        done = run_client(["ingest", "-"], env, routes=routes, stdin=_records(5, "otter"))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["deferred_embedding"] == 5
        assert wait_until(lambda: _counts(db) == (5, 5), timeout=120)  # a new indexer's work
        assert wait_until(
            lambda: _status(env, routes)["backlog"]["indexer"]["pid"] is None, timeout=120
        )  # and it is gone again
        backlog = _status(env, routes)["backlog"]
        assert backlog["waiting"] == 0
        assert backlog["indexer"]["indexed"] == 5 and backlog["indexer"]["busy"] is False


class _GatedStub(LLMStub):
    """The embeddings server, holding every embeddings request until `gate` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.arrived = threading.Event()

    def handler(self):
        base, stub = super().handler(), self

        class Gated(base):
            def do_POST(self) -> None:
                if self.path.rstrip("/").endswith("/embeddings"):
                    stub.arrived.set()
                    while not stub.gate.wait(0.05):
                        if stub._closing.is_set():
                            return
                super().do_POST()

        return Gated


def test_an_indexer_killed_mid_backlog_is_followed_by_one_that_finishes_it(tmp_path):
    db = tmp_path / "m.db"
    routes = tmp_path / "routes.log"
    with _GatedStub() as stub:
        env = _idle_env(tmp_path, db, "3600")
        env.update(
            MEMCLI_EMBEDDER="openai",
            MEMCLI_EMBED_BASE_URL=stub.base_url,
            MEMCLI_EMBED_MODEL="stub-model",
            MEMCLI_EMBED_DIMENSION="64",
            MEMCLI_EMBED_API_KEY="k",
        )
        with Daemon(db, env):
            done = run_client(["ingest", "-"], env, routes=routes, stdin=_records(150, "heron"))
            assert done.returncode == 0, done.stderr
            assert stub.arrived.wait(120)  # the indexer is in its first batch's request
            held = _status(env, routes)["backlog"]["indexer"]
            assert held["busy"] is True and held["pid"]
            os.kill(held["pid"], signal.SIGKILL)
            assert wait_until(
                lambda: (
                    _status(env, routes)["backlog"]["indexer"]["pid"] not in (None, held["pid"])
                ),
                timeout=60,
            )
            stub.gate.set()
            assert wait_until(lambda: _counts(db) == (150, 150), timeout=300)
            assert not pid_alive(held["pid"])
