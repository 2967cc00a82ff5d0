"""The SQLite memory extension design's `correct_fact` (`memcli correct`), `get_entity_info`
(`memcli entity`) with entity types, and the latest record timestamp in `memcli stats`. The real CLI
on a real SQLite file and a real PostgreSQL database (the backend matrix,
tests/support/backend.py)."""

from __future__ import annotations

import json

import pytest

from memcli.entities.types import mention_types, type_of_name
from tests.support.records import ndjson

pytestmark = pytest.mark.backends  # the tests with a database run on SQLite and PostgreSQL


def js(result):
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_correct_supersedes_the_fact_with_a_linked_replacement(cli):
    old = js(cli("remember", "Priya lives in Porto.", "--user", "priya", "--json"))["id"]
    fixed = js(cli("correct", str(old), "Priya lives in Lisbon.", "--reason", "she moved",
                   "--json"))
    new = fixed["id"]
    assert fixed["supersedes"] == old and new != old
    edges = js(cli("related", str(new), "--kind", "supersedes", "--json"))
    assert [(e["other_id"], e["direction"]) for e in edges] == [(old, "out")]
    trail = js(cli("history", str(old), "--json"))
    assert any(h["op"] == "UPDATE" and h["new_ref"] == str(new) for h in trail)
    hits = js(cli("query", "where does Priya live", "--user", "priya", "--json"))
    assert [h["id"] for h in hits if h["kind"] == "fact"] == [new]
    again = cli("correct", str(old), "Priya lives in Braga.")
    assert again.exit_code == 2 and "superseded" in again.stderr  # the old one is gone


def test_correct_refuses_turns_decisions_and_other_tenants(cli):
    assert cli("ingest", "-", input=ndjson([{"text": "hi", "session_id": "s1"}])).exit_code == 0
    turn = js(cli("query", "hi", "--json"))[0]["id"]
    refused = cli("correct", str(turn), "hello")
    assert refused.exit_code == 2 and "never rewritten" in refused.stderr
    decision = js(cli("decision", "add", "Use SQLite", "--json"))["memory_id"]
    assert "decision supersede" in cli("correct", str(decision), "Use Postgres").stderr
    fact = js(cli("remember", "Ana likes tea.", "--tenant", "acme", "--json"))["id"]
    other = cli("correct", str(fact), "Ana likes coffee.")  # default tenant: not found
    assert other.exit_code == 1 and "no memory with id" in other.stderr


def test_entity_profile_with_type_aliases_and_linked_memories(cli):
    records = [
        {"text": "My sister Ana moved to Lisbon last year.", "session_id": "s1",
         "user_id": "u1", "ts": "2025-01-02T10:00:00Z"},
        {"text": "Since Monday Ana works on the Phoenix project.", "session_id": "s1",
         "user_id": "u1", "ts": "2025-01-05T10:00:00Z"},
        {"text": "I met Ana Silva at Acme Corp.", "session_id": "s2", "user_id": "u1",
         "ts": "2025-02-01T10:00:00Z"},
        {"text": "Then Ana called from the other tenant.", "session_id": "t1", "tenant_id": "other",
         "ts": "2025-03-01T10:00:00Z"},
    ]
    assert cli("ingest", "-", input=ndjson(records)).exit_code == 0
    ana = js(cli("entity", "Ana", "--json"))
    assert ana["type"] == "person" and ana["tenant_id"] == "default"
    assert ana["mentions"] == 2 and ana["aliases"] == ["Ana"]
    assert ana["first_seen"].startswith("2025-01-02") and ana["last_seen"].startswith("2025-01-05")
    assert [m["text"] for m in ana["memories"]] == [
        "Since Monday Ana works on the Phoenix project.",
        "My sister Ana moved to Lisbon last year.",
    ]
    assert js(cli("entity", "lisbon", "--json"))["type"] == "place"
    assert js(cli("entity", "Phoenix", "--json"))["type"] == "project"
    assert js(cli("entity", "Acme Corp", "--json"))["type"] == "organisation"
    assert js(cli("entity", "Ana", "--tenant", "other", "--json"))["mentions"] == 1
    missing = cli("entity", "Nobody")
    assert missing.exit_code == 1 and "no entity 'Nobody'" in missing.stderr
    assert cli("entity", "Ana", "--format", "text").stdout.startswith("Ana (person; 2 mention(s)")


def test_types_only_where_the_words_tell():
    assert type_of_name("University of Porto") == "organisation"
    assert type_of_name("Lake Como") == "place"
    assert type_of_name("Project Phoenix") == "project"
    assert type_of_name("Melanie") is None
    assert mention_types("Melanie painted a sunset.", ["Melanie"]) == []
    assert mention_types("She works at Globex.", ["Globex"]) == ["organisation"]
    assert mention_types("Dr. Lee called.", ["Lee"]) == ["person"]


def test_stats_report_the_latest_record(cli):
    empty = js(cli("remember", "Ana likes tea.", "--json"))
    assert empty["status"] == "created"
    stats = js(cli("stats", "--json"))
    assert stats["latest_record_at"] is not None
    assert stats["latest_by_kind"]["fact"] == stats["latest_record_at"]


def test_stats_counts_come_in_one_order_on_every_engine(cli):
    """by_kind, by_state and latest_by_kind list their keys sorted (the JSON an agent diffs
    from run to run): PostgreSQL's hashed GROUP BY gave them in any order."""
    fact = js(cli("remember", "Ana likes tea.", "--json"))["id"]
    js(cli("correct", str(fact), "Ana likes green tea.", "--json"))
    js(cli("remember", "Ana lives in Porto.", "--json"))
    assert cli("ingest", "-", input=ndjson([{"text": f"turn {i}", "session_id": "s1"}
                                             for i in range(3)])).exit_code == 0
    assert cli("forget", str(fact + 2)).exit_code == 0
    assert cli("decision", "add", "Use PostgreSQL").exit_code == 0
    assert cli("rebuild").exit_code == 0  # rewritten rows: another physical order
    stats = js(cli("stats", "--json"))
    for key in ("by_kind", "by_state", "latest_by_kind"):
        assert list(stats[key]) == sorted(stats[key]), (key, stats[key])
    assert stats["by_state"] == {"active": 5, "soft_deleted": 1, "superseded": 1}
