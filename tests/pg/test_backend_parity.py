"""One scenario on SQLite and on PostgreSQL, compared: the same memory ids, the same
query results in the same order (scores within a tolerance), the same bundle and the same
history. The backend matrix runs each suite on both engines; this test says they agree."""

from __future__ import annotations

import json

import pytest

from tests.support.records import ndjson, turns

pytestmark = pytest.mark.usefixtures("fast_cli")

QUERIES = [("alice", "green tea"), ("alice", "Lisbon budget"), ("bob", "Paris trip"),
           ("alice", "who joins the trip"), ("bob", "hiking in June"),
           # The date stage (s2 is two months later) and a speaker named by one word.
           ("alice", "what did Bob Stone plan on 1 March, 2025"), ("bob", "what did Bob plan")]


def _records() -> list[dict]:
    alice = turns("s1", ["I like green tea in the morning", "Alice met Bob in Paris",
                         "The Paris trip is in May", "Budget for Lisbon is 3000 EUR"],
                  user="alice")
    later = turns("s2", ["Bob prefers hiking plans on weekends", "@carol joins the trip"],
                  user="alice")
    for record in later:
        record["ts"] = record["ts"].replace("2025-01-01", "2025-03-01")
    alice += later
    bob = turns("s3", ["Bob is planning a Paris trip with Alice", "Hiking plans for June",
                       "Green tea or coffee?"], user="bob")
    bob[1]["actor"] = {"type": "human", "id": "Bob Stone"}
    return alice + bob


def _ok(result) -> object:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _ids_and_text(item: dict) -> tuple:
    """A bundle item as a user reads it: the memory ids it names and its text."""
    ids = sorted(v for k, v in item.items() if k.endswith("id") and isinstance(v, int))
    return ids, item.get("text") or item.get("content") or item.get("summary")


def _scenario(cli) -> dict:
    """Writes, lifecycle-free edits and reads; what a user sees of each."""
    out: dict = {"ingest": _ok(cli("ingest", "-", input=ndjson(_records())))["memory_ids"]}
    forgot = _ok(cli("forget", "3"))
    out["forget"] = {k: v for k, v in forgot.items() if k != "purge_at"}  # the clock's
    fact = _ok(cli("remember", "Alice prefers jasmine tea", "--user-id", "alice"))["id"]
    out["correct"] = _ok(cli("correct", str(fact), "Alice prefers green jasmine tea"))["id"]
    out["decision"] = _ok(cli("decision", "add", "Meet in Lisbon", "--user-id", "alice"))["id"]
    for user, text in QUERIES:
        hits = _ok(cli("query", text, "--user-id", user, "--top-k", "6"))
        out[f"q:{user}:{text}"] = [(h["id"], h["score"], h["relevance"]) for h in hits]
    bundle = _ok(cli("acb", "build", "--user-id", "alice", "--session-id", "s2", "-q", "Lisbon",
                     "--no-track"))
    out["acb"] = [(section["name"], [_ids_and_text(item) for item in section["items"]])
                  for section in bundle["sections"]] + [("no_relevant", bundle["no_relevant"])]
    history = _ok(cli("history", "--user-id", "alice", "--limit", "100"))
    # A command event's id is random (memcli.ledger.commands): the same on neither engine.
    out["history"] = [(h["memory_id"], h["op"], _command_or(h["event_id"]), h["old_ref"],
                       h["new_ref"]) for h in history]
    return out


def _command_or(event_id: str | None) -> str | None:
    return "cmd_" if event_id and event_id.startswith("cmd_") else event_id


def test_one_scenario_gives_the_same_answers_on_both_engines(cli, tmp_path, pg_memcli_db,
                                                             monkeypatch):
    monkeypatch.setenv("MEMCLI_DB", str(tmp_path / "memory.db"))
    on_sqlite = _scenario(cli)
    monkeypatch.setenv("MEMCLI_DB", pg_memcli_db)
    on_pg = _scenario(cli)
    assert on_pg.keys() == on_sqlite.keys()
    for key, expected in on_sqlite.items():
        if key.startswith("q:"):
            assert [i for i, _, _ in on_pg[key]] == [i for i, _, _ in expected], key
            for (_, got, relevance), (_, want, wanted) in zip(on_pg[key], expected, strict=True):
                assert got == pytest.approx(want, abs=0.02), key
                assert relevance == pytest.approx(wanted, abs=1e-3), key  # the same meaning
        else:
            assert on_pg[key] == expected, key
    assert any(on_sqlite[f"q:{u}:{t}"] for u, t in QUERIES)
