"""Context fidelity of bundles: the profile and the latest reflection without a query,
the public channel's exclusions, duplicate evidence collapsed, grouped tool-output omissions.
Real SQLite files, the real CLI (in process, and one process of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memcli import Memory
from memcli.derived import writer as derive
from memcli.ledger import entries as ledger
from memcli.providers.embedders import HashEmbedder
from tests.support.bundles import build_acb
from tests.support.records import ndjson, turns

pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]  # SQLite and PostgreSQL


def section(bundle: dict, name: str) -> dict:
    return next(s for s in bundle["sections"] if s["name"] == name)


def bundle_json(cli, *args: str) -> dict:
    result = cli("acb", "build", "--no-track", "--json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_a_bundle_without_a_query_knows_the_user(cli, db_path, tmp_path):
    assert cli("remember", "Priya's pronouns are she/her", "--user", "priya",
               "--category", "profile").exit_code == 0
    assert cli("remember", "Priya lives in Lisbon", "--user", "priya",
               "--category", "profile").exit_code == 0
    assert cli("remember", "Sam lives in Porto", "--user", "sam",
               "--category", "profile").exit_code == 0
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        for text in ("An older reflection.", "Priya plans trips weeks ahead and hates layovers."):
            derive.write_memory(memory, content=text, kind="reflection", category="activity",
                                source_ids=[], user_id="priya", decay_rate=0.0)
    bundle = bundle_json(cli, "--user", "priya")
    profile = [i["text"] for i in section(bundle, "profile")["items"]]
    assert sorted(profile) == ["[profile] Priya lives in Lisbon",
                               "[profile] Priya's pronouns are she/her"]
    reflection = section(bundle, "reflection")["items"]
    assert len(reflection) == 1 and "hates layovers" in reflection[0]["text"]
    assert bundle["provenance"]["retrieval_path"] == "none"  # no query: the fast path
    # The allowlist applies: a planner may not read `profile` nor `activity` (the reflection's).
    planner = bundle_json(cli, "--user", "priya", "--agent", "planner")
    assert not section(planner, "profile")["items"] and not section(planner, "reflection")["items"]
    # The same through the installed entry point, in a process of its own.
    env = {k: v for k, v in os.environ.items() if not k.startswith("_MEMCLI")}
    env.update(MEMCLI_EMBEDDER="hash", MEMCLI_DB=str(db_path),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-m", "memcli", "acb", "build", "--user", "priya",
                           "--no-track", "--format", "markdown"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "## profile\n" in proc.stdout and "Priya lives in Lisbon" in proc.stdout
    assert "## reflection\n" in proc.stdout and "hates layovers" in proc.stdout
    assert "Sam lives in Porto" not in proc.stdout


def test_an_episode_of_a_context_all_category_is_in_the_profile(cli):
    events = [{"event_id": "sam-1", "session_id": "s1", "user_id": "sam",
               "category": "profile", "text": "My preferred name is Sam."},
              {"event_id": "sam-2", "session_id": "s1", "user_id": "sam",
               "text": "What is the weather like today?"}]
    assert cli("ingest", "-", input=ndjson(events)).exit_code == 0
    profile = section(bundle_json(cli, "--user", "sam"), "profile")["items"]
    assert [i["text"] for i in profile] == ["[profile] My preferred name is Sam."]
    assert "event:sam-1" in profile[0]["refs"]
    # In the session, the turn is shown once (the floor: the newest turn is the other one).
    inside = bundle_json(cli, "--user", "sam", "--session", "s1")
    shown = [i["memory_id"] for s in inside["sections"] for i in s["items"] if "memory_id" in i]
    assert len(shown) == len(set(shown)) == 2


def test_a_summary_that_drifted_cites_its_turns_and_ranks_after_them(db_path):
    """The Agent Memory System PRD's summary drift guard: ground truth comes first."""
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        memory.ingest(turns("s1", ["The launch moves to May 3.", "Confirmed: launch on May 3."]))
        memory.ingest(turns("s2", ["What did we settle?"]))
        episodes = [r["id"] for r in memory.db.query(
            "SELECT id FROM memories WHERE session_id = 's1' ORDER BY id")]
        with memory.db.transaction():
            summary = derive.write_memory(
                memory, content="Launch date: the launch is on April 1, launch confirmed.",
                kind="summary", category="event", source_ids=episodes, user_id="u1",
                session_id="s1")
        bundle = build_acb(memory, {"user_id": "u1", "session_id": "s2", "track": False,
                                    "query_text": "launch date confirmed launch"})
    evidence = section(bundle, "retrieved_evidence")["items"]
    order = [i["memory_id"] for i in evidence]
    assert set(episodes) | {summary} <= set(order)
    # Not above the best of its own turns: what was said comes first.
    assert order.index(summary) > min(order.index(e) for e in episodes)
    item = evidence[order.index(summary)]
    assert item["derived"] is True
    assert item["refs"][:2] == ["event:s1-0", "event:s1-1"]
    assert f"mem:{summary}" not in item["refs"]
    assert "[summary]" in item["text"]
    assert not any(i.get("derived") for i in evidence if i["memory_id"] != summary)


