"""Consent: changes to preferred name, pronouns, city and language wait for a person's answer."""

from __future__ import annotations

import json

import pytest

from memcli.lifecycle.consolidate import consolidate
from memcli.lifecycle.profile_fields import field_value
from memcli.lifecycle.proposals import accept, list_proposals, reject
from tests.support.lifecycle import (
    accept_city,
    conversation,
    extraction,
    memory_rows,
    model_for,
    one_a_day,
    propose_city,
    propose_field,
    rows,
    settings,
    verdicts,
)
from tests.support.records import ndjson

# SQLite and PostgreSQL (tests/support/backend.py)
pytestmark = pytest.mark.backends

LISBON = {"field": "city", "value": "Lisbon", "text": "Priya lives in Lisbon.", "turns": [1]}


@pytest.fixture
def pcli(cli, monkeypatch, tmp_path, stub):
    config = tmp_path / "config.yaml"
    config.write_text(
        "retrieval: {leg_weights: {lexical: 1, sparse: 0, dense: 1}}\n", encoding="utf-8"
    )
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    monkeypatch.setenv("MEMCLI_LLM_BASE_URL", stub.base_url)
    return cli


def test_a_sensitive_change_waits_for_consent(pcli, stub, db_path):
    records = one_a_day("I live in Lisbon now.", "I just moved to Porto!", "hi")
    pcli("ingest", "-", input=ndjson(records))
    stub.enqueue_json(extraction(profile=[LISBON]))
    stub.enqueue_json(
        extraction(profile=[{**LISBON, "value": "Porto", "text": "Priya lives in Porto."}])
    )
    out = pcli("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    # Nothing applied yet: no profile fact, two pending proposals.
    assert memory_rows(db_path, "kind = 'fact'") == []
    pending = json.loads(pcli("proposals", "list", "--json").stdout)
    assert [(p["field"], p["value"], p["status"]) for p in pending] == [
        ("city", "Porto", "pending"),
        ("city", "Lisbon", "pending"),
    ]
    lisbon, porto = pending[1]["id"], pending[0]["id"]

    accepted = json.loads(pcli("proposals", "accept", str(lisbon), "--json").stdout)
    (city,) = memory_rows(db_path, "kind = 'fact'")
    assert accepted["memory_id"] == city["id"] and city["category"] == "profile"
    assert city["attributes"]["profile_field"] == "city" and city["decay_rate"] == 0
    out = pcli("proposals", "accept", str(porto), "--json")
    assert out.exit_code == 0
    assert json.loads(out.stdout)["superseded"] == city["id"]
    old, new = memory_rows(db_path, "kind = 'fact'")
    assert (old["state"], new["state"], new["content"]) == (
        "superseded",
        "active",
        "Priya lives in Porto.",
    )
    decisions = [
        h["meta"].get("decision")
        for h in json.loads(pcli("history", "--user", "priya", "--json").stdout)
    ]
    assert decisions.count("accepted") == 2
    again = pcli("proposals", "accept", str(porto))
    assert again.exit_code == 2 and "is accepted, not pending" in again.stderr


def test_a_contradicting_fact_about_a_sensitive_field_becomes_a_proposal(
    memory,
    stub,
    db_path,
):
    memory.ingest(conversation("s1", ["x"]) + conversation("s2", ["y"], day=2))
    accept_city(memory, "Lisbon")
    stub.enqueue_json(extraction(facts=["Priya lives in Porto."]))
    stub.enqueue_json(verdicts("contradicts"))
    report = consolidate(memory, model_for(memory, stub), settings())
    (s1,) = report["sessions"]
    assert s1["superseded"] == [] and s1["added"] == []
    assert s1["proposals"][0]["status"] == "pending"
    (city,) = memory_rows(db_path, "kind = 'fact'")
    assert city["content"] == "Priya lives in Lisbon." and city["state"] == "active"


def test_a_profile_fact_a_model_filed_is_not_replaced_without_consent(memory, stub, db_path):
    """"Priya lives in Lisbon." filed under `profile` by a model (no proposal wrote it) holds
    the city as much as an accepted proposal's fact: a later contradicting fact becomes a
    proposal of the new value, and the Lisbon fact stays active until a person accepts."""
    memory.ingest(one_a_day("I live in Lisbon.", "I moved to Porto.", "hi"))
    stub.enqueue_json(extraction(facts=[
        {"text": "Priya lives in Lisbon.", "turns": [1], "category": "profile"}]))
    stub.enqueue_json(extraction(facts=["Priya lives in Porto."]))
    stub.enqueue_json(verdicts("contradicts"))
    report = consolidate(memory, model_for(memory, stub), settings())
    s1, s2 = report["sessions"]
    assert s2["superseded"] == [] and s2["added"] == []
    (lisbon,) = memory_rows(db_path, "kind = 'fact'")
    assert [a["id"] for a in s1["added"]] == [lisbon["id"]]
    assert [(p["status"], p["field"], p["value"]) for p in s2["proposals"]] == [
        ("pending", "city", "Porto")]
    assert (lisbon["content"], lisbon["state"]) == ("Priya lives in Lisbon.", "active")


def test_reject_changes_nothing_and_is_recorded(pcli, db_path):
    out = pcli("remember", "city: Porto", "--user", "priya", "--field", "city", "--json")
    assert out.exit_code == 0, out.stderr
    queued = json.loads(out.stdout)
    assert queued["status"] == "pending" and queued["value"] == "Porto"
    again = json.loads(
        pcli("remember", "city: porto", "--user", "priya", "--field", "city", "--json").stdout
    )
    assert again == {
        "status": "already_pending",
        "proposal_id": queued["proposal_id"],
        "field": "city",
        "redacted": [],
    }
    out = pcli("proposals", "reject", str(queued["proposal_id"]), "--reason", "wrong", "--json")
    assert json.loads(out.stdout) == {"id": queued["proposal_id"], "status": "rejected"}
    assert memory_rows(db_path) == []
    (row,) = json.loads(pcli("proposals", "list", "--status", "all", "--json").stdout)
    assert (row["status"], row["reason"], row["decided_by"]) == ("rejected", "wrong", "cli")
    history = json.loads(pcli("history", "--user", "priya", "--json").stdout)
    assert history[0]["meta"]["decision"] == "rejected"
    bad = pcli("remember", "Priya is 34", "--user", "priya", "--field", "age")
    assert bad.exit_code == 2 and "--field must be one of" in bad.stderr


def test_pending_proposals_expire_after_seven_days(memory, db_path):
    old = propose_field(memory, "language", "Portuguese", "Priya speaks Portuguese.",
                        now="2020-01-01T00:00:00.000000Z")
    fresh = propose_field(memory, "pronouns", "she/her", "Priya uses she/her pronouns.")
    assert old["expires_at"] == "2020-01-08T00:00:00.000000Z"
    assert [p["id"] for p in list_proposals(memory.db)] == [fresh["proposal_id"]]
    (expired,) = list_proposals(memory.db, status="expired")
    assert expired["id"] == old["proposal_id"]
    with pytest.raises(Exception, match="is expired, not pending"):
        accept(memory, old["proposal_id"])
    with pytest.raises(Exception, match="is expired"):
        reject(memory.db, old["proposal_id"], owner=memory.owner())


def test_an_unchanged_value_is_not_proposed(memory, db_path):
    accept_city(memory, "Lisbon")
    same = propose_city(memory, " lisbon ", "Priya lives in Lisbon.")
    assert same["status"] == "unchanged"
    assert rows(db_path, "SELECT count(*) FROM proposals") == [(1,)]


def test_a_pending_value_matches_in_any_case_on_both_engines(memory):
    """'ZÜRICH' is the pending 'Zürich' again: SQLite's lower() folds ASCII letters only,
    so it queued a second proposal there and not on PostgreSQL."""
    first = propose_city(memory, "Zürich")
    assert propose_city(memory, "ZÜRICH") == {
        "status": "already_pending", "proposal_id": first["proposal_id"], "field": "city"}
    assert propose_city(memory, "Bern")["status"] == "pending"


def test_accepting_supersedes_the_profile_fact_the_field_had(pcli, stub, db_path):
    """A model filed "Priya lives in Lisbon." as a plain `profile` fact; a consent proposal
    for the city from `remember` stores the value ("Madrid"), and accepting it supersedes the
    Lisbon fact (valid_to, a `supersedes` edge, history), so the profile shows one city."""
    records = conversation("s1", ["I live in Lisbon."]) + conversation("s2", ["hi"], day=2)
    pcli("ingest", "-", input=ndjson(records))
    stub.enqueue_json(extraction(facts=[
        {"text": "Priya lives in Lisbon.", "turns": [1], "category": "profile"}]))
    assert pcli("consolidate", "--json").exit_code == 0
    (lisbon,) = memory_rows(db_path, "kind = 'fact'")
    assert lisbon["category"] == "profile"
    out = pcli("remember", "Priya lives in Madrid", "--user", "priya", "--field", "city",
               "--json")
    queued = json.loads(out.stdout)
    assert (queued["status"], queued["value"]) == ("pending", "Madrid")
    accepted = json.loads(
        pcli("proposals", "accept", str(queued["proposal_id"]), "--json").stdout)
    assert accepted["superseded"] == lisbon["id"]
    old, new = memory_rows(db_path, "kind = 'fact'")
    assert (old["state"], new["state"]) == ("superseded", "active")
    assert new["attributes"]["value"] == "Madrid"
    assert old["valid_to"] == new["valid_from"]
    assert rows(db_path, "SELECT kind FROM relations WHERE src_id = ? AND dst_id = ?",
                (new["id"], old["id"])) == [("supersedes",)]
    trail = json.loads(pcli("history", str(old["id"]), "--json").stdout)
    assert trail[0]["meta"]["superseded_by"] == new["id"]
    bundle = json.loads(pcli("acb", "build", "--user", "priya", "--json").stdout)
    (profile,) = [s for s in bundle["sections"] if s["name"] == "profile"]
    assert [i["text"] for i in profile["items"]] == ["[profile] Priya lives in Madrid"]


@pytest.mark.parametrize(("field", "text", "value"), [
    ("city", "Priya lives in Madrid", "Madrid"),
    ("city", "Priya moved to Rio de Janeiro last year.", "Rio de Janeiro"),
    ("city", "city: Porto", "Porto"),
    ("city", "Priya works in Lisbon.", None),  # not where she lives
    ("preferred_name", "Priya prefers to be called Pri.", "Pri"),
    ("pronouns", "Sam uses they/them pronouns.", "they/them"),
    ("language", "Priya prefers to speak Portuguese.", "Portuguese"),
    ("language", "Priya loves green tea.", None),
])
def test_a_field_value_is_read_from_its_sentence(field, text, value):
    assert field_value(field, text) == value


@pytest.mark.parametrize(("field", "given", "stored"), [
    ("city", "Madrid", "City: Madrid"),
    ("preferred_name", "Sam", "Preferred name: Sam"),
    ("pronouns", "they/them", "Pronouns: they/them"),
    ("city", "Priya lives in Madrid", "Priya lives in Madrid"),
])
def test_an_accepted_field_keeps_its_name_in_its_text(pcli, db_path, field, given, stored):
    out = pcli("remember", given, "--user", "priya", "--field", field, "--json")
    queued = json.loads(out.stdout)
    assert queued["status"] == "pending", out.stderr
    pending = json.loads(pcli("proposals", "list", "--json").stdout)
    assert [p["text"] for p in pending] == [stored]
    pcli("proposals", "accept", str(queued["proposal_id"]), "--json")
    (fact,) = memory_rows(db_path, "kind = 'fact'")
    assert fact["content"] == stored and fact["attributes"]["profile_field"] == field
    assert field_value(field, fact["content"]) == queued["value"]
    # Read back as the field's value: the same value again is no change.
    again = json.loads(pcli("remember", given, "--user", "priya", "--field", field,
                            "--json").stdout)
    assert again["status"] == "unchanged"
