"""`memcli doctor` on PostgreSQL: the engine's own checks, not SQLite's.

SQLite's WAL check read a `<path>-wal` file; given a URL it reported "WAL 0.0 MB". PostgreSQL's
WAL is the server's: doctor says the check does not apply, and checks instead what a
long-lived SQLite reader is to its WAL: a long open transaction, which keeps VACUUM from
removing deleted rows (a purge's text included). Both through `Backend.log_health`.
Real server, real CLI.
"""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from memcli.cli.app import app
from memcli.health import checks as doctor
from memcli.store.opener import open_database
from tests.support.cli import CliRunner

pytestmark = pytest.mark.usefixtures("fast_cli")


def _doctor(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["doctor", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def _checks(report: dict) -> dict[str, dict]:
    return {c["check"]: c for c in report["checks"]}


def test_the_wal_check_does_not_apply_and_transactions_are_checked(pg_memcli_db: str,
                                                                   monkeypatch) -> None:
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    ingest = CliRunner().invoke(app, ["ingest", "--db", pg_memcli_db, "--text", "kept"])
    assert ingest.exit_code == 0, ingest.stderr
    code, report = _doctor("--db", pg_memcli_db)
    assert code == 0, report
    checks = _checks(report)
    assert checks["wal"]["status"] == "info"
    assert checks["wal"]["detail"].startswith("does not apply: the PostgreSQL server manages")
    assert "bytes" not in checks["wal"]
    assert checks["transactions"]["status"] == "ok"
    code, report = _doctor("--db", pg_memcli_db, "--fix")
    assert code == 0 and report["fixed"]["wal_reset"] is None  # nothing of memcli's to reset


def test_a_long_open_transaction_is_a_problem(pg_memcli_db: str) -> None:
    with psycopg.connect(pg_memcli_db, application_name="stuck-client") as holder:
        holder.execute("SELECT count(*) FROM memories")  # a transaction, left open
        pid = holder.info.backend_pid
        time.sleep(1.2)
        db = open_database(pg_memcli_db, readonly=True, must_exist=True)
        try:
            report = doctor.diagnose(db, transaction_limit=1.0)
            relaxed = doctor.diagnose(db)  # the default limit: minutes
        finally:
            db.close()
    problem = _checks(report)["transactions"]
    assert problem["status"] == "problem" and not report["healthy"]
    assert f"pid {pid}, stuck-client, idle in transaction" in problem["detail"]
    assert "VACUUM" in problem["detail"] and "pg_terminate_backend" in problem["fix"]
    assert problem["seconds"] >= 1.0
    assert _checks(relaxed)["transactions"]["status"] == "ok"


def test_sqlite_keeps_its_wal_check(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    path = str(tmp_path / "m.db")
    assert CliRunner().invoke(app, ["ingest", "--db", path, "--text", "kept"]).exit_code == 0
    code, report = _doctor("--db", path)
    checks = _checks(report)
    assert code == 0 and checks["wal"]["status"] == "ok" and "bytes" in checks["wal"]
    assert "transactions" not in checks  # SQLite does not show other connections' readers


def test_another_programs_schema_is_reported_without_the_password(pg_db: str) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id int)")
    url = pg_db.replace("postgres@", "postgres:s3cret@")  # trust auth ignores it
    code, report = _doctor("--db", url)
    assert code == 1 and "s3cret" not in json.dumps(report)
    assert report["db"] == pg_db.replace("postgres@", "postgres:***@")
