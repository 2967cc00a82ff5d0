"""`memcli doctor`: a healthy file exits 0; each kind of problem is named with the command that
fixes it and exits 1; running that command makes the file healthy again."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import apsw
import pytest
import sqlite_vec

from memcli.core.records import utcnow
from tests.support.records import ndjson

pytestmark = pytest.mark.usefixtures("fast_cli")  # conftest: no SPLADE, one click command

RECORDS = [
    {"event_id": f"e{i}", "user_id": "priya", "session_id": "s1",
     "text": f"Turn {i}: Priya talks about the garden and the trip to Lisbon number {i}."}
    for i in range(6)
]


@pytest.fixture
def filled(cli, db_path):
    assert cli("ingest", "-", input=ndjson(RECORDS)).exit_code == 0
    assert cli("decision", "add", "Use SQLite", "--user", "priya").exit_code == 0
    assert cli("consolidate", "--no-llm", "--session", "s1").exit_code == 0
    assert cli("query", "garden", "--user", "priya").exit_code == 0
    return db_path


def sql(db_path: Path, statement: str, params: tuple = ()) -> None:
    conn = apsw.Connection(str(db_path))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    try:
        conn.execute(statement, params)
    finally:
        conn.close()


def doctor(cli, *flags: str) -> tuple[int, dict]:
    result = cli("doctor", "--json", *flags)
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, json.loads(result.stdout)


def problems(report: dict) -> dict[str, str | None]:
    return {c["check"]: c["fix"] for c in report["checks"] if c["status"] == "problem"}


def test_a_healthy_file_exits_0(cli, filled):
    code, report = doctor(cli)
    assert (code, report["healthy"], problems(report)) == (0, True, {})
    names = {c["check"] for c in report["checks"]}
    assert {"integrity", "schema", "embedder", "derived", "wal", "requests"} <= names
    assert doctor(cli, "--full")[0] == 0
    text = cli("doctor", "--format", "text").stdout
    assert "verdict: healthy" in text and "quick_check: ok" in text


def test_no_database_is_an_error_and_creates_nothing(cli, tmp_path):
    missing = tmp_path / "nowhere" / "memory.db"
    result = cli("doctor", "--db", str(missing))
    assert result.exit_code == 1  # as every read command (NoDatabaseError)
    assert "no memcli database at" in result.stderr
    assert not missing.parent.exists()


def test_a_missing_fulltext_row_is_found_and_fixed(cli, filled):
    sql(filled, "DELETE FROM memories_fts WHERE rowid = (SELECT min(id) FROM memories)")
    code, report = doctor(cli)
    assert code == 1 and problems(report) == {"missing:memories_fts": "memcli doctor --fix"}
    text = cli("doctor", "--format", "text").stdout
    assert "run: memcli doctor --fix" in text and "1 problem(s) found" in text
    code, report = doctor(cli, "--fix")
    assert code == 0 and report["fixed"]["rebuilt"] == ["memories_fts", "memories_trigram"]
    assert json.loads(cli("query", "garden", "--user", "priya").stdout)


def _vocab(db_path: Path) -> list[tuple]:
    """Every (term, column, row) the lexical indexes hold."""
    conn = apsw.Connection(str(db_path))
    try:
        rows = []
        for table in ("memories_fts", "memories_trigram"):
            conn.execute(f"CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, {table}, instance)")
            rows += [(table, *r) for r in conn.execute(
                "SELECT term, doc, col, offset FROM temp.v ORDER BY 1, 2, 3, 4")]
            conn.execute("DROP TABLE temp.v")
        return rows
    finally:
        conn.close()


def test_fix_rebuilds_the_lexical_indexes_ingest_wrote(cli, filled, monkeypatch):
    """--fix writes the rows ingest writes: a `high` turn's rows stay empty (its text is
    encrypted and never indexed) and it is not the next turn's context."""
    monkeypatch.setenv("MEMCLI_KEY", base64.b64encode(b"k" * 32).decode())
    late = [{"event_id": f"h{i}", "user_id": "priya", "session_id": "s9",
             "sensitivity": "high" if i == 1 else "none", "text": f"Harbour note {i} zebra{i}"}
            for i in range(3)]
    assert cli("ingest", "-", input=ndjson(late)).exit_code == 0
    written = _vocab(filled)
    assert not any("zebra1" in str(r[1]) for r in written)  # the high turn, nowhere
    sql(filled, "DELETE FROM memories_fts WHERE rowid = (SELECT min(id) FROM memories)")
    assert doctor(cli, "--fix")[0] == 0
    assert _vocab(filled) == written


def test_an_orphan_trigram_row_is_found(cli, filled):
    sql(filled, "INSERT INTO memories_trigram (rowid, content) VALUES (99999, 'stray text')")
    code, report = doctor(cli)
    assert code == 1 and problems(report) == {"orphans:memories_trigram": "memcli doctor --fix"}
    assert doctor(cli, "--fix")[0] == 0


