"""The store: pragmas, migrations, the append-only event log, sqlite-vec, embedder checks.

The tests of what both engines promise (foreign keys, a newer schema refused, migrate a no-op
on reopen, the append-only log, the embedder's identity) run on SQLite and PostgreSQL (the
backend matrix, tests/support/backend.py); those of SQLite's own machinery (PRAGMAs, FTS5's
scope tokens, sqlite-vec and its vec0 layout) carry `sqlite_only`."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import apsw
import pytest

from memcli import Memory
from memcli.errors import EmbedderMismatchError, SchemaError
from memcli.providers.embedders import HashEmbedder
from memcli.store.opener import open_database
from memcli.store.sqlite import migrations
from memcli.store.sqlite.connection import Database
from tests.support.backend import connect, index_names, is_pg, rows
from tests.support.records import ndjson, turns

# conftest: no SPLADE, one click command; SQLite and PostgreSQL (tests/support/backend.py)
pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]


def _schema(path) -> list[tuple[str, str, str]]:
    """Every schema object of a file, its SQL with whitespace collapsed, sorted by name."""
    conn = apsw.Connection(str(path))
    try:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall()
    finally:
        conn.close()
    return sorted((t, n, re.sub(r"\s+", " ", s or "").strip()) for t, n, s in rows)


def _set_user_version(path, version: int) -> None:
    """The schema version a database says it has (PostgreSQL keeps it in meta)."""
    conn = connect(path)
    try:
        if is_pg(path):
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
        else:
            conn.execute(f"PRAGMA user_version = {version}")
    finally:
        conn.close()


def _latest(path) -> int:
    db = open_database(path)
    try:
        return db.backend.schema_latest
    finally:
        db.close()


def _shape(path) -> tuple:
    """Tables with their columns and every index, of either engine."""
    if not is_pg(path):
        return tuple(_schema(path))
    columns = rows(path, "SELECT table_name, column_name, data_type, is_nullable,"
                         " column_default FROM information_schema.columns"
                         " WHERE table_schema = current_schema()")
    return tuple(sorted(map(repr, columns))), tuple(sorted(index_names(path)))


@pytest.fixture
def without_sqlite_vec(monkeypatch):
    """Make the sqlite_vec package look uninstalled, exactly as find_spec reports a missing one."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "sqlite_vec" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


# -- connection -------------------------------------------------------------------------------


@pytest.mark.sqlite_only
def test_connection_pragmas(db_path):
    db = Database(db_path)
    try:
        assert db.scalar("PRAGMA journal_mode") == "wal"
        assert db.scalar("PRAGMA foreign_keys") == 1
        assert db.scalar("PRAGMA busy_timeout") >= 1000
        assert db.scalar("PRAGMA user_version") == migrations.LATEST
        assert db.scalar("PRAGMA secure_delete") == 2  # FAST: deleted cells are zeroed
        assert db.vec_enabled is True
        assert db.vec_warning is None
    finally:
        db.close()


def test_foreign_keys_cascade_from_memories(memory):
    memory.ingest(turns("s1", ["Alice met Bob in Paris"]))
    mid = memory.db.scalar("SELECT id FROM memories")
    assert memory.db.scalar("SELECT count(*) FROM memory_entities WHERE memory_id = ?", (mid,))
    memory.db.execute("DELETE FROM memories WHERE id = ?", (mid,))
    assert memory.db.scalar("SELECT count(*) FROM memory_entities") == 0
    assert memory.db.scalar("SELECT count(*) FROM memory_vectors") == 0


# -- migrations -------------------------------------------------------------------------------


@pytest.mark.parametrize("readonly", [False, True])
def test_newer_database_is_refused(db_path, readonly):
    latest = _latest(db_path)
    _set_user_version(db_path, latest + 1)
    with pytest.raises(SchemaError, match="newer than this memcli"):
        open_database(db_path, readonly=readonly)