def test_rag_length_bounds_a_context_all_category(tmp_path, cli, monkeypatch):
    cats = tmp_path / "categories.yaml"
    cats.write_text("categories:\n  - {name: profile, context: all, rag_length: 2}\n"
                    "allowlists:\n  default: ['*']\n")
    monkeypatch.setenv("MEMCLI_CATEGORIES", str(cats))
    for i in range(4):
        assert cli("remember", f"profile line number {i} of four", "--user", "u1",
                   "--category", "profile").exit_code == 0
    assert len(section(bundle_json(cli, "--user", "u1"), "profile")["items"]) == 2


def test_a_public_bundle_has_no_preferences_and_no_private_decisions(cli, db_path):
    assert cli("remember", "Priya prefers aisle seats", "--user", "priya",
               "--category", "preferences").exit_code == 0
    assert cli("remember", "Priya works on the zephyr project", "--user", "priya",
               "--category", "projects").exit_code == 0
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        ledger.add_decision(memory, "Use the private budget sheet", user_id="priya")
        ledger.add_decision(memory, "Publish the zephyr roadmap", user_id="priya",
                            channel="public")
    query = ["--user", "priya", "-q", "aisle seats zephyr budget roadmap"]
    private = json.dumps(bundle_json(cli, *query))
    assert "aisle seats" in private and "private budget sheet" in private
    public = bundle_json(cli, *query, "--channel", "public")
    text = json.dumps(public)
    assert "aisle seats" not in text and "private budget sheet" not in text
    assert "Publish the zephyr roadmap" in text and "zephyr project" in text
    assert "preferences" not in public["provenance"]["filters"]["categories"]
    # The agent channel drops the private decision too, but keeps preferences.
    agent = json.dumps(bundle_json(cli, *query, "--channel", "agent"))
    assert "private budget sheet" not in agent and "aisle seats" in agent


def test_the_same_sentence_three_times_is_one_evidence_item(cli):
    said = "We agreed the quarterly offsite will be in Lisbon in March."
    texts = [said, "Unrelated chatter about lunch.", said, "More chatter.", said.upper()]
    assert cli("ingest", "-", input=ndjson(turns("s1", texts))).exit_code == 0
    assert cli("ingest", "-", input=ndjson(turns("s2", ["hello there"]))).exit_code == 0
    bundle = bundle_json(cli, "--user", "u1", "--session", "s2", "-q", "quarterly offsite Lisbon")
    items = [i for i in section(bundle, "retrieved_evidence")["items"] if "offsite" in i["text"]]
    assert len(items) == 1
    assert sorted(r for r in items[0]["refs"] if r.startswith("event:")) == [
        "event:s1-0", "event:s1-2", "event:s1-4"]
    assert len(items[0]["duplicates"]) == 2
    assert bundle["provenance"]["deduped"] >= 2
    again = bundle_json(cli, "--user", "u1", "--session", "s2", "-q", "quarterly offsite Lisbon")
    assert again == bundle  # byte-identical for the same request


def test_near_duplicate_rule():
    from memcli.acb.duplicates import near, signature

    a = "we agreed that the quarterly offsite for the whole platform team will be held in lisbon"
    assert near(signature(a)[1], signature(a + " too")[1])  # one extra word in 16
    assert not near(signature(a)[1], signature(a.replace("will", "will not"))[1])
    assert not near(signature(a + " 40")[1], signature(a + " 45")[1])
    assert not near(signature("i like tea")[1], signature("i like green tea")[1])


def test_one_truncated_tool_output_is_one_grouped_omission(db_path):
    big = "\n".join(f"line {i} of the build log, step {i % 7}" for i in range(4000))
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        memory.ingest([{"event_id": "t1", "session_id": "s1", "user_id": "u1",
                        "kind": "tool_result", "ts": "2025-01-01T10:00:00Z",
                        "content": {"tool": "make", "output": big}}])
        bundle = build_acb(memory, {"session_id": "s1", "user_id": "u1", "track": False})
    chunks = [i for i in section(bundle, "recent_window")["items"] if i.get("artifact_id")]
    assert len(chunks) > 1  # the output is several chunks of one artifact
    tool = [o for o in bundle["omissions"] if o["reason"] == "truncated_tool_output"]
    assert len(tool) == 1
    assert tool[0]["count"] == len(chunks) and tool[0]["refs"] == ["event:t1"]
    assert tool[0]["artifact_id"].startswith("art_")
