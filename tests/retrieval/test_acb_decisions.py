"""One decision, once, current (the Agent Memory System PRD's A3, A4 and A12): in a bundle's
`retrieved_evidence` a superseded decision's turn and session summary carry `superseded_by`
and rank after the rest, an active decision appears once (its ledger row, citing its turn and
summary), a summary never shows a score above its turns', and a summary whose numbers or dates
are not its turns' is flagged `conflicts_with`. Real SQLite files and PostgreSQL, the real
library and CLI."""

from __future__ import annotations

import json

import pytest

from memcli import Memory
from memcli.derived import writer as derive
from memcli.ledger import entries as ledger
from memcli.providers.embedders import HashEmbedder
from tests.support.bundles import build_acb
from tests.support.records import turns

pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]

MYSQL = "Let's use MySQL for the billing database."
SWITCH = "Switch the billing database to PostgreSQL: MySQL licensing costs too much."
QUERY = "billing database MySQL PostgreSQL"


def evidence(bundle: dict) -> list[dict]:
    return next(s for s in bundle["sections"] if s["name"] == "retrieved_evidence")["items"]


def ledger_items(bundle: dict) -> list[dict]:
    return next(s for s in bundle["sections"] if s["name"] == "decision_ledger")["items"]


def on_day(records: list[dict], day: int) -> list[dict]:
    return [{**r, "ts": f"2025-01-{day:02d}T10:00:00Z"} for r in records]


def supersession(memory) -> dict[str, int]:
    """MySQL decided in s1 (turn, summary, decision D1), replaced in s2 by PostgreSQL (turn,
    summary, decision D2 superseding D1); s3 asks."""
    memory.ingest(turns("s1", [MYSQL]))
    memory.ingest(on_day(turns("s2", [SWITCH]), 2))
    memory.ingest(on_day(turns("s3", ["What database do we use for billing?"]), 3))
    ids = {
        r["session_id"]: r["id"]
        for r in memory.db.query("SELECT id, session_id FROM memories WHERE kind = 'episode'")
    }
    old = ledger.add_decision(
        memory, "Use MySQL for the billing database", refs=["event:s1-0"], user_id="u1"
    )
    with memory.db.transaction():
        ids["sum1"] = derive.write_memory(
            memory,
            content="The team decided to use MySQL for the billing database.",
            kind="summary",
            category="event",
            source_ids=[ids["s1"]],
            user_id="u1",
            session_id="s1",
        )
        ids["sum2"] = derive.write_memory(
            memory,
            content="The team decided to switch the billing database to PostgreSQL.",
            kind="summary",
            category="event",
            source_ids=[ids["s2"]],
            user_id="u1",
            session_id="s2",
        )
    new = ledger.supersede_decision(
        memory, old["id"], "Use PostgreSQL for the billing database", refs=["event:s2-0"]
    )
    ids.update(d1=old["id"], d2=new["id"], d2_memory=new["memory_id"])
    return ids


def test_a_superseded_decision_s_turn_and_summary_are_marked_and_rank_last(db_path):
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        ids = supersession(memory)
        bundle = build_acb(
            memory, {"user_id": "u1", "session_id": "s3", "query_text": QUERY, "track": False}
        )
    items = evidence(bundle)
    marked = [i for i in items if "superseded_by" in i]
    assert {i["memory_id"] for i in marked} == {ids["s1"], ids["sum1"]}
    assert all(i["superseded_by"] == f"decision:{ids['d2']}" for i in marked)
    assert all(f"(superseded by D{ids['d2']})" in i["text"].split("\n")[0] for i in marked)
    # After every unmarked item.
    flags = ["superseded_by" in i for i in items]
    assert flags == sorted(flags)


def test_one_decision_appears_once_per_bundle(cli, db_path):
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        ids = supersession(memory)
    out = cli(
        "acb", "build", "--user", "u1", "--session", "s3", "-q", QUERY, "--no-track", "--json"
    )
    assert out.exit_code == 0, out.stderr
    bundle = json.loads(out.stdout)
    (decision,) = ledger_items(bundle)
    shown = [i.get("memory_id") for s in bundle["sections"] for i in s["items"]]
    assert ids["s2"] not in shown and ids["sum2"] not in shown  # folded into the ledger row
    assert sorted(decision["duplicates"]) == sorted([ids["s2"], ids["sum2"]])
    assert "event:s2-0" in decision["refs"]
    texts = json.dumps(bundle["sections"])
    assert texts.count("PostgreSQL") == 1  # the ledger row only (the turn says it too)
    assert bundle["provenance"]["deduped"] >= 2


def test_a_summary_shows_no_higher_score_than_its_turns_and_a_drift_is_flagged(db_path):
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        memory.ingest(turns("s1", ["The launch moves to 12 May.", "Confirmed: launch on 12 May."]))
        memory.ingest(on_day(turns("s2", ["What did we settle?"]), 2))
        episodes = [
            r["id"]
            for r in memory.db.query("SELECT id FROM memories WHERE session_id = 's1' ORDER BY id")
        ]
        with memory.db.transaction():
            drifted = derive.write_memory(
                memory,
                content="The team confirmed the launch date: the launch is on 20 May.",
                kind="summary",
                category="event",
                source_ids=episodes,
                user_id="u1",
                session_id="s1",
                attributes={"method": "llm"},
            )
            faithful = derive.write_memory(
                memory,
                content="The team confirmed the launch on 12 May.",
                kind="summary",
                category="event",
                source_ids=episodes,
                user_id="u1",
                session_id="s1",
                attributes={"method": "llm"},
            )
        bundle = build_acb(
            memory,
            {
                "user_id": "u1",
                "session_id": "s2",
                "track": False,
                "query_text": "launch date confirmed launch",
            },
        )
    by_id = {i["memory_id"]: i for i in evidence(bundle)}
    best_turn = max(by_id[e]["score"] for e in episodes if e in by_id)
    assert by_id[drifted]["score"] <= best_turn
    assert by_id[drifted]["conflicts_with"] == ["event:s1-0", "event:s1-1"]
    assert "conflicts_with" not in by_id[faithful]
    assert all("conflicts_with" not in by_id[e] for e in episodes if e in by_id)