def test_newer_database_is_refused_by_the_cli(cli, db_path):
    _set_user_version(db_path, _latest(db_path) + 1)
    for args in (("query", "anything"), ("ingest", "--text", "hello"), ("stats",)):
        result = cli(*args)
        assert result.exit_code == 1, args
        assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("memcli: error: "), result.stderr
        assert "newer than this memcli" in lines[0] and "Traceback" not in result.stderr


@pytest.mark.sqlite_only
def test_not_a_database_is_a_one_line_error(cli, db_path):
    db_path.write_bytes(b"this is not sqlite at all" * 100)
    result = cli("stats")
    assert result.exit_code == 1
    assert result.stderr.startswith("memcli: error: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_fresh_schema_equals_one_upgraded_through_every_migration(tmp_path):
    fresh = tmp_path / "fresh.db"
    Database(fresh).close()

    upgraded = tmp_path / "upgraded.db"
    # A Database whose constructor did not run (so nothing migrated on open): each migration
    # function is applied by hand, one transaction per version, as migrate() does for old files.
    db = Database.__new__(Database)
    db.path = str(upgraded)
    db.conn = apsw.Connection(str(upgraded))
    db.vec_enabled = False
    for version, step in enumerate(migrations.MIGRATIONS, start=1):
        with db.transaction():
            step(db)
            db.conn.execute(f"PRAGMA user_version = {version}")
    db.conn.close()

    assert _schema(fresh) == _schema(upgraded)
    assert len(_schema(fresh)) > 10
    # Opening the upgraded file is a no-op for migrations and leaves it at LATEST.
    again = Database(upgraded)
    assert again.scalar("PRAGMA user_version") == migrations.LATEST
    again.close()
    assert _schema(fresh) == _schema(upgraded)


def _lexical_ranking(db, query, filters, scoped: bool):
    from memcli.store import search_sql as search
    from memcli.store.sqlite.fts import fts_match

    if scoped:
        return search.lexical(db, query, filters, 50)
    # The same BM25 over the whole index, with the scope applied only by the SQL filter.
    where, params = filters.sql()
    rows = db.execute(
        "SELECT m.id, -bm25(memories_fts, 1.0, 0.5, 0.0) AS s FROM memories_fts"
        " JOIN memories m ON m.id = memories_fts.rowid WHERE memories_fts MATCH ?"
        f" AND {where} ORDER BY s DESC, m.id LIMIT 50",
        ["{content context} : (" + fts_match(query) + ")", *params])
    return [(int(i), float(sc)) for i, sc in rows]


def _two_tenants(memory):
    texts = ["Anika visits Berlin in May", "the migration script failed again",
             "coffee with Anika about the migration", "Berlin trip booked, migration done",
             "nothing to do with it", "Anika said the script works now"]
    for tenant in ("t1", "t2"):
        for user in ("u1", "u2"):
            memory.ingest(turns(f"{tenant}-{user}-a", texts, user=user, tenant_id=tenant))
            memory.ingest(turns(f"{tenant}-{user}-b", texts[::-1], user=user, tenant_id=tenant))


@pytest.mark.sqlite_only
def test_scope_tokens_prefilter_without_changing_the_lexical_ranking(memory):
    _two_tenants(memory)
    from memcli.store.backend import LexicalQuery

    match = LexicalQuery(terms=("anika", "migration", "berlin"))
    for scope in ({"tenant_id": "t1"}, {"tenant_id": "t2", "user_id": "u1"},
                  {"tenant_id": "t1", "session_id": "t1-u2-b"},
                  {"user_id": "u2", "all_tenants": True}, {"all_tenants": True}):
        filters = memory.filters(**scope)
        scoped = _lexical_ranking(memory.db, match, filters, scoped=True)
        assert scoped, scope
        assert scoped == _lexical_ranking(memory.db, match, filters, scoped=False)
    # The prefilter really narrows the match: a user's token finds only that user's rows.
    from memcli.store.sqlite.fts import scope_terms

    token = scope_terms(None, "u1", None)
    ids = {r[0] for r in memory.db.execute(
        "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?", [f'scope : "{token}"'])}
    users = {r[0] for r in memory.db.execute(
        f"SELECT DISTINCT user_id FROM memories WHERE id IN ({','.join(map(str, ids))})")}
    assert users == {"u1"} and len(ids) == 2 * 2 * 6


@pytest.mark.sqlite_only
def test_v2_rebuilds_the_lexical_index_as_ingest_wrote_it(memory):
    from memcli.store.backend import LexicalQuery

    words = LexicalQuery(terms=("anika", "script"))
    _two_tenants(memory)
    db = memory.db
    before = list(db.execute("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?"
                             " ORDER BY rowid", ['context : "berlin"']))
    queries = {scope: _lexical_ranking(db, words, memory.filters(**dict(scope)),
                                       scoped=True)
               for scope in ((("tenant_id", "t1"),), (("tenant_id", "t2"), ("user_id", "u2")))}
    assert before and all(queries.values())
    with db.transaction():
        migrations.MIGRATIONS[1](db)  # drop and rebuild memories_fts from memories
    assert list(db.execute("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?"
                           " ORDER BY rowid", ['context : "berlin"'])) == before
    for scope, ranking in queries.items():
        assert _lexical_ranking(db, words, memory.filters(**dict(scope)),
                                scoped=True) == ranking


def test_migrate_reopens_without_changes(db_path):
    open_database(db_path).close()
    before = _shape(db_path)
    db = open_database(db_path)
    assert db.backend.migrate(db) == db.backend.schema_latest
    db.close()
    assert _shape(db_path) == before


# -- the append-only event log ----------------------------------------------------------------


def test_events_cannot_be_updated(memory):
    memory.ingest(turns("s1", ["hello there"]))
    with pytest.raises(Exception, match="append-only"):  # the engine's own error
        memory.db.execute("UPDATE events SET content = '{}'")
    assert json.loads(memory.db.scalar("SELECT content FROM events"))["text"] == "hello there"


def test_events_cannot_be_deleted_outside_purge(memory):
    memory.ingest(turns("s1", ["hello there"]))
    with pytest.raises(Exception, match="append-only"):
        memory.db.execute("DELETE FROM events")
    assert memory.db.scalar("SELECT count(*) FROM events") == 1
    # Purge may delete them, and leaves no guard behind that would let others do so later.
    memory.purge(session_id="s1")
    assert memory.db.scalar("SELECT count(*) FROM events") == 0
    assert memory.db.get_meta("purge_guard") is None
    if memory.db.backend.name == "sqlite":
        assert memory.db.scalar("PRAGMA secure_delete") == 2  # purge's full mode was put back
    memory.ingest(turns("s2", ["again"]))
    with pytest.raises(Exception, match="append-only"):
        memory.db.execute("DELETE FROM events")


# -- sqlite-vec missing -----------------------------------------------------------------------


@pytest.mark.sqlite_only
def test_missing_sqlite_vec_disables_vector_search_only(db_path, without_sqlite_vec):
    db = Database(db_path)
    assert db.vec_enabled is False
    assert "sqlite-vec" in db.vec_warning and "vector search is disabled" in db.vec_warning
    with Memory(db, embedder=HashEmbedder(64)) as m:
        report = m.ingest(turns("s1", ["the blue heron nests by the river"]))
        assert report.created == ["s1-0"]
        hits = m.query("heron").hits
        assert [h.text for h in hits] == ["the blue heron nests by the river"]
        assert "dense" not in hits[0].scores and "lexical" in hits[0].scores


@pytest.mark.sqlite_only
def test_missing_sqlite_vec_warns_once_on_stderr(cli, without_sqlite_vec):
    result = cli("ingest", "-", input=ndjson(turns("s1", ["the blue heron nests by the river"])))
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "sqlite-vec" in line]
    assert len(warnings) == 1 and warnings[0].startswith("memcli: warning: ")
    json.loads(result.stdout)  # the warning never reaches stdout

    result = cli("query", "heron")
    assert result.exit_code == 0
    assert len([ln for ln in result.stderr.splitlines() if "sqlite-vec" in ln]) == 1
    hits = json.loads(result.stdout)
    assert [h["event_id"] for h in hits] == ["s1-0"]


