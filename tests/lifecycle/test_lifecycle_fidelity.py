"""Consolidation's bookkeeping: when a session is finished, the dates a supersession sets, and
the caps on what extraction writes (per turn, per user and day, pair checks per day).

Every model reply comes from the scripted HTTP stub through the real `openai` client.
"""

from __future__ import annotations

import json

import pytest

from memcli.lifecycle.consolidate import consolidate
from tests.support.cli import NO_SPARSE_CONFIG, use_stub_model
from tests.support.lifecycle import (
    conversation,
    extraction,
    memory_rows,
    model_for,
    one_a_day,
    settings,
    verdicts,
)
from tests.support.records import ndjson

# SQLite and PostgreSQL (tests/support/backend.py)
pytestmark = pytest.mark.backends


@pytest.fixture
def lcli(cli, monkeypatch, tmp_path, stub):
    """The real CLI with the stub as its model, sparse leg off (test speed)."""
    use_stub_model(monkeypatch, tmp_path, stub, NO_SPARSE_CONFIG)
    return cli


def untimed(session: str, texts: list[str]) -> list[dict]:
    """A session's records without `ts`: ingest stamps them with the time of the call."""
    return [{k: v for k, v in r.items() if k != "ts"} for r in conversation(session, texts)]


def test_sessions_ingested_in_one_call_become_pending_in_log_order(lcli, stub):
    """Three sessions of one user in one ingest call, no `ts`: all start at the call's time.
    The first two are finished (a later session started after each, in the log's order); the
    last one is still open."""
    records = untimed("x2", ["I love green tea."]) + untimed("x1", ["I work as a nurse."])
    records += untimed("x3", ["Hello again!"])
    assert lcli("ingest", "-", input=ndjson(records)).exit_code == 0
    stub.enqueue_json(extraction("Priya talked about tea."))
    stub.enqueue_json(extraction("Priya talked about her job."))
    out = lcli("consolidate", "--dry-run", "--json")
    assert out.exit_code == 0, out.stderr
    # Log order, not name order: x2 was ingested before x1.
    assert [s["session_id"] for s in json.loads(out.stdout)["sessions"]] == ["x2", "x1"]


NURSE = "Priya works as a nurse at Santa Maria hospital."
TEACHER = "Priya works as a teacher at a school in Porto."


