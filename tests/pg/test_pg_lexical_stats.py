"""BM25's kept corpus statistics on PostgreSQL (schema.sql: lexeme_df, lexical_stats,
memories.fts_tokens): after every kind of write the real CLI makes (ingest, which
inserts rows and then sets their context; forget; correct; purge; rebuild) and an edit of a
row's text and sensitivity, they equal what counting the rows gives, and so do the lexical
leg's scores: the same as on the same rows with freshly counted statistics."""

from __future__ import annotations

import json

import pytest

from tests.support.records import ndjson, turns

pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not installed")

from memcli.retrieval.text import lexical_query  # noqa: E402
from memcli.store.filters import Filters  # noqa: E402
from memcli.store.postgres import connect, legs  # noqa: E402

pytestmark = pytest.mark.usefixtures("fast_cli")

QUERIES = ["green tea in the morning", "Paris trip plans", "budget for Lisbon",
           "quokka sightings", "hiking on weekends"]


@pytest.fixture
def db_path(pg_memcli_db):
    """The CLI's database (conftest's `cli` reads it): a fresh memcli database on PostgreSQL."""
    return pg_memcli_db


def _records() -> list[dict]:
    alice = turns("s1", ["I like green tea in the morning", "Alice met Bob in Paris",
                         "The Paris trip is in May", "Budget for Lisbon is 3000 EUR",
                         "We saw a quokka, then another quokka, on the quokka island trail"],
                  user="alice")
    bob = turns("s2", ["Bob is planning a Paris trip with Alice", "Hiking plans for June",
                       "Green tea or coffee?", "quokka photos from the weekend"], user="bob")
    carol = turns("s3", ["Carol goes hiking on weekends", "Carol drinks green tea"],
                  user="carol")
    return alice + bob + carol


def _kept(db) -> tuple[dict, tuple]:
    return (dict(db.execute("SELECT lexeme, df FROM lexeme_df")),
            tuple(db.execute("SELECT docs, tokens FROM lexical_stats").fetchone() or (0, 0)))


def _counted(db) -> tuple[dict, tuple]:
    """The same statistics counted from the rows, independently of the kept column: df per
    lexeme of `fts`, the row count and the positions of every lexeme."""
    df = dict(db.execute("SELECT l, count(*) FROM memories m,"
                         " unnest(tsvector_to_array(m.fts)) l GROUP BY l"))
    docs, tokens = db.execute(
        "SELECT count(*), coalesce(sum((SELECT coalesce(sum(coalesce(array_length("
        "u.positions, 1), 1)), 0) FROM unnest(m.fts) u)), 0) FROM memories m").fetchone()
    return df, (docs, tokens)


def _scores(db) -> list:
    return [legs.lexical(db, list(lexical_query(q).terms), Filters(tenant_id="default"), 20)
            for q in QUERIES]


def _check(url: str, step: str) -> None:
    db = connect(url)
    try:
        assert _kept(db) == _counted(db), step
        assert db.scalar("SELECT count(*) FROM memories WHERE fts_tokens <>"
                         " (SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)"
                         " FROM unnest(fts) u)") == 0, step
        before = _scores(db)
        with db.transaction():
            legs.recount_lexical(db)
        after = _scores(db)
        assert [[i for i, _ in hits] for hits in before] == [[i for i, _ in hits]
                                                             for hits in after], step
        for old, new in zip(before, after, strict=True):
            assert [s for _, s in old] == pytest.approx([s for _, s in new], rel=1e-9), step
    finally:
        db.close()


def _ok(result) -> dict:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_kept_statistics_equal_counted_ones_after_every_write(cli, db_path):
    ids = _ok(cli("ingest", "-", input=ndjson(_records())))["memory_ids"]
    _check(db_path, "ingest")
    assert any(_scores_nonempty(db_path))

    _ok(cli("forget", str(ids[1])))
    _check(db_path, "forget")

    fact = _ok(cli("remember", "Alice prefers jasmine tea over quokka tea", "--user-id", "alice"))
    _ok(cli("correct", str(fact["id"]), "Alice prefers green jasmine tea"))
    _check(db_path, "correct")

    db = connect(db_path)
    try:
        with db.transaction():  # a redaction's kind of edit: new text, then a sealed row
            db.execute("UPDATE memories SET content = 'quokka quokka budget' WHERE id = ?",
                       (ids[0],))
            db.execute("UPDATE memories SET sensitivity = 'high' WHERE id = ?", (ids[2],))
    finally:
        db.close()
    _check(db_path, "text and sensitivity edits")

    db = connect(db_path)
    try:
        assert db.scalar("SELECT df FROM lexeme_df WHERE lexeme = 'photo'") == 1
    finally:
        db.close()
    _ok(cli("purge", "--user-id", "bob", "--tenant-id", "default"))
    _check(db_path, "purge")
    db = connect(db_path)
    try:  # bob's own word is gone from the df table too, not left at df 0
        assert db.scalar("SELECT count(*) FROM lexeme_df WHERE lexeme = 'photo'") == 0
    finally:
        db.close()

    _ok(cli("rebuild"))
    _check(db_path, "rebuild")


def _scores_nonempty(url: str) -> list[bool]:
    db = connect(url)
    try:
        return [bool(hits) for hits in _scores(db)]
    finally:
        db.close()
