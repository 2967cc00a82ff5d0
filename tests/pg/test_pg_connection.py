"""The PostgreSQL connection (memcli/store/postgres) on the real server of tests/support/pg.py:
open, migrate, reopen; the writer lock and exit 75; savepoints; errors mapped to memcli's
one-line errors; `high` rows opened or left out like SQLite's row tracer does."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memcli.errors import DatabaseBusyError, NoDatabaseError, SchemaError, StorageError
from tests.support.pg_db import with_database

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not installed")

from memcli.store.postgres import connect  # noqa: E402
from memcli.store.postgres import migrations as pg_migrations  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_open_migrates_an_empty_database_and_reopen_changes_nothing(pg_db):  # noqa: F811
    from memcli.store.sqlite import migrations as sqlite_migrations

    db = connect(pg_db)
    try:
        assert db.get_meta("schema_version") == str(sqlite_migrations.LATEST)
        assert pg_migrations.LATEST == sqlite_migrations.LATEST
        assert db.vec_enabled and db.vec_warning is None
        seq = db.insert("INSERT INTO events (event_id, ts, recorded_at, content_hash)"
                        " VALUES (?, ?, ?, ?) RETURNING seq", ("e1", "t", "t", "h1"))
        assert seq == 1
        size = db.size_bytes()
        assert size > 100_000  # tables and indexes of the schema's own schema only
        ddl_xmin = db.scalar("SELECT xmin::text FROM meta WHERE key = 'schema_version'")
    finally:
        db.close()
    # a libpq keyword string works as well as a URL
    info = psycopg.conninfo.conninfo_to_dict(pg_db)
    again = connect(" ".join(f"{k}={v}" for k, v in info.items()))
    try:
        assert pg_migrations.migrate(again) == pg_migrations.LATEST  # nothing left to do
        assert again.scalar("SELECT xmin::text FROM meta WHERE key = 'schema_version'") == ddl_xmin
        assert again.query("SELECT event_id FROM events") == [{"event_id": "e1"}]
    finally:
        again.close()


def test_a_newer_database_is_refused(pg_db):  # noqa: F811
    db = connect(pg_db)
    db.set_meta("schema_version", str(pg_migrations.LATEST + 1))
    db.close()
    with pytest.raises(SchemaError, match="newer than this memcli"):
        connect(pg_db)


def test_another_programs_tables_are_left_alone(pg_db):  # noqa: F811
    with psycopg.connect(pg_db, autocommit=True) as other:
        other.execute("CREATE TABLE invoices (id int)")
    with pytest.raises(SchemaError, match="another program's tables"):
        connect(pg_db)
    with psycopg.connect(pg_db, autocommit=True) as other:
        assert other.execute("SELECT to_regclass('meta')").fetchone()[0] is None


def test_read_commands_create_nothing(pg_db):  # noqa: F811
    for kwargs in ({"readonly": True}, {"must_exist": True}):
        with pytest.raises(NoDatabaseError, match="no memcli database"):
            connect(pg_db, **kwargs)
    with psycopg.connect(pg_db, autocommit=True) as other:
        assert other.execute("SELECT to_regclass('meta')").fetchone()[0] is None


def _waiting_advisory(admin) -> int:
    """Advisory locks waited for in this test's database (another xdist worker's tests wait
    for theirs in their own databases of the same server)."""
    return admin.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                         " AND NOT granted AND database = (SELECT oid FROM pg_database"
                         " WHERE datname = current_database())").fetchone()[0]


def test_two_processes_migrate_a_fresh_database_at_once(pg_db, tmp_path):  # noqa: F811
    """Both start on an empty database while the migration lock is held: both wait, then one
    creates the schema and the other finds it done. Both succeed."""
    script = "import sys; from memcli.store.postgres import connect; connect(sys.argv[1]).close()"
    env = {**os.environ, "HOME": str(tmp_path)}
    with psycopg.connect(pg_db, autocommit=True) as admin:
        admin.execute("SELECT pg_advisory_lock(hashtext('memcli.migrate'))")
        procs = [subprocess.Popen([sys.executable, "-c", script, pg_db], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        try:
            deadline = time.monotonic() + 60
            while _waiting_advisory(admin) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _waiting_advisory(admin) == 2  # both are inside their migration
            admin.execute("SELECT pg_advisory_unlock(hashtext('memcli.migrate'))")
            results = [p.communicate(timeout=60) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        assert [p.returncode for p in procs] == [0, 0], results
        assert admin.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                             ).fetchone()[0] == str(pg_migrations.LATEST)


def test_a_second_writer_waits_then_gets_busy(pg_db):  # noqa: F811
    first = connect(pg_db)
    second = connect(pg_db, busy_timeout=0.5)
    try:
        with first.transaction():
            first.set_meta("holder", "first")
            # readers are not held up by a writer
            assert second.get_meta("schema_version") is not None
            started = time.monotonic()
            with pytest.raises(DatabaseBusyError) as caught:
                with second.transaction():  # another row: only the writer lock is in the way
                    second.set_meta("other", "second")
            assert time.monotonic() - started >= 0.45
            assert caught.value.exit_code == 75
            with pytest.raises(DatabaseBusyError):
                with second.transaction(wait=0):
                    pass
            assert not second.in_transaction
        with second.transaction():  # free again once the first committed
            second.set_meta("holder", "second")
        assert first.get_meta("holder") == "second"
    finally:
        first.close()
        second.close()


def test_a_cancelled_statement_is_busy(pg_db):  # noqa: F811
    db = connect(pg_db)
    try:
        db.execute("SET statement_timeout = 100")
        with pytest.raises(DatabaseBusyError):
            db.execute("SELECT pg_sleep(2)")
    finally:
        db.close()


def test_nested_transaction_is_a_savepoint(pg_db):  # noqa: F811
    db = connect(pg_db)
    try:
        with db.transaction():
            db.set_meta("outer", "1")
            with pytest.raises(ValueError):
                with db.transaction():
                    db.set_meta("inner", "1")
                    raise ValueError
            with db.savepoint():
                db.set_meta("kept", "1")
            assert db.in_transaction
        assert not db.in_transaction
        assert (db.get_meta("outer"), db.get_meta("inner"), db.get_meta("kept")) == (
            "1", None, "1")
        with pytest.raises(ValueError):
            with db.transaction():
                db.set_meta("gone", "1")
                raise ValueError
        assert db.get_meta("gone") is None
    finally:
        db.close()


def test_surface_of_the_sqlite_database(pg_db):  # noqa: F811
    db = connect(pg_db)
    try:
        db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                       [(f"k{i}", str(i)) for i in range(5)])
        assert db.change_count("UPDATE meta SET value = 'x' WHERE key LIKE 'k%'") == 5
        rows = db.execute("SELECT key FROM meta WHERE key LIKE :p ORDER BY key", {"p": "k%"})
        assert rows.fetchone() == ("k0",)
        assert [r[0] for r in db.execute("SELECT key FROM meta WHERE key LIKE 'k%'"
                                         " ORDER BY key")] == [f"k{i}" for i in range(5)]
        streamed = db.stream("SELECT key, value FROM meta WHERE key LIKE 'k%' ORDER BY key")
        first = next(streamed)
        db.set_meta("between", "rows")  # other statements may run while a stream is open
        assert [first, *streamed][-1] == {"key": "k4", "value": "x"}
        with db.transaction():
            assert len(list(db.stream("SELECT key FROM meta"))) >= 6
        # values come back as SQLite's would: numbers, never Decimal
        assert db.scalar("SELECT sum(seq) FROM events") is None
        row = db.query("SELECT round(2.5::numeric, 1) AS r, sum(x) AS s"
                       " FROM (VALUES (1::bigint), (2)) v(x)")[0]
        assert (type(row["r"]), row["r"], type(row["s"]), row["s"]) == (float, 2.5, int, 3)
        assert db.scalar("SELECT ? = 1", (True,)) is True
        # parameters PostgreSQL cannot type from their context (SQLite never asks)
        assert db.query("SELECT ? AS a, ? IS NULL AS b, CASE ? WHEN ? THEN ? END AS c",
                        ("x", "y", "k", "k", "z")) == [{"a": "x", "b": False, "c": "z"}]
        assert db.scalar("SELECT count(*) FROM (VALUES (?, ?), (?, ?)) AS v(a, b)",
                         ("a", 1, "b", 2)) == 2
    finally:
        db.close()


def test_cannot_connect_names_the_server_and_masks_the_password(pg_server):  # noqa: F811
    from tests.support.net import refused_port

    with refused_port() as port:
        url = f"postgresql://memcli:s3cret@127.0.0.1:{port}/memory"
        with pytest.raises(StorageError) as caught:
            connect(url)
        message = str(caught.value)
        assert message.startswith(f"cannot connect to postgresql://memcli:***@127.0.0.1:{port}/")
        assert "s3cret" not in message
        keyword = f"host=127.0.0.1 port={port} dbname=memory password=s3cret"
        with pytest.raises(StorageError) as caught:
            connect(keyword)
    assert "s3cret" not in str(caught.value) and "password=***" in str(caught.value)


def test_a_missing_database(pg_server):  # noqa: F811
    url = with_database(pg_server, "no_such_db")
    with pytest.raises(NoDatabaseError, match="no memcli database at"):
        connect(url, must_exist=True)
    with pytest.raises(StorageError, match="createdb"):
        connect(url)  # a server database is the DBA's to create, not memcli's


def test_a_wrong_password(pg_cluster, pg_db):  # noqa: F811
    """One role with a password checked by scram (the server trusts everyone else)."""
    hba = pg_cluster.data_dir / "pg_hba.conf"
    original = hba.read_text()
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as admin:
        admin.execute("SET password_encryption = 'scram-sha-256'")
        admin.execute("DROP ROLE IF EXISTS memcli_pw")
        admin.execute("CREATE ROLE memcli_pw LOGIN PASSWORD 'right'")
        try:
            hba.write_text("host all memcli_pw 127.0.0.1/32 scram-sha-256\n" + original)
            admin.execute("SELECT pg_reload_conf()")
            url = pg_db.replace("postgres@", "memcli_pw:wrong@")
            with pytest.raises(StorageError) as caught:
                connect(url)
            assert str(caught.value).startswith("cannot log in to ")
            assert "wrong" not in str(caught.value).replace("memcli_pw:***", "")
            assert "password authentication failed" in str(caught.value)
        finally:
            hba.write_text(original)
            admin.execute("SELECT pg_reload_conf()")
            admin.execute("DROP ROLE memcli_pw")


def test_privilege_read_only_and_damage_errors(pg_cluster, pg_db):  # noqa: F811
    connect(pg_db).close()
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS memcli_nobody")
        admin.execute("CREATE ROLE memcli_nobody LOGIN")
    try:
        with pytest.raises(StorageError, match="^permission denied on .*memcli_nobody@"):
            connect(pg_db.replace("postgres@", "memcli_nobody@"))
    finally:
        with psycopg.connect(pg_cluster.dsn, autocommit=True) as admin:
            admin.execute("DROP OWNED BY memcli_nobody CASCADE")
            admin.execute("DROP ROLE memcli_nobody")
    reader = connect(pg_db, readonly=True)
    try:
        with pytest.raises(StorageError, match="read-only"):
            reader.set_meta("k", "v")
    finally:
        reader.close()
    db = connect(pg_db)
    try:
        db.execute("DROP TABLE acb_seen")
        with pytest.raises(StorageError, match="^database is damaged: .*acb_seen"):
            db.query("SELECT * FROM acb_seen")
    finally:
        db.close()


def test_high_rows_are_opened_with_the_key_and_left_out_without(  # noqa: F811
        pg_db, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MEMCLI_KEY", base64.b64encode(b"k" * 32).decode())
    early = connect(pg_db)  # opened before the first sealed write
    db = connect(pg_db)
    try:
        with db.transaction():
            sealed = db.crypto.seal('{"text": "my secret"}')
            db.execute("INSERT INTO history (op, meta, ts) VALUES ('ADD', ?, 't1')", (sealed,))
            db.execute("INSERT INTO history (op, meta, ts) VALUES ('ADD', '{}', 't2')")
        assert sealed.startswith("enc:v1:")
        opened = [r["meta"] for r in db.query("SELECT meta FROM history ORDER BY id")]
        assert opened == ['{"text": "my secret"}', "{}"]
        assert db.scalar("SELECT meta FROM history WHERE ts = 't1'") == '{"text": "my secret"}'
        assert [r["meta"] for r in db.stream("SELECT meta FROM history ORDER BY id")] == opened
        raw = [r["meta"] for r in db.stream("SELECT meta FROM history ORDER BY id", raw=True)]
        assert raw == [sealed, "{}"]
        early.crypto.refresh()
        assert early.scalar("SELECT meta FROM history WHERE ts = 't1'") == opened[0]
    finally:
        db.close()
        early.close()
    monkeypatch.delenv("MEMCLI_KEY")
    monkeypatch.setenv("MEMCLI_KEY_FILE", str(tmp_path / "no-such-key"))
    keyless = connect(pg_db)
    notices: list[str] = []
    keyless.crypto.notice = notices.append
    try:
        assert keyless.query("SELECT meta FROM history ORDER BY id") == [{"meta": "{}"}]
        assert keyless.scalar("SELECT meta FROM history WHERE ts = 't1'") is None
        assert [r["meta"] for r in keyless.stream("SELECT meta FROM history")] == ["{}"]
        assert keyless.scalar("SELECT count(*) FROM history") == 2  # no sealed value in it
        assert len(notices) == 1 and "left out" in notices[0]
    finally:
        keyless.close()


def test_run_lock_is_held_per_session_and_dies_with_it(pg_db):  # noqa: F811
    first, second = connect(pg_db), connect(pg_db)
    try:
        assert first.try_run_lock("consolidate")
        assert not second.try_run_lock("consolidate")
        assert second.try_run_lock("decay")  # another command's lock is another lock
        first.release_run_lock("consolidate")
        assert second.try_run_lock("consolidate")
        second.close()  # a holder that goes away (a crash) frees its locks
        deadline = time.monotonic() + 10  # once the server has ended that session
        while not first.try_run_lock("consolidate") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.try_run_lock("decay")
        assert first.scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                            " AND pid = pg_backend_pid()") >= 2
    finally:
        first.close()
        second.close()


def test_import_memcli_does_not_import_psycopg(tmp_path):
    """psycopg costs 160-250 ms at import: only opening a PostgreSQL database may load it."""
    code = ("import sys, memcli, memcli.store.postgres, memcli.store.postgres.dialect,"
            " memcli.store.postgres.placeholders, memcli.store.postgres.migrations;"
            " print(sorted(m for m in sys.modules if m.split('.')[0] in"
            " ('psycopg', 'psycopg_pool', 'pgvector')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "HOME": str(tmp_path)}, check=True)
    assert done.stdout.strip() == "[]"


def test_key_rotation_reseals_every_value_events_included(pg_db, monkeypatch):  # noqa: F811
    from memcli.policy.encryption import Key, new_key
    from memcli.store.postgres.sealing import reseal, sealed_columns

    old_raw = b"o" * 32
    monkeypatch.setenv("MEMCLI_KEY", base64.b64encode(old_raw).decode())
    db = connect(pg_db)
    try:
        with db.transaction():
            event = db.crypto.seal('{"text": "secret event"}')
            db.execute("INSERT INTO events (event_id, ts, recorded_at, content_hash, content)"
                       " VALUES ('e1', 't', 't', 'h1', ?)", (event,))
            db.execute("INSERT INTO history (op, meta, ts) VALUES ('ADD', ?, 't')",
                       (db.crypto.seal("secret history"),))
        assert ("events", "content") in sealed_columns(db)
        old, new = Key(old_raw, "test"), Key(new_key(), "test")
        with db.transaction():
            count = reseal(db, lambda v: new.encrypt(old.decrypt(v)), "enc:v1:")
            db.set_meta("enc_key_id", new.id)
        assert count == 2
        stored = [r["content"] for r in db.stream("SELECT content FROM events", raw=True)]
        assert stored != [event] and new.decrypt(stored[0]) == '{"text": "secret event"}'
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            db.execute("UPDATE events SET ts = 'x'")  # the guard is back after the rotation
    finally:
        db.close()