def test_a_superseded_fact_ends_when_its_replacement_became_true(lcli, stub, db_path):
    """Back-filled history (ingest with `ts`): the old fact's `valid_to` is the new fact's
    `valid_from`, the time of the turn it came from, not the time consolidation ran."""
    records = one_a_day("I'm a nurse at Santa Maria.",
                        "I quit and now teach at a school in Porto.", "Hi")
    assert lcli("ingest", "-", input=ndjson(records)).exit_code == 0
    stub.enqueue_json(extraction("Priya talked about her job.", facts=[NURSE]))
    stub.enqueue_json(extraction("Priya changed jobs.", facts=[TEACHER]))
    stub.enqueue_json(verdicts("contradicts"))
    out = lcli("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    (old,) = memory_rows(db_path, "content = ?", (NURSE,))
    (new,) = memory_rows(db_path, "content = ?", (TEACHER,))
    assert old["state"] == "superseded"
    assert old["valid_from"].startswith("2025-01-01T10:00")
    assert new["valid_from"].startswith("2025-01-02T10:00")
    assert old["valid_to"] == new["valid_from"]


def test_link_history_rows_carry_the_scope_of_their_memory(memory):
    """A `related` edge's LINK row names the tenant, user and session of the new memory, so
    `history --user` lists it with the rest of the user's trail."""
    from memcli.derived.writer import write_memory

    def fact() -> int:
        return write_memory(memory, content="Priya likes green tea.", kind="fact",
                            source_ids=[], user_id="priya", session_id="s1", link=True)

    first, second = fact(), fact()
    links = [h for h in memory.history(user_id="priya") if h["op"] == "LINK"]
    assert [(h["memory_id"], h["new_ref"]) for h in links] == [(second, str(first))]
    assert (links[0]["tenant_id"], links[0]["session_id"]) == ("default", "s1")


def test_link_rows_written_without_a_scope_follow_their_memory(memory):
    """LINK rows written before links carried a scope have no tenant, user or session:
    `history --user` / `--session` still list them, by their memory's user and session, and
    another user's trail does not."""
    from memcli.derived.writer import write_memory

    def fact(user: str) -> int:
        return write_memory(memory, content="Priya likes green tea.", kind="fact",
                            source_ids=[], user_id=user, session_id="s1", link=True)

    first, second = fact("priya"), fact("priya")
    with memory.db.transaction():
        memory.db.execute("UPDATE history SET tenant_id = NULL, user_id = NULL,"
                          " session_id = NULL WHERE op = 'LINK'")
    for scope in ({"user_id": "priya"}, {"session_id": "s1"}):
        links = [h for h in memory.history(**scope) if h["op"] == "LINK"]
        assert [(h["memory_id"], h["new_ref"]) for h in links] == [(second, str(first))], scope
    assert [h for h in memory.history(user_id="sam") if h["op"] == "LINK"] == []


def test_at_most_three_writes_per_turn_the_most_important_kept(lcli, stub, db_path):
    records = conversation("s1", ["I'm a nurse, I love tea, I run, I paint and I swim."])
    records += conversation("s2", ["Bye"], day=2)
    assert lcli("ingest", "-", input=ndjson(records)).exit_code == 0
    texts = ["Priya works as a nurse.", "Priya loves green tea.", "Priya runs every morning.",
             "Priya paints watercolours.", "Priya swims on Sundays."]
    facts = [{"text": t, "turns": [1], "importance": w}
             for t, w in zip(texts, (0.9, 0.2, 0.8, 0.7, 0.1), strict=True)]
    stub.enqueue_json(extraction("Priya talked about herself.", facts=facts))
    out = lcli("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    (s1,) = json.loads(out.stdout)["sessions"]
    assert [a["text"] for a in s1["added"]] == [texts[0], texts[2], texts[3]]
    assert [c["text"] for c in s1["capped"]] == [texts[1], texts[4]]
    assert "more than 3 writes from one turn" in s1["capped"][0]["reason"]
    assert len(memory_rows(db_path, "kind = 'fact'")) == 3


def test_a_user_s_daily_write_cap_defers_their_next_sessions(cli, monkeypatch, tmp_path, stub,
                                                             db_path):
    use_stub_model(monkeypatch, tmp_path, stub,
                   NO_SPARSE_CONFIG + "lifecycle: {max_writes_per_user_day: 2}\n")
    records = conversation("s1", ["I'm a nurse.", "I love tea.", "I run."])
    records += conversation("s2", ["I paint."], day=2) + conversation("s3", ["Bye"], day=3)
    assert cli("ingest", "-", input=ndjson(records)).exit_code == 0
    stub.enqueue_json(extraction("Priya talked about herself.", facts=[
        {"text": "Priya works as a nurse.", "turns": [1], "importance": 0.9},
        {"text": "Priya loves green tea.", "turns": [2], "importance": 0.5},
        {"text": "Priya runs every morning.", "turns": [3], "importance": 0.7}]))
    out = cli("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    report = json.loads(out.stdout)
    (s1,) = report["sessions"]
    assert [a["text"] for a in s1["added"]] == ["Priya works as a nurse.",
                                                "Priya runs every morning."]
    assert s1["capped"][0]["reason"] == "the user's daily write cap is reached"
    # s2 waits, still pending, and the model was not asked about it.
    assert [d["session_id"] for d in report["deferred"]] == ["s2"]
    assert len(stub.chat_requests) == 1
    again = json.loads(cli("consolidate", "--json").stdout)  # the same day: still used up
    assert again["sessions"] == [] and [d["session_id"] for d in again["deferred"]] == ["s2"]


def test_pair_checks_are_capped_per_user_and_day_across_runs(memory, stub):
    """Three runs on one day with a cap of one pair check: the second run asks one of its two
    pairs, the third asks none (the cap was per run: it asked again)."""
    memory.ingest(conversation("s1", ["x"]) + conversation("s2", ["y"], day=2)
                  + conversation("s3", ["z"], day=3) + conversation("s4", ["w"], day=4))
    model = model_for(memory, stub)
    cfg = settings(max_pair_checks_per_user=1)
    stub.enqueue_json(extraction(facts=[NURSE, "Priya lives with her sister Anika."]))
    consolidate(memory, model, cfg, session_id="s1")
    stub.enqueue_json(extraction(facts=["Priya works at Santa Maria hospital as a doctor.",
                                        "Priya lives with her brother Ravi."]))
    stub.enqueue_json(verdicts("unrelated"))
    (s2,) = consolidate(memory, model, cfg, session_id="s2")["sessions"]
    assert (s2["pairs"]["asked"], s2["pairs"]["capped"]) == (1, 1)
    stub.enqueue_json(extraction(facts=["Priya works at Santa Maria hospital as a surgeon."]))
    (s3,) = consolidate(memory, model, cfg, session_id="s3")["sessions"]
    assert s3["pairs"]["asked"] == 0 and s3["pairs"]["capped"] >= 1
