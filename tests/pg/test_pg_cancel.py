"""A statement the PostgreSQL server cancels (SQLSTATE 57014) is reported as what it is, not as
a busy database: through the real CLI in a child process, against the real server, exit 75
(a retry may succeed) and one line naming the cause, for the two causes: `statement_timeout`
(set in the connection URL's libpq options) and `pg_cancel_backend` (an administrator's
cancel). memcli's own wait for the writer lock still reads "busy" (55P03). The daemon's
HTTP mapping of both is 503 with Retry-After, from the same error.

The CLI's statement is held deterministically: the test holds an ACCESS EXCLUSIVE lock on
`memories` in an open transaction, so the CLI's first read of it waits until cancelled (a
`statement_timeout` of 300 ms fires whatever else the machine is doing; the cancel is sent
only once the server shows the CLI's backend waiting for that lock)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from urllib.parse import quote

import pytest

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not installed")

from memcli.errors import DatabaseBusyError  # noqa: E402
from memcli.service.api import status_for  # noqa: E402
from memcli.store.postgres import error_map as errors  # noqa: E402

_ENTRY_POINT = "from memcli.cli.entry import main\nmain()\n"


def _start(url: str, tmp_path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "HOME": str(tmp_path), "MEMCLI_DB": url, "MEMCLI_EMBEDDER": "hash"}
    env.pop("MEMCLI_TENANT", None)
    return subprocess.Popen([sys.executable, "-c", _ENTRY_POINT, *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memcli: error: "), err
    return lines[0]


def _waiting_on_lock(admin) -> list[int]:
    return [r[0] for r in admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'").fetchall()]


def test_a_statement_timeout_says_so_and_exits_75(pg_memcli_db, tmp_path):
    url = pg_memcli_db + "?options=" + quote("-c statement_timeout=300")
    with psycopg.connect(pg_memcli_db) as holder:  # a transaction: the lock stays held
        holder.execute("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE")
        code, out, err = _finish(_start(url, tmp_path, "stats", "--json"))
        holder.rollback()
    line = _one_line(err)
    assert code == 75 and out == "", (code, out, err)
    assert "cancelled the statement" in line and "statement_timeout" in line, line
    assert "write lock" not in line and "busy" not in line, line


def test_an_administrators_cancel_says_so_and_exits_75(pg_memcli_db, tmp_path):
    with psycopg.connect(pg_memcli_db) as holder, \
            psycopg.connect(pg_memcli_db, autocommit=True) as admin:
        holder.execute("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE")
        proc = _start(pg_memcli_db, tmp_path, "stats", "--json")
        try:
            deadline = time.monotonic() + 90
            while not _waiting_on_lock(admin) and time.monotonic() < deadline \
                    and proc.poll() is None:
                time.sleep(0.05)
            waiting = _waiting_on_lock(admin)
            assert len(waiting) == 1, (waiting, proc.poll())
            assert admin.execute("SELECT pg_cancel_backend(%s)", (waiting[0],)
                                 ).fetchone() == (True,)
        finally:
            code, out, err = _finish(proc)
            holder.rollback()
    line = _one_line(err)
    assert code == 75 and out == "", (code, out, err)
    assert "cancelled the statement" in line and "cancel request" in line, line
    assert "pg_cancel_backend" in line and "write lock" not in line, line


def test_the_daemon_answers_503_for_a_cancel_as_for_a_busy_database(pg_memcli_db):
    """The real server's 57014 and 55P03, mapped as every statement's error is, then given
    the daemon's HTTP status: both 503 with Retry-After (retrying may succeed)."""
    with psycopg.connect(pg_memcli_db, autocommit=True) as conn:
        conn.execute("SET statement_timeout = 50")
        with pytest.raises(psycopg.errors.QueryCanceled) as cancel:
            conn.execute("SELECT pg_sleep(5)")
    with psycopg.connect(pg_memcli_db) as holder, psycopg.connect(pg_memcli_db) as waiter:
        holder.execute("LOCK TABLE meta IN ACCESS EXCLUSIVE MODE")
        waiter.execute("SET LOCAL lock_timeout = 50")
        with pytest.raises(psycopg.errors.LockNotAvailable) as lock:
            waiter.execute("SELECT count(*) FROM meta")
    cancelled = errors.mapped(cancel.value, "db", 30.0)
    busy = errors.mapped(lock.value, "db", 30.0)
    assert isinstance(cancelled, DatabaseBusyError) and isinstance(busy, DatabaseBusyError)
    assert "statement_timeout" in str(cancelled) and "write lock" in str(busy)
    assert cancelled.exit_code == busy.exit_code == 75
    assert status_for(cancelled) == status_for(busy) == (503, {"Retry-After": "1"})
