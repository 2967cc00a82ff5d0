"""Several processes writing one PostgreSQL database at once, with real
`memcli` processes on a real server: idempotent concurrent ingest, exact counts for many
writers on many tenants or one, and the lifecycle run lock as a session advisory lock (a second
`memcli consolidate` refuses with 75; a killed holder's lock is free at once, on any host).
Longer runs with timings: bench/results/pg-writers.md."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from tests.support.pg_writers import records, run_writers, writer_env


def _count(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def _memcli(env: dict[str, str], *args: str, stdin: str | None = None
            ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memcli", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=300)


def test_the_same_events_from_four_processes_land_exactly_once(tmp_path: Path,
                                                              pg_db: str) -> None:  # noqa: F811
    env = writer_env(tmp_path / "home", pg_db)
    assert _memcli(env, "ingest", "--text", "first write creates the tables").returncode == 0
    data = records("acme", 40)
    run = run_writers([(env, data)] * 4)
    assert not run.failures(), run.failures()
    assert run.ingested == 40  # the others report them as duplicates, not errors
    skipped = sum(len(json.loads(r.stdout).get("skipped", [])) for r in run.results)
    assert skipped == 3 * 40
    assert _count(pg_db, "SELECT count(*), count(DISTINCT event_id) FROM events"
                         " WHERE tenant_id = 'acme'") == [(40, 40)]
    assert _count(pg_db, "SELECT count(*) FROM memories WHERE tenant_id = 'acme'") == [(40,)]


def test_eight_writers_on_eight_tenants_and_on_one(tmp_path: Path,
                                                  pg_db: str) -> None:  # noqa: F811
    env = writer_env(tmp_path / "home", pg_db)
    tenants = [f"t{i}" for i in range(8)]
    run = run_writers([(env, records(t, 15)) for t in tenants])
    assert not run.failures(), run.failures()
    assert run.ingested == 8 * 15
    by_tenant = dict(_count(pg_db, "SELECT tenant_id, count(*) FROM memories GROUP BY 1"))
    assert by_tenant == dict.fromkeys(tenants, 15)
    # One tenant, one session, eight writers: distinct events, one queue.
    run = run_writers([(env, records("one", 15, prefix=f"w{i}")) for i in range(8)])
    assert not run.failures(), run.failures()
    assert _count(pg_db, "SELECT count(*), count(DISTINCT seq) FROM events"
                         " WHERE tenant_id = 'one'") == [(120, 120)]
    assert _count(pg_db, "SELECT count(*) FROM memories WHERE tenant_id = 'one'") == [(120,)]


_HOLDER = """
import sys, time
from memcli.lifecycle.runlock import run_lock
from memcli.store import postgres
db = postgres.connect(sys.argv[1])
with run_lock(db, "consolidate"):
    print("held", flush=True)
    time.sleep(600)
"""


def _holder(url: str, env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, url], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line == "held\n", proc.stderr.read() if proc.stderr else line
    return proc


def test_a_second_consolidate_refuses_and_a_killed_holder_frees_the_lock(
        tmp_path: Path, pg_db: str) -> None:  # noqa: F811
    env = writer_env(tmp_path / "home", pg_db)
    assert _memcli(env, "ingest", "-", stdin=records("default", 3)).returncode == 0
    holder = _holder(pg_db, env)
    try:
        # No wait for the holder's end (lifecycle.lock_wait): busy at once.
        refused = _memcli({**env, "MEMCLI_LOCK_WAIT": "0"}, "consolidate", "--no-llm", "--json")
        assert refused.returncode == 75, refused.stderr
        assert refused.stdout == ""
        error = [line for line in refused.stderr.splitlines() if "error" in line]
        assert len(error) == 1 and error[0].startswith("memcli: error: another `memcli "
                                                       f"consolidate` is running (pid {holder.pid}")
        assert "expires" not in error[0]  # the server frees it with its holder, not a clock
        holder.send_signal(signal.SIGKILL)  # no release: the server ends its session
        holder.wait()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    deadline = time.monotonic() + 20
    while True:
        done = _memcli(env, "consolidate", "--no-llm", "--json")
        if done.returncode != 75 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert done.returncode == 0, done.stderr
    assert _count(pg_db, "SELECT count(*) FROM run_locks") == [(0,)]


def test_a_lock_row_left_by_a_holder_on_another_host_does_not_block(
        tmp_path: Path, pg_db: str) -> None:  # noqa: F811
    """On SQLite a row of another host blocks until it expires (its pid cannot be checked);
    on PostgreSQL the advisory lock says whether anyone holds it, on any host."""
    env = writer_env(tmp_path / "home", pg_db)
    assert _memcli(env, "ingest", "-", stdin=records("default", 3)).returncode == 0
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("INSERT INTO run_locks (name, holder, host, pid, acquired_at, expires_at)"
                     " VALUES ('consolidate', 'x', 'elsewhere.example', 4242,"
                     " '2025-01-01T00:00:00Z', '9999-01-01T00:00:00Z')")
    done = _memcli(env, "consolidate", "--no-llm", "--json")
    assert done.returncode == 0, done.stderr
    assert _count(pg_db, "SELECT count(*) FROM run_locks") == [(0,)]
