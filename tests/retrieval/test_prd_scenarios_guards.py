"""The Agent Memory System PRD's acceptance scenarios A7-A12 (its section 10; A1-A6 and the notes on
speed and on the cases still open are in tests/retrieval/test_prd_scenarios.py): privacy, the fast
and bounded paths, recovery from the event log, deduplication. Through the real CLI."""

from __future__ import annotations

import json

import pytest

from memcli.store.opener import open_database
from tests.support.records import ndjson, turns
from tests.support.scenarios import (
    API_KEY,
    ONBOARDING,
    bundle,
    ev,
    ingest,
    items,
    rows,
    run_json,
    save_checkpoint,
    section,
    texts,
)

pytestmark = pytest.mark.usefixtures("fast_cli")  # no SPLADE model: not about ranking


def test_a7_public_channel_suppression(cli):
    run_json(
        cli, "remember", "Priya prefers green tea", "--user-id", "u1", "--category", "preferences"
    )
    run_json(cli, "decision", "add", "Price the plan at 20 EUR", "--user-id", "u1")
    ingest(
        cli,
        [
            ev(
                "a7-1",
                "message",
                {"text": "Priya's salary review is in March"},
                sensitivity="high",
            ),
            ev(
                "a7-2",
                "message",
                {"text": "Priya's phone plan ends in June"},
                sensitivity="low",
            ),
            ev("a7-3", "message", {"text": "The plan launches publicly in June"}),
        ],
    )
    public = bundle(
        cli,
        "--user-id",
        "u1",
        "--session-id",
        "s1",
        "--channel",
        "public",
        "-q",
        "Priya plan tea salary phone",
    )
    text = texts(public)
    # Section 9.1: public loads none and low only, without preferences or private decisions.
    for hidden in ("green tea", "20 EUR", "salary"):
        assert hidden not in text, hidden
    assert "launches publicly" in text and "phone plan" in text
    private = texts(
        bundle(cli, "--user-id", "u1", "--session-id", "s1", "-q", "Priya plan tea salary phone")
    )
    assert all(word in private for word in ("green tea", "20 EUR", "salary", "phone plan"))


def test_a8_secret_handling_on_every_write_path(cli, db_path):
    secret = f"the deploy key is {API_KEY}"
    ingest(
        cli,
        [
            ev(
                "a8-1",
                "message",
                {"text": "my password is hunter2-never"},
                sensitivity="secret",
            ),
            ev("a8-2", "message", {"text": secret}),
            ev("a8-3", "decision", {"decision": f"Rotate {API_KEY} monthly"}),
        ],
    )
    run_json(cli, "remember", secret, "--user-id", "u1")
    run_json(cli, "decision", "add", f"Store {API_KEY} in the vault", "--user-id", "u1")
    run_json(cli, "task", "add", f"Revoke {API_KEY}", "--user-id", "u1")
    save_checkpoint(cli, {"key": API_KEY})
    exported = cli("export").stdout
    assert API_KEY not in exported and "hunter2-never" not in exported  # events included
    assert "[REDACTED" in exported
    for channel in ("private", "team", "public", "agent"):
        acb = json.dumps(
            bundle(
                cli,
                "--user-id",
                "u1",
                "--session-id",
                "s1",
                "--channel",
                channel,
                "-q",
                "deploy key password vault",
            )
        )
        assert API_KEY not in acb and "hunter2" not in acb, channel
    # A secret event is recorded without its content: nothing to load in any channel.
    assert rows(db_path, "SELECT count(*) FROM memories WHERE event_id = 'a8-1'") == [(0,)]


