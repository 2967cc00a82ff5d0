"""A model's bad item costs that item only: each extracted item is checked on its own against
the memory system spec's writing rules, a failing one is dropped with its reason, the rest of
the session is written and the session is done. The model is the scripted HTTP stub, spoken to
by the real `openai` client through the real CLI."""

from __future__ import annotations

import json

import pytest

from memcli.derived.textrules import check_summary_text
from tests.support.cli import NO_SPARSE_CONFIG, use_stub_model
from tests.support.lifecycle import conversation, extraction, memory_rows
from tests.support.records import ndjson

BERLIN = "The user lives in Berlin."


@pytest.fixture
def lcli(cli, monkeypatch, tmp_path, stub):
    use_stub_model(monkeypatch, tmp_path, stub, NO_SPARSE_CONFIG)
    return cli


def two_sessions(lcli) -> None:
    records = conversation("s1", ["I live in Berlin.", "I think I like it here."]) + conversation(
        "s2", ["Hello again!"], day=2
    )
    assert lcli("ingest", "-", input=ndjson(records)).exit_code == 0


@pytest.mark.backends
def test_a_first_person_item_is_dropped_and_the_rest_written(lcli, stub, db_path):
    two_sessions(lcli)
    stub.enqueue_json(
        extraction("Priya said she lives in Berlin.", facts=[BERLIN, "I like Berlin."])
    )
    out = lcli("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    (s1,) = json.loads(out.stdout)["sessions"]
    assert [a["text"] for a in s1["added"]] == [BERLIN]
    assert s1["dropped"] == [
        {
            "item": "facts[1]",
            "text": "I like Berlin.",
            "reason": "not third person ('I'): name the person instead of I/you/we",
        }
    ]
    assert "memcli: warning: s1: dropped facts[1]: not third person" in out.stderr
    assert [r["content"] for r in memory_rows(db_path, "kind = 'fact'")] == [BERLIN]
    # The session is done: nothing pending, the model is not asked again.
    again = lcli("consolidate", "--json")
    assert json.loads(again.stdout)["sessions"] == [] and len(stub.chat_requests) == 1


def test_a_summary_not_in_the_past_tense_gives_way_to_the_turns(lcli, stub, db_path):
    two_sessions(lcli)
    stub.enqueue_json(extraction("Priya lives in Berlin and likes it.", facts=[BERLIN]))
    out = lcli("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    (s1,) = json.loads(out.stdout)["sessions"]
    assert [d["item"] for d in s1["dropped"]] == ["summary"]
    assert "past tense" in s1["dropped"][0]["reason"]
    (summary,) = memory_rows(db_path, "kind = 'summary'")
    assert summary["content"].startswith("Session s1 (")  # the extractive one
    assert summary["attributes"]["structured"]["summary_method"] == "extractive"
    assert [r["content"] for r in memory_rows(db_path, "kind = 'fact'")] == [BERLIN]


def test_items_over_a_list_s_length_and_bad_entities_are_dropped_one_by_one(lcli, stub):
    two_sessions(lcli)
    facts = [f"Priya owns plant number {i}." for i in range(41)]
    reply = extraction(
        "Priya talked about her plants.", facts=facts, entities=["x" * 101, "Berlin"]
    )
    stub.enqueue_json(reply)
    out = lcli("consolidate", "--dry-run", "--json")
    assert out.exit_code == 0, out.stderr
    (plan,) = json.loads(out.stdout)["sessions"]
    reasons = {d["item"]: d["reason"] for d in plan["dropped"]}
    assert reasons["facts[40]"] == "more than 40 facts"
    assert "100 characters" in reasons["entities[0]"]
    assert plan["summary"]["structured"]["entities"] == ["Berlin"]


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("Priya talked about her job.", True),
        ("Priya and Sam planned the trip to Goa; the flight leaves in May.", True),
        ("The team decided to use Postgres. It is cheaper.", True),
        ("Priya went to Lisbon.", True),
        ("Priya talks about her job.", False),
        ("Priya is interested in tea.", False),  # a participle after "is": present
        ("Priya has moved to Porto.", False),  # present perfect
        ("Priya is a nurse.", False),
    ],
)
def test_a_session_summary_is_in_the_past_tense(text, ok):
    if ok:
        assert check_summary_text(text) == text
    else:
        with pytest.raises(ValueError, match="past tense"):
            check_summary_text(text)
