"""bench/pg_scale_bulk.py writes the rows memcli's ingest writes (the 1M benchmark).

The bulk path copies an ingest-written base at the SQL level. Here its copy 1 is compared with
what `Memory.ingest` writes for the very same events in a fresh database: the same events
(content, content hash), memories (every column that does not depend on ids or the clock),
entities, history, session and change-log rows, a vector and lexical rows. On both engines.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import pg_scale_bulk as bulk
from bench import pg_scale_check as check
from bench import pg_scale_support as sup
from memcli.operations.memory import Memory
from memcli.providers.embedders import HashEmbedder
from memcli.store.location import open_database
from tests.support.backend import is_pg
from tests.support.pg_db import scratch_database, with_database

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = [pytest.mark.backends, pytest.mark.long]  # bench/pg_scale_bulk.py's checks

MEMORY_COLUMNS = ("kind", "category", "content", "tenant_id", "user_id", "agent_id",
                  "session_id", "app_id", "run_id", "channel", "sensitivity", "actor_type",
                  "actor_id", "event_id", "chunk_index", "token_count", "importance", "pinned",
                  "confidence", "decay_rate", "access_count", "event_time", "valid_from",
                  "valid_to", "state", "source_ids", "attributes")


@pytest.fixture
def fresh(request: pytest.FixtureRequest, db_path, tmp_path: Path) -> Iterator[object]:
    """A second empty database of the same engine as db_path."""
    if not is_pg(db_path):
        yield tmp_path / "ingested.db"
        return
    server = request.getfixturevalue("pg_server")
    template = request.getfixturevalue("pg_memcli_template")
    with scratch_database(server, template) as name:
        yield with_database(server, name)


def ingest(location, events: list[dict]) -> None:
    with Memory.open(location, embedder=HashEmbedder(64)) as memory:
        for start in range(0, len(events), 50):
            report = memory.ingest(events[start:start + 50])
            assert not report.rejected


def as_events(rows: list[dict]) -> list[dict]:
    """The stored events as ingest records again (ids, times and scope as stored)."""
    return [{"event_id": r["event_id"], "ts": r["ts"], "tenant_id": r["tenant_id"],
             "user_id": r["user_id"], "session_id": r["session_id"], "kind": r["kind"],
             "actor": {"type": r["actor_type"], "id": r["actor_id"]},
             "content": json.loads(r["content"])} for r in rows]


def snapshot(location, event_ids: list[str]) -> dict[str, dict]:
    """Per event id: the event's hash and content, its memory's columns, entities, history,
    change-log summary, vector count, the session row, the lexical row's context (the previous
    turn) and whether the lexical leg finds the memory by its own text."""
    from memcli.retrieval.text import lexical_query
    from memcli.store.filters import Filters
    from memcli.store.sqlite.fts import fts_match

    db = open_database(location)
    out = {}
    previous: dict[str, str] = {}
    for event_id in event_ids:  # in session order
        ev = db.query("SELECT * FROM events WHERE event_id = ?", (event_id,))[0]
        m = db.query("SELECT * FROM memories WHERE event_id = ?", (event_id,))[0]
        session = db.query("SELECT user_id, started_at, last_event_at, event_count"
                           " FROM sessions WHERE session_id = ?", (m["session_id"],))[0]
        found = [i for i, _ in db.backend.lexical(
            db, lexical_query(m["content"]), Filters(tenant_id=m["tenant_id"],
                                                     user_id=m["user_id"]), 200, 0.5)]
        prev = previous.get(m["session_id"])
        previous[m["session_id"]] = m["content"]
        if is_pg(location):
            context = m["context"]
        elif prev is None:
            context = None
        else:  # the contentless FTS5 row's context column holds the previous turn's terms
            match = f"{{context}} : ({fts_match(lexical_query(prev))})"
            context = db.scalar("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?"
                                " AND rowid = ?", (match, m["id"]))
        out[event_id] = {
            "event": (ev["content_hash"], ev["content"], ev["ts"], ev["user_id"]),
            "memory": {c: m[c] for c in MEMORY_COLUMNS},
            "context": context,
            "found_by_its_text": m["id"] in found,
            "entities": sorted(tuple(r.values()) for r in db.query(
                "SELECT e.tenant_id, e.kind, e.norm, e.display FROM memory_entities x"
                " JOIN entities e ON e.id = x.entity_id WHERE x.memory_id = ?", (m["id"],))),
            "history": [(h["op"], h["event_id"], h["new_ref"] == str(m["id"]),
                         h["tenant_id"], h["user_id"], h["session_id"]) for h in db.query(
                "SELECT * FROM history WHERE memory_id = ?", (m["id"],))],
            "change_log": [(c["op"], c["summary"], c["thread_key"]) for c in db.query(
                "SELECT * FROM change_log WHERE memory_id = ?", (m["id"],))],
            "vectors": db.scalar("SELECT count(*) FROM memory_vectors WHERE memory_id = ?",
                                 (m["id"],)),
            "session": session,
        }
    db.close()
    return out


def test_bulk_copy_writes_what_ingest_writes(db_path, fresh) -> None:
    base = sup.corpus(120)
    ingest(db_path, base)
    report = bulk.replicate(str(db_path), 3 * len(base))
    assert report["copies"] == 3 and report["memories"] == 3 * len(base)

    db = open_database(db_path)
    copied = db.query("SELECT * FROM events WHERE session_id LIKE 'c1%' ORDER BY seq")
    db.close()
    assert len(copied) == len(base)
    # copy 1 is the base moved: other users (same tenants), sessions, ids, times, nouns
    assert {e["tenant_id"] for e in copied} == {e["tenant_id"] for e in base}
    assert not {e["user_id"] for e in copied} & {e["user_id"] for e in base}
    assert [json.loads(e["content"])["text"] for e in copied] != [e["content"]["text"]
                                                                 for e in base]
    ingest(fresh, as_events(copied))

    ids = [e["event_id"] for e in copied]
    bulk_rows, ingested = snapshot(db_path, ids), snapshot(fresh, ids)
    diffs = [(e, key, bulk_rows[e][key], ingested[e][key]) for e in ids
             for key in ingested[e] if bulk_rows[e][key] != ingested[e][key]]
    assert diffs == []


def test_bulk_check_finds_nothing_wrong(db_path, tmp_path: Path) -> None:
    ingest(db_path, sup.corpus(80))
    env = {"HOME": str(tmp_path), "MEMCLI_EMBEDDER": "hash", "PATH": "/usr/bin:/bin",
           "MEMCLI_AUTOSTART": "0"}
    before = check.doctor(str(db_path), env)
    report = bulk.replicate(str(db_path), 160)
    result = check.verify(str(db_path), report["base_memories"], report["copies"], env, before,
                         samples=5)
    assert result["problems"] == []
    assert result["counts"]["memories"] == 160 and result["query_found"] == {"copies": 5,
                                                                        "originals": 5}