@pytest.mark.sqlite_only
def test_vectors_written_without_sqlite_vec_reach_the_vec_index_later(db_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a, **k: None if name == "sqlite_vec" else real(name, *a, **k),
    )
    with Memory.open(db_path, embedder=HashEmbedder(64)) as m:
        m.ingest(turns("s1", ["first turn", "second turn", "third turn"]))
    monkeypatch.setattr(importlib.util, "find_spec", real)
    with Memory.open(db_path, embedder=HashEmbedder(64)) as m:
        assert m.db.vec_enabled
        ids = sorted(r[0] for r in m.db.execute("SELECT memory_id FROM vec_memories"))
        assert ids == sorted(r[0] for r in m.db.execute("SELECT id FROM memories"))


@pytest.mark.sqlite_only
def test_purge_without_sqlite_vec_leaves_no_vec_rows_behind(db_path, monkeypatch):
    with Memory.open(db_path, embedder=HashEmbedder(64)) as m:
        m.ingest(turns("s1", ["first turn", "second turn"]) + turns("s2", ["other"]))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a, **k: None if name == "sqlite_vec" else real(name, *a, **k),
    )
    with Memory.open(db_path) as m:
        m.purge(session_id="s1")
    monkeypatch.setattr(importlib.util, "find_spec", real)
    with Memory.open(db_path) as m:
        assert m.db.vec_enabled
        ids = sorted(r[0] for r in m.db.execute("SELECT memory_id FROM vec_memories"))
        assert ids == sorted(r[0] for r in m.db.execute("SELECT id FROM memories"))
        assert len(ids) == 1