def test_a_missing_vector_is_found_and_embed_fixes_it(cli, filled):
    sql(filled, "DELETE FROM memory_vectors WHERE memory_id = (SELECT min(id) FROM memories)")
    sql(filled, "DELETE FROM vec_memories WHERE memory_id = (SELECT min(id) FROM memories)")
    code, report = doctor(cli)
    assert code == 1 and problems(report) == {"missing:memory_vectors": "memcli embed"}
    assert cli("embed").exit_code == 0
    assert doctor(cli)[0] == 0


def test_another_embedder_in_meta_says_reindex(cli, filled):
    sql(filled, "UPDATE meta SET value = 'someone/else-model' WHERE key = 'embedder_model'")
    code, report = doctor(cli)
    assert code == 1 and problems(report) == {"embedder": "memcli reindex"}
    assert "someone/else-model" in report["checks"][2]["detail"]
    assert cli("reindex").exit_code == 0
    assert doctor(cli)[0] == 0


def test_a_memory_whose_event_is_gone(cli, filled):
    sql(filled, "INSERT INTO meta (key, value) VALUES ('purge_guard', '1')")
    sql(filled, "DELETE FROM events WHERE event_id = 'e0'")
    sql(filled, "DELETE FROM meta WHERE key = 'purge_guard'")
    code, report = doctor(cli)
    fixes = problems(report)
    assert code == 1 and list(fixes) == ["orphans:memories"]
    assert fixes["orphans:memories"].startswith("memcli purge --memory-id ")
    for command in fixes["orphans:memories"].split(" && "):
        assert cli(*command.split()[1:]).exit_code == 0
    assert doctor(cli)[0] == 0


def metrics(db_path: Path, n: int, **values) -> None:
    row = {"lexical_hits": 5, "retrieval_path": "user", "fallbacks": 0, "truncated": 0,
           "latency_ms": 40.0} | values
    for _ in range(n):
        sql(db_path, "INSERT INTO request_metrics (ts, command, lexical_hits, retrieval_path,"
                     " fallbacks, truncated, latency_ms) VALUES (?, 'query', ?, ?, ?, ?, ?)",
            (utcnow(), *row.values()))


@pytest.mark.parametrize(("values", "name"), [
    ({"truncated": 1}, "requests:truncation"),
    ({"fallbacks": 1}, "requests:fallback"),
    ({"lexical_hits": 1}, "requests:fulltext"),
    ({"latency_ms": 4500.0}, "requests:latency"),
])
def test_evolution_plan_triggers(cli, filled, values, name):
    metrics(filled, 25)  # under every trigger
    assert doctor(cli)[0] == 0
    metrics(filled, 40, **values)  # 40 of ~66 requests: over each threshold
    code, report = doctor(cli)
    assert code == 1 and list(problems(report)) == [name]
    assert "memcli" in problems(report)[name]


def test_a_sqlite_file_that_is_not_memcli(cli, tmp_path):
    other = tmp_path / "other.db"
    conn = apsw.Connection(str(other))
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    before = other.read_bytes()
    result = cli("doctor", "--json", "--db", str(other))
    assert result.exit_code == 1
    assert problems(json.loads(result.stdout)) == {
        "schema": "give the path of a memcli database with --db"}
    assert other.read_bytes() == before


def test_a_dropped_table_is_named_as_damage_with_the_fix(cli, filled):
    """A query on a file whose full-text table was dropped says the database is damaged and
    names doctor and rebuild (it said "unexpected error ... a bug in memcli")."""
    sql(filled, "DROP TABLE memories_fts")
    for args in (("query", "garden", "--user-id", "priya"),
                 ("acb", "build", "--user-id", "priya", "--query", "garden")):
        result = cli(*args)
        assert result.exit_code == 1, result.stderr
        assert result.stderr.startswith("memcli: error: database is damaged: "), result.stderr
        assert "no such table: memories_fts" in result.stderr
        assert "memcli rebuild" in result.stderr and "unexpected" not in result.stderr
        assert result.stderr.count("\n") == 1


@pytest.mark.backends
def test_integrity_names_the_engines_own_check(cli, db_path):
    assert cli("remember", "The office is in Lisbon").exit_code == 0
    result = cli("doctor", "--format", "json")
    assert result.exit_code == 0, result.stderr
    integrity = next(c for c in json.loads(result.stdout)["checks"]
                     if c["check"] == "integrity")
    expected = "server page checks" if str(db_path).startswith("postgresql://") else "quick_check"
    assert integrity["status"] == "ok" and integrity["detail"].startswith(expected)


def test_orphan_postings_are_counted_once_per_memory_and_fixed(cli, filled):
    """SQLite's SPLADE postings of a memory that is gone: one orphan per memory, however many
    terms it had (the check deduplicates before it probes), and --fix deletes them all."""
    sql(filled, "INSERT INTO sparse_postings (term_id, memory_id, weight) VALUES"
                " (7, 99999, 3), (8, 99999, 1), (9, 99999, 2), (7, 99998, 5)")
    code, report = doctor(cli)
    assert code == 1 and problems(report) == {"orphans:sparse_postings": "memcli doctor --fix"}
    found = next(c for c in report["checks"] if c["check"] == "orphans:sparse_postings")
    assert found["detail"].startswith("2 ") and sorted(found["ids"]) == [99998, 99999], found
    assert doctor(cli, "--fix")[0] == 0
