"""Cron beside a daemon: `memcli consolidate` and `memcli purge` while the daemon's indexer
consolidates a session (memcli/service/daemon/indexer.py) wait their turn and finish; exit 75 stays
for a lock still held after the wait (`lifecycle.lock_wait`, MEMCLI_LOCK_WAIT).

The indexer's consolidation is made slow by the scripted model (tests/support/llmstub.py): its
reply comes after a delay, and the test starts the cron commands once the model was asked, so
the indexer holds the `consolidate` lock while they run. No clock decides an assertion: the
delay only has to outlast the commands' start.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.daemon import _CLIENT, Daemon, daemon_env, run_client, wait_until
from tests.support.lifecycle import conversation, extraction

pytestmark = pytest.mark.daemon

DELAY = 6.0  # seconds the model takes to answer the indexer's consolidation


def _env(tmp_path, db, stub, lock_wait: str) -> dict[str, str]:
    env = daemon_env(tmp_path / "home", db)
    config = tmp_path / "config.yaml"
    config.write_text("consolidate: auto\n", encoding="utf-8")
    env.update(MEMCLI_CONFIG=str(config), MEMCLI_LLM_BASE_URL=stub.base_url,
               MEMCLI_LLM_MODEL="stub-model", MEMCLI_LOCK_WAIT=lock_wait)
    return env


def _start_consolidating(env, routes, stub) -> None:
    """Two sessions of one user: the second one's start makes the indexer consolidate the
    first, asking the model (which answers after DELAY) under the `consolidate` lock."""
    stub.enqueue_json(extraction("Priya is a nurse.", facts=["Priya works as a nurse."]),
                      delay=DELAY)
    first = conversation("s1", ["I work as a nurse at Santa Maria.", "I love green tea."])
    second = conversation("s2", ["Hello again!"], day=2)
    lines = "".join(json.dumps(r) + "\n" for r in first + second)
    done = run_client(["ingest", "-"], env, routes=routes, stdin=lines)
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: len(stub.chat_requests) == 1, timeout=120)


def _cron(env, routes, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _CLIENT, *argv, "--json"],
                            env={**env, "MEMCLI_TEST_ROUTE_LOG": str(routes)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_cron_waits_for_the_indexers_consolidation_and_finishes(tmp_path, stub):
    db = tmp_path / "m.db"
    env, routes = _env(tmp_path, db, stub, "120"), tmp_path / "routes.log"
    with Daemon(db, env):
        _start_consolidating(env, routes, stub)
        consolidate = _cron(env, routes, "consolidate", "--no-llm")
        purge = _cron(env, routes, "purge", "--user-id", "nobody")
        out, err = consolidate.communicate(timeout=300)
        assert consolidate.returncode == 0, err
        assert isinstance(json.loads(out)["sessions"], list)
        out, err = purge.communicate(timeout=300)
        assert purge.returncode == 0, err
        assert json.loads(out)["complete"] is True
    # The indexer's own run finished too: its fact is there.
    facts = run_client(["query", "nurse", "--json", "--db", str(db)], env, routes=routes)
    assert "Priya works as a nurse." in facts.stdout.decode()


def test_a_lock_still_held_after_the_wait_is_exit_75(tmp_path, stub):
    db = tmp_path / "m.db"
    env, routes = _env(tmp_path, db, stub, "0.5"), tmp_path / "routes.log"
    with Daemon(db, env):
        _start_consolidating(env, routes, stub)
        done = _cron(env, routes, "consolidate", "--no-llm")
        _out, err = done.communicate(timeout=120)
        assert done.returncode == 75
        last = err.strip().splitlines()[-1]
        assert last.startswith("memcli: error: another `memcli consolidate` is running")
        assert "waited 0.5 s" in last and "MEMCLI_LOCK_WAIT" in last