# -- embedder identity ------------------------------------------------------------------------


def test_embedder_is_recorded_and_a_mismatch_refused(db_path):
    with Memory.open(db_path, embedder=HashEmbedder(64)) as m:
        m.ingest(turns("s1", ["hello world"]))
        assert m.db.get_meta("embedder_model") == "test/hash-64"
        assert m.db.get_meta("embedder_dimension") == "64"
    with pytest.raises(EmbedderMismatchError) as info:
        Memory.open(db_path, embedder=HashEmbedder(32))
    assert "memcli reindex" in str(info.value)
    assert "test/hash-64" in str(info.value) and "test/hash-32" in str(info.value)


def test_embedder_mismatch_in_the_cli_and_reindex_fixes_it(cli, db_path, monkeypatch):
    assert (
        cli("ingest", "-", input=ndjson(turns("s1", ["alpha beta", "gamma delta"]))).exit_code == 0
    )
    monkeypatch.setenv("MEMCLI_EMBED_DIMENSION", "32")
    result = cli("query", "alpha")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("memcli: error: ") and "memcli reindex" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1

    result = cli("reindex")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"embedded": 2, "model": "test/hash-32"}

    result = cli("query", "alpha")
    assert result.exit_code == 0, result.stderr
    hits = json.loads(result.stdout)
    assert hits[0]["text"] == "alpha beta" and "dense" in hits[0]["scores"]
    with Memory.open(db_path, embedder=HashEmbedder(32)) as m:
        assert m.db.get_meta("embedder_dimension") == "32"
        for table in ("memory_vectors", *m.db.backend.vector_tables):
            assert m.db.scalar(f"SELECT count(*) FROM {table}") == 2, table
        assert {len(b) for (b,) in m.db.execute("SELECT embedding FROM memory_vectors")} == {32 * 4}


def _dense_db(memory):
    for tenant in ("t1", "t2"):
        for user in ("u1", "u2"):
            memory.ingest(turns(f"{tenant}{user}", [f"note {i} by {user} in {tenant}: topic {i % 7}"
                                                   for i in range(15)], user=user,
                                tenant_id=tenant))