def test_a9_fast_path_assembly_runs_no_retrieval(cli):
    ingest(cli, turns("s1", [f"turn {i} about invoices" for i in range(30)], user="u1"))
    run_json(cli, "decision", "add", "Invoices are numbered per year", "--user-id", "u1")
    acb = bundle(cli, "--user-id", "u1", "--session-id", "s1")  # no query: the hot set only
    assert acb["provenance"]["retrieval_path"] == "none"
    assert acb["provenance"]["candidate_pool_size"] == 0
    assert items(acb, "retrieved_evidence") == []
    assert items(acb, "decision_ledger") and items(acb, "recent_window")


def test_a10_retrieval_path_is_bounded(cli, tmp_path, monkeypatch):
    config = tmp_path / "bounded.yaml"
    config.write_text(
        "retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0}\n"
        "acb:\n  pool_max: 40\n  scored_max: 10\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    for day in range(3):  # (one turn a minute: 40 a session)
        ingest(
            cli,
            turns(
                f"s1-{day}",
                [f"invoice {day}-{i} for the billing audit was sent" for i in range(40)],
                user="u1",
            ),
        )
    acb = bundle(cli, "--user-id", "u1", "--session-id", "s2", "-q", "billing audit invoice")
    prov = acb["provenance"]
    # The legs fetch at most pool_max candidates between them; ranking then considers their
    # session neighbours too (candidate_pool_size counts those), and scores at most scored_max.
    assert 0 < sum(prov["legs"].values()) <= 40 and 0 < prov["scored"] <= 10
    assert len(items(acb, "retrieved_evidence")) <= 10


def test_a11_cold_cache_recovery(cli, db_path):
    ingest(cli, ONBOARDING)
    run_json(cli, "remember", "Ledgerly bills in EUR", "--user-id", "u1")
    run_json(cli, "task", "add", "Map the invoice tables", "--user-id", "u1")
    args = ("--user-id", "u1", "--session-id", "s1", "-q", "what is Ledgerly for")
    before = bundle(cli, *args)
    db = open_database(db_path)
    try:
        with db.transaction():
            for table in ("decisions", "tasks", "relations", "memory_vectors", "memories"):
                db.execute(f"DELETE FROM {table}")
    finally:
        db.close()
    run_json(cli, "rebuild")
    after = bundle(cli, *args)
    assert [(s["name"], [i.get("memory_id") for i in s["items"]]) for s in after["sections"]] == [
        (s["name"], [i.get("memory_id") for i in s["items"]]) for s in before["sections"]
    ]
    assert texts(after) == texts(before)


def test_a12_dedupe_prevention_keeps_tokens_stable(cli):
    ingest(cli, ONBOARDING)
    again = run_json(cli, "ingest", "-", input=ndjson(ONBOARDING))  # a client retrying
    assert again["created"] == [] and len(again["skipped"]) == len(ONBOARDING)
    assert (
        run_json(cli, "remember", "Ledgerly bills in EUR", "--user-id", "u1")["status"] == "created"
    )
    assert (
        run_json(cli, "remember", "Ledgerly bills in EUR", "--user-id", "u1")["status"] == "merged"
    )
    args = ("--user-id", "u1", "--session-id", "s1", "-q", "what is Ledgerly for")
    first, second = bundle(cli, *args), bundle(cli, *args)
    assert first["token_used"] == second["token_used"] and texts(first) == texts(second)
    assert texts(first).count("Ledgerly bills in EUR") == 1


def test_a12_one_decision_appears_once_per_bundle(cli):
    ingest(cli, ONBOARDING)
    acb = bundle(
        cli,
        "--user-id",
        "u1",
        "--session-id",
        "s2",
        "-q",
        "project purpose hypothesis billing service",
    )
    assert texts(acb).count("Project purpose hypothesis v0.1") == 1
    [decision] = items(acb, "decision_ledger")
    assert "event:a1-9" in decision["refs"]  # its episode folded in, cited
    # The files it rests on are data, not a saying of the decision: they stay as evidence.
    evidence = texts({"sections": [section(acb, "retrieved_evidence")]})
    assert "A billing service that issues invoices." in evidence
    assert "src/index.js" in evidence
