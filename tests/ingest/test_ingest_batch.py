"""Ingest's statements per batch (PostgreSQL ingest cost): a batch's repeats are
looked up in one statement, a session's owner and a memory's entities once per batch, and on
PostgreSQL a memory's context is written by its INSERT. What ingest stores and reports stays
the same on both engines."""

from __future__ import annotations

import pytest

from memcli.operations.memory import Memory
from memcli.providers.embedders import HashEmbedder
from tests.support.backend import rows
from tests.support.records import turns

pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]


def _rec(event_id: str, text: str, session: str = "s1", user: str = "u1") -> dict:
    return {"event_id": event_id, "text": text, "session_id": session, "user_id": user}


def test_a_batch_repeating_itself_and_stored_events_stores_each_event_once(memory, db_path):
    memory.ingest([_rec("a", "alpha note"), _rec("b", "bravo note")])
    report = memory.ingest([
        _rec("a", "alpha, said again"),   # a stored event id
        _rec("c", "charlie note"),
        _rec("c", "charlie, said again"),  # an id earlier in the batch
        _rec("d", "bravo note"),          # a stored event's content (same scope: same hash)
        _rec("e", "charlie note"),        # content earlier in the batch
        _rec("f", "foxtrot note", session="s2"),
    ])
    assert report.created == ["c", "f"]
    assert report.skipped == ["a", "c", "b", "c"]  # the event each record repeats
    assert rows(db_path, "SELECT event_id FROM events ORDER BY seq") == [
        ("a",), ("b",), ("c",), ("f",)]
    assert rows(db_path, "SELECT content FROM memories ORDER BY id") == [
        ("alpha note",), ("bravo note",), ("charlie note",), ("foxtrot note",)]


def test_a_record_repeating_two_events_is_reported_as_the_one_with_its_id(memory):
    """Its event id names one stored event and its content another: the report names the
    event with its id, on both engines (PostgreSQL's one-row lookup returned whichever its
    bitmap scan met first: here the other, stored earlier)."""
    memory.ingest([_rec("b", "bravo note")])
    memory.ingest([_rec("a", "alpha note")])
    report = memory.ingest([_rec("a", "bravo note")])
    assert report.created == [] and report.skipped == ["a"]


def test_a_session_claimed_inside_a_batch_refuses_another_user_in_it(memory, db_path):
    """The owner a batch learns for a new session (cached for its later records) is enforced
    as the stored one would be: the other user's record is rejected, the rest land."""
    report = memory.ingest([_rec("a", "first turn"), _rec("b", "not my session", user="u2"),
                            _rec("c", "second turn")])
    assert report.created == ["a", "c"]
    assert [(p.event_id, "a session never mixes users" in p.reason)
            for p in report.rejected] == [("b", True)]
    assert rows(db_path, "SELECT user_id, event_count FROM sessions") == [("u1", 2)]
    # what a batch writes at its end (history, vectors) is the landed records' only
    assert rows(db_path, "SELECT event_id FROM history WHERE op = 'ADD' ORDER BY id") == [
        ("a",), ("c",)]
    assert rows(db_path, "SELECT m.event_id FROM memory_vectors v JOIN memories m"
                         " ON m.id = v.memory_id ORDER BY 1") == [("a",), ("c",)]


def test_session_spans_and_counts_add_up_over_batches(memory, db_path):
    at = "2025-01-01T10:{:02d}:00Z"
    memory.ingest([{**_rec("a", "second", session="s1"), "ts": at.format(5)},
                   {**_rec("b", "other", session="s2"), "ts": at.format(1)},
                   {**_rec("c", "first", session="s1"), "ts": at.format(2)},
                   {**_rec("d", "third", session="s1"), "ts": at.format(9)}])
    memory.ingest([{**_rec("e", "zeroth", session="s1"), "ts": at.format(0)}])
    assert rows(db_path, "SELECT session_id, user_id, started_at, last_event_at, event_count"
                         " FROM sessions ORDER BY session_id") == [
        ("s1", "u1", "2025-01-01T10:00:00.000000Z", "2025-01-01T10:09:00.000000Z", 4),
        ("s2", "u1", "2025-01-01T10:01:00.000000Z", "2025-01-01T10:01:00.000000Z", 1)]
    assert rows(db_path, "SELECT count(*) FROM history WHERE op = 'ADD'") == [(5,)]


def test_entities_shared_inside_a_batch_are_linked_once_each(memory, db_path):
    memory.ingest([_rec("a", "I met Alice and Bob in Paris"),
                   _rec("b", "Then Bob met Alice in Paris"),
                   _rec("c", "We saw Alice, then Alice again")])
    # created in the order they first appear: the same ids on both engines
    assert rows(db_path, "SELECT norm FROM entities WHERE norm IN ('alice', 'bob', 'paris')"
                         " ORDER BY id") == [("alice",), ("bob",), ("paris",)]
    links = rows(db_path, "SELECT m.event_id, e.norm FROM memory_entities l"
                          " JOIN memories m ON m.id = l.memory_id"
                          " JOIN entities e ON e.id = l.entity_id ORDER BY 1, 2")
    assert [r for r in links if r[1] in ("alice", "bob", "paris")] == [
        ("a", "alice"), ("a", "bob"), ("a", "paris"), ("b", "alice"), ("b", "bob"),
        ("b", "paris"), ("c", "alice")]
    assert sorted(rows(db_path, "SELECT a.alias, e.norm FROM entity_aliases a JOIN entities e"
                                " ON e.id = a.entity_id")) == [
        ("alice", "alice"), ("bob", "bob"), ("paris", "paris")]


def test_postgresql_writes_each_memory_row_once_with_its_context(pg_memcli_db):
    """The context is in the INSERT: no second version of a new row (the old UPDATE also ran
    the BM25 statistics triggers a second time), and the kept statistics equal a recount."""
    texts = ["I like green tea", "Alice met Bob in Paris", "The Paris trip is in May"]
    with Memory.open(pg_memcli_db, embedder=HashEmbedder(64)) as memory:
        db = memory.db
        with db.transaction():  # ingest's own transaction becomes a savepoint in it
            memory.ingest(turns("s1", texts))
            written = db.execute(
                "SELECT pg_stat_get_xact_tuples_inserted('memories'::regclass),"
                " pg_stat_get_xact_tuples_updated('memories'::regclass)").fetchone()
        assert tuple(written) == (3, 0)
        assert [r[0] for r in db.execute("SELECT context FROM memories ORDER BY id")] == [
            "", *texts[:2]]
        kept = db.execute("SELECT docs, tokens FROM lexical_stats").fetchone()
        counted = db.execute("SELECT count(*), sum(fts_tokens) FROM memories").fetchone()
        assert tuple(kept) == tuple(counted)
        assert dict(db.execute("SELECT lexeme, df FROM lexeme_df")) == dict(db.execute(
            "SELECT l, count(*) FROM memories m, unnest(tsvector_to_array(m.fts)) l"
            " GROUP BY l"))
        assert db.scalar("SELECT df FROM lexeme_df WHERE lexeme = 'alic'") == 2  # turn+context