@pytest.mark.sqlite_only
def test_dense_prefilter_respects_partitions_and_filters(memory, monkeypatch):
    from memcli.store import search_sql as search
    from memcli.store.sqlite import vec

    _dense_db(memory)
    target = "note 3 by u2 in t1: topic 3"
    blob = memory.embedder.embed_query(target).astype("float32").tobytes()
    exact = {}
    for scope in ({"tenant_id": "t1", "user_id": "u2"}, {"tenant_id": "t2"}):
        exact[str(scope)] = search.dense(memory.db, blob, memory.filters(**scope), 10)
    monkeypatch.setattr(vec, "EXACT_SCAN_MAX", 0)
    monkeypatch.setattr(vec, "PARTITION_EXACT_MAX", 0)
    for scope in ({"tenant_id": "t1", "user_id": "u2"}, {"tenant_id": "t2"}):
        hits = search.dense(memory.db, blob, memory.filters(**scope), 10)
        assert len(hits) == 10
        ids = ",".join(str(i) for i, _ in hits)
        rows = set(memory.db.execute(
            f"SELECT DISTINCT tenant_id, user_id FROM memories WHERE id IN ({ids})"))
        if "user_id" in scope:
            assert rows == {("t1", "u2")}
        else:
            assert {t for t, _ in rows} == {"t2"}
        # The shortlist is 2 x limit of a 15- or 30-row scope: the exact top hits survive it.
        assert hits[:3] == exact[str(scope)][:3]
    top = exact[str({"tenant_id": "t1", "user_id": "u2"})][0][0]
    assert memory.db.scalar("SELECT content FROM memories WHERE id = ?", (top,)) == target


@pytest.mark.sqlite_only
def test_an_old_layout_vec_index_is_rebuilt_with_partitions(db_path):
    with Memory.open(db_path, embedder=HashEmbedder(64)) as m:
        _dense_db(m)
        before = sorted(r[0] for r in m.db.execute("SELECT memory_id FROM vec_memories"))
        with m.db.transaction():
            m.db.execute("DROP TABLE vec_memories")
            m.db.execute("CREATE VIRTUAL TABLE vec_memories USING vec0("
                         "memory_id INTEGER PRIMARY KEY, embedding bit[64])")
    with Memory.open(db_path, embedder=HashEmbedder(64)) as m:
        assert "partition key" in m.db.scalar(
            "SELECT sql FROM sqlite_schema WHERE name = 'vec_memories'")
        assert sorted(r[0] for r in m.db.execute("SELECT memory_id FROM vec_memories")) == before
        keys = set(m.db.execute("SELECT DISTINCT user_key, tenant_key FROM vec_memories"))
        assert ("t1\x1fu2", "t1") in keys and len(keys) == 4


def test_configured_memory_gets_the_clis_models(db_path, monkeypatch):
    """Library users get the same legs as the CLI: the configured embedder and SPLADE."""
    from memcli.providers.splade import SpladeEncoder

    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    with Memory.configured(db_path) as m:  # this module's config file turns SPLADE off
        assert isinstance(m.embedder, HashEmbedder) and m.sparse is None
    monkeypatch.delenv("MEMCLI_CONFIG")
    with Memory.configured(db_path) as m:
        assert isinstance(m.embedder, HashEmbedder)
        assert isinstance(m.sparse, SpladeEncoder)
        assert m.db.path == str(db_path)
    with Memory.open(db_path) as m:  # explicit models only
        assert m.embedder is None and m.sparse is None


@pytest.mark.long  # fresh interpreters
def test_thread_defaults_set_only_what_can_still_take_effect():
    code = ("import os, sys{pre}; from memcli.config import thread_defaults; thread_defaults();"
            " print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('OPENBLAS_NUM_THREADS'))")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS")}

    def run(pre: str) -> str:
        return subprocess.run([sys.executable, "-c", code.format(pre=pre)], env=env,
                              capture_output=True, text=True, check=True).stdout.split()

    assert run("") == ["PASSIVE", "1"]
    assert run("; import numpy") == ["PASSIVE", "None"]  # OpenBLAS is loaded already
    env["OMP_WAIT_POLICY"] = "ACTIVE"
    assert run("")[0] == "ACTIVE"  # a user's setting wins
