"""`memcli consolidate`: pending sessions, extraction, two-level dedup, supersession, app limit.

Every model reply comes from the scripted HTTP stub through the real `openai` client.
"""

from __future__ import annotations

import json
import threading

import pytest

from memcli.derived.textrules import check_memory_text
from memcli.lifecycle import dedup
from memcli.lifecycle.consolidate import consolidate
from memcli.lifecycle.extract import Extraction
from tests.support.cli import NO_SPARSE_CONFIG, use_stub_model
from tests.support.lifecycle import (
    conversation,
    extraction,
    memory_rows,
    model_for,
    one_a_day,
    rows,
    run_lock_held,
    settings,
    snapshot,
    verdicts,
)
from tests.support.records import ndjson, record_calls

TEA = "Priya loves green tea."
NURSE = "Priya works as a nurse at Santa Maria hospital."

# `@backends`: SQLite and PostgreSQL (tests/support/backend.py), for each test reaching the
# store's SQL. Tests of logic that another test already walks on both engines stay
# SQLite-only: a PostgreSQL case costs ~2.5x a SQLite one.
backends = pytest.mark.backends


@pytest.fixture
def lcli(cli, monkeypatch, tmp_path, stub):
    """The real CLI with the stub as its model, sparse leg off (test speed), small app limit."""
    use_stub_model(monkeypatch, tmp_path, stub,
                   NO_SPARSE_CONFIG + "lifecycle: {app_memory_limit: 3}\n")
    return cli


def two_sessions(lcli) -> None:
    records = conversation(
        "s1", ["I work as a nurse at Santa Maria.", "I love green tea."]
    ) + conversation("s2", ["Hello again!"], day=2)
    assert lcli("ingest", "-", input=ndjson(records)).exit_code == 0


@backends
def test_rerunning_consolidate_changes_nothing(lcli, stub, db_path):
    two_sessions(lcli)
    stub.enqueue_json(
        extraction("Priya said she is a nurse and loves tea.", facts=[NURSE], preferences=[TEA])
    )
    first = lcli("consolidate", "--json")
    assert first.exit_code == 0, first.stderr
    report = json.loads(first.stdout)
    assert [s["session_id"] for s in report["sessions"]] == ["s1"]  # s2 is still open
    assert [a["text"] for a in report["sessions"][0]["added"]] == [NURSE, TEA]
    before = snapshot(db_path)
    requests = len(stub.chat_requests)

    again = lcli("consolidate", "--json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["sessions"] == []
    assert snapshot(db_path) == before
    assert len(stub.chat_requests) == requests  # nothing was even asked


@backends
def test_facts_cite_their_turns_and_the_summary_is_structured(lcli, stub, db_path):
    two_sessions(lcli)
    stub.enqueue_json(
        extraction(
            "Priya said she is a nurse and loves tea.",
            facts=[{"text": NURSE, "turns": [1], "importance": 0.8, "category": "activity"}],
            preferences=[{"text": TEA, "turns": [2]}],
            todos=["Priya will send the rota."],
            entities=["Santa Maria"],
        )
    )
    assert lcli("consolidate", "--json").exit_code == 0
    episodes = {r["event_id"]: r["id"] for r in memory_rows(db_path, "kind = 'episode'")}
    facts = {r["content"]: r for r in memory_rows(db_path, "kind IN ('fact', 'task')")}
    assert facts[NURSE]["source_ids"] == [episodes["s1-0"]]
    assert facts[NURSE]["category"] == "activity" and facts[NURSE]["importance"] == 0.8
    assert facts[TEA]["source_ids"] == [episodes["s1-1"]]
    assert facts[TEA]["category"] == "preferences"
    # A todo is a ledger task: its memory is the ledger's text, citing the turn as `mem:ID`.
    task = facts["Task [open]: Priya will send the rota."]
    assert task["kind"] == "task" and task["source_ids"] == [f"mem:{episodes['s1-0']}"]
    assert facts[NURSE]["attributes"]["method"] == "llm"
    (summary,) = memory_rows(db_path, "kind = 'summary'")
    assert summary["attributes"]["method"] == "llm"
    structured = summary["attributes"]["structured"]
    assert structured["facts"] == [NURSE] and structured["todos"] == ["Priya will send the rota."]
    assert structured["entities"] == ["Santa Maria"]
    (stored,) = rows(db_path, "SELECT summary FROM sessions WHERE session_id = 's1'")
    assert json.loads(stored[0])["summary_id"] == summary["id"]


@backends
def test_a_named_session_is_consolidated_even_if_open(lcli, stub):
    two_sessions(lcli)
    stub.enqueue_json(extraction("Priya said hello again."))
    out = lcli("consolidate", "--session", "s2", "--json")
    assert out.exit_code == 0, out.stderr
    assert [s["session_id"] for s in json.loads(out.stdout)["sessions"]] == ["s2"]
    again = json.loads(lcli("consolidate", "--session", "s2", "--json").stdout)
    assert again["sessions"] == [] and again["up_to_date"] == ["s2"]
    missing = lcli("consolidate", "--session", "nope")
    assert missing.exit_code == 1 and "no session 'nope'" in missing.stderr


@backends
def test_contradiction_supersedes_without_deleting(lcli, stub, db_path):
    records = one_a_day("I'm a nurse at Santa Maria.",
                        "I quit and now teach at a school in Porto.", "Hi")
    lcli("ingest", "-", input=ndjson(records))
    stub.enqueue_json(extraction("Priya talked about her job.", facts=[NURSE]))
    stub.enqueue_json(
        extraction("Priya changed jobs.", facts=["Priya works as a teacher at a school in Porto."])
    )
    stub.enqueue_json(verdicts("contradicts"))
    out = lcli("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    s2 = json.loads(out.stdout)["sessions"][1]
    (old,) = memory_rows(db_path, "content = ?", (NURSE,))
    (new,) = memory_rows(db_path, "content LIKE 'Priya works as a teacher%'")
    assert s2["superseded"] == [{"old_id": old["id"], "new_id": new["id"]}]
    assert old["state"] == "superseded" and old["valid_to"] is not None  # still there
    assert new["state"] == "active" and new["attributes"]["supersedes"] == [old["id"]]
    assert rows(
        db_path,
        "SELECT kind FROM relations WHERE src_id = ? AND dst_id = ?",
        (new["id"], old["id"]),
    ) == [("supersedes",)]
    history = lcli("history", str(old["id"]), "--json")
    ops = [(h["op"], h["meta"].get("superseded_by")) for h in json.loads(history.stdout)]
    assert ("UPDATE", new["id"]) in ops and ops[-1][0] == "ADD"
    # The pair prompt named both texts, stored first.
    pair_prompt = stub.chat_requests[2]["messages"][1]["content"]
    assert pair_prompt.index(NURSE) < pair_prompt.index("teacher")
    # Queries see the current fact only.
    hits = json.loads(lcli("query", "where does Priya work", "--user", "priya", "--json").stdout)
    assert old["id"] not in [h["id"] for h in hits]


@backends
def test_near_duplicates_merge_without_asking_the_model(memory, stub, db_path):
    memory.ingest(one_a_day("I love green tea.", "Green tea, really!", "Bye"))
    stub.enqueue_json(extraction(preferences=[TEA]))
    stub.enqueue_json(extraction(preferences=["Priya really loves green tea.", TEA]))
    report = consolidate(memory, model_for(memory, stub), settings())
    s2 = report["sessions"][1]
    (kept,) = memory_rows(db_path, "kind = 'fact'")
    assert s2["added"] == [] and s2["duplicates_in_batch"] == 1
    assert s2["merged"][0]["into"] == kept["id"] and "near-duplicate" in s2["merged"][0]["reason"]
    episodes = [r["id"] for r in memory_rows(db_path, "kind = 'episode'")]
    assert kept["source_ids"] == [episodes[0], episodes[1]]  # cites both sessions
    assert len(stub.chat_requests) == 2  # two extractions, no pair check
    merges = [h for h in memory.history(kept["id"]) if h["op"] == "MERGE"]
    assert merges and merges[0]["meta"]["merged_text"] == "Priya really loves green tea."


@backends
def test_the_model_decides_uncertain_pairs_and_verdicts_are_cached(memory, stub):
    memory.ingest(conversation("s1", ["x"]) + conversation("s2", ["y"], day=2))
    stub.enqueue_json(extraction(facts=[NURSE]))
    consolidate(memory, model_for(memory, stub), settings())
    fact = dedup.NewFact(
        "fact", "knowledge", "Priya is a nurse at the Santa Maria clinic.", 0.5, [1]
    )
    stored = dedup.load_store(memory.db, "default", "priya", with_vectors=False)
    dedup.classify(fact, stored, settings())
    assert fact.action == "add" and len(fact.checks) == 1  # uncertain: ask
    stub.enqueue_json(verdicts("same"))

    def check(new: dedup.NewFact) -> dedup.PairStats:
        return dedup.check_pairs(model_for(memory, stub), memory.db, [new], settings(),
                                 tenant_id="default", budget_left=10, cache=True)

    stats = check(fact)
    assert (stats.asked, stats.cached, fact.action) == (1, 0, "merge")
    again = dedup.NewFact("fact", "knowledge", fact.text, 0.5, [1])
    dedup.classify(again, stored, settings())
    stats = check(again)
    assert (stats.asked, stats.cached, again.action) == (0, 1, "merge")
    assert len(stub.chat_requests) == 2  # extraction + one pair prompt, no recheck


def test_pair_checks_are_capped_per_user(memory, stub):
    memory.ingest(one_a_day("x", "y", "z"))
    stub.enqueue_json(extraction(facts=[NURSE, "Priya lives with her sister Anika."]))
    model = model_for(memory, stub)
    consolidate(memory, model, settings())
    stub.enqueue_json(
        extraction(
            facts=[
                "Priya works at Santa Maria hospital as a doctor.",
                "Priya lives with her brother Ravi.",
            ]
        )
    )
    stub.enqueue_json(verdicts("unrelated"))
    report = consolidate(memory, model, settings(max_pair_checks_per_user=1))
    (s2,) = report["sessions"]
    assert s2["pairs"]["asked"] == 1 and s2["pairs"]["capped"] == 1
    assert len(s2["added"]) == 2  # unchecked facts are added, never superseded by guesswork
    body = stub.chat_requests[-1]["messages"][1]["content"]
    assert body.count("Pair ") == 1


@backends
def test_malformed_reply_changes_nothing_and_is_reported(lcli, stub, db_path):
    two_sessions(lcli)
    before = snapshot(db_path)
    stub.enqueue('{"summary": "Priya talked", "facts": [{"text": ')  # broken JSON
    stub.enqueue("Sorry, I cannot help with that.")  # the repair turn fails too
    out = lcli("consolidate", "--json")
    assert out.exit_code == 1
    report = json.loads(out.stdout)
    assert report["sessions"] == [] and report["errors"][0]["session_id"] == "s1"
    assert report["errors"][0]["task"] == "extract" and report["errors"][0]["failures"] == 1
    assert "memcli: warning: s1: extract: not JSON" in out.stderr
    assert snapshot(db_path) == before
    # Both replies cost tokens and are on record; the session stays pending.
    assert rows(db_path, "SELECT count(*), sum(tokens_in) FROM llm_usage") == [(2, 20)]
    stub.enqueue_json(extraction("Priya talked about work.", facts=[NURSE]))
    retry = lcli("consolidate", "--json")
    assert retry.exit_code == 0 and json.loads(retry.stdout)["sessions"][0]["added"]


@backends
def test_a_bad_pair_check_leaves_the_whole_session_unapplied(memory, stub, db_path):
    memory.ingest(one_a_day("x", "y", "z"))
    model = model_for(memory, stub)
    stub.enqueue_json(extraction(facts=[NURSE]))
    consolidate(memory, model, settings())
    before = snapshot(db_path)
    stub.enqueue_json(
        extraction(
            facts=["Priya works as a teacher at a school in Porto.", "Priya owns a red bicycle."]
        )
    )
    stub.enqueue_json(verdicts("contradicts", "same"))  # two verdicts for one pair
    stub.enqueue_json({"verdicts": []})
    report = consolidate(memory, model, settings())
    assert report["sessions"] == [] and "verdicts" in report["errors"][0]["reason"]
    assert snapshot(db_path) == before  # not even the bicycle: never half-applied


def test_an_item_breaking_the_writing_rules_costs_that_item_only(memory, stub):
    memory.ingest(conversation("s1", ["I love tea"]) + conversation("s2", ["y"], day=2))
    stub.enqueue_json(extraction(facts=["I love tea.", "Priya loves tea."]))
    report = consolidate(memory, model_for(memory, stub), settings())
    (s1,) = report["sessions"]
    assert [a["text"] for a in s1["added"]] == ["Priya loves tea."]
    (dropped,) = s1["dropped"]
    assert dropped["item"] == "facts[0]" and "third person" in dropped["reason"]
    assert len(stub.chat_requests) == 1  # no repair turn: nothing else was wrong


@pytest.mark.parametrize(
    "text, reason",
    [
        ("I moved to Lisbon.", "third person"),
        ("Priya told you about Lisbon.", "third person"),
        ("Priya moved. She likes it. She stays.", "sentences"),
        ("Priya " + "really " * 50 + "likes Lisbon.", "characters"),
        ("   ", "empty"),
        ("She moved to Lisbon in May.", "self-contained"),
    ],
)
def test_writing_rules(text, reason):
    with pytest.raises(ValueError, match=reason):
        check_memory_text(text)
    reply = Extraction.model_validate({"summary": "Priya talked.", "facts": [{"text": text}]})
    assert reply.facts == [] and reason in reply.dropped[0].reason
    assert check_memory_text("Priya moved to Lisbon in March 2024. She likes the US.")


@backends
def test_after_repeated_failures_a_session_is_summarised_extractively(memory, stub):
    memory.ingest(
        conversation("s1", ["Meet Anika at Lisbon airport on 21 March."])
        + conversation("s2", ["y"], day=2)
    )
    for _ in range(2):
        stub.enqueue("not json at all")
    report = consolidate(memory, model_for(memory, stub), settings(max_llm_failures=1))
    (s1,) = report["sessions"]
    assert s1["method"] == "extractive" and "failed 1 times" in s1["note"]
    assert report["errors"][0]["failures"] == 1


@backends
def test_without_a_model_only_the_model_free_parts_run(lcli, stub, db_path, monkeypatch):
    monkeypatch.delenv("MEMCLI_LLM_BASE_URL")
    two_sessions(lcli)
    out = lcli("consolidate", "--json")
    assert out.exit_code == 0
    assert out.stderr.count("\n") == 1 and "no LLM configured" in out.stderr
    report = json.loads(out.stdout)
    assert report["method"] == "extractive" and report["model"] is None
    assert report["sessions"][0]["added"] == [] and "usage" not in report
    (summary,) = memory_rows(db_path, "kind = 'summary'")
    assert summary["attributes"]["method"] == "extractive"
    assert "Santa Maria" in summary["content"]  # the informative turn was selected
    assert memory_rows(db_path, "kind = 'fact'") == []
    assert stub.chat_requests == []
    assert rows(db_path, "SELECT count(*) FROM llm_usage") == [(0,)]
    # Once a model is configured, the session is consolidated properly and the extractive
    # summary is superseded by the model's.
    monkeypatch.setenv("MEMCLI_LLM_BASE_URL", stub.base_url)
    stub.enqueue_json(extraction("Priya is a nurse.", facts=[NURSE]))
    upgraded = json.loads(lcli("consolidate", "--json").stdout)
    assert upgraded["sessions"][0]["added"][0]["text"] == NURSE
    (old,) = memory_rows(db_path, "id = ?", (summary["id"],))
    assert old["state"] == "superseded"


@backends
def test_dry_run_prints_the_plan_and_writes_nothing(lcli, stub, db_path):
    records = one_a_day("x", "y", "z")
    lcli("ingest", "-", input=ndjson(records))
    stub.enqueue_json(extraction(facts=[NURSE], preferences=[TEA]))
    assert lcli("consolidate", "--session", "s1").exit_code == 0
    before = snapshot(db_path)
    stub.enqueue_json(
        extraction(
            facts=["Priya works as a teacher at a school in Porto.", "Priya owns a red bicycle."],
            preferences=["Priya really loves green tea."],
        )
    )
    stub.enqueue_json(verdicts("contradicts"))
    out = lcli("consolidate", "--session", "s2", "--dry-run", "--json")
    assert out.exit_code == 0, out.stderr
    plan = json.loads(out.stdout)
    (s2,) = plan["sessions"]
    assert plan["dry_run"] is True
    assert [f["text"] for f in s2["add"]] == ["Priya owns a red bicycle."]
    assert s2["merge"][0]["text"] == "Priya really loves green tea."
    assert s2["supersede"][0]["old_ids"] and "teacher" in s2["supersede"][0]["text"]
    assert snapshot(db_path) == before
    assert rows(db_path, "SELECT count(*) FROM pair_checks") == [(0,)]


@backends
def test_app_memory_limit_holds_with_model_and_fifo_fallback(lcli, stub, db_path):
    records = conversation("s1", ["x"], app_id="chatapp") + conversation(
        "s2", ["y"], day=2, app_id="chatapp"
    )
    lcli("ingest", "-", input=ndjson(records))
    stub.enqueue_json(
        extraction(facts=[NURSE, "Priya owns a red bicycle.", "Priya has a sister named Anika."])
    )

    # 3 facts + the summary = 4 derived memories for a limit of 3: one compaction round.
    def ids():
        return [
            r["id"]
            for r in memory_rows(
                db_path, "app_id = 'chatapp' AND state = 'active' AND kind != 'episode'"
            )
        ]

    stub.enqueue_json({"action": "delete", "target_id": 999, "reason": "hallucinated"})
    out = lcli("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    (app,) = json.loads(out.stdout)["compaction"]
    assert (app["before"], app["after"], app["limit"]) == (4, 3, 3)
    (action,) = app["actions"]
    assert action["method"] == "fifo" and "not a choosable memory" in action["fallback_because"]
    assert "compaction fell back to FIFO" in out.stderr
    oldest = memory_rows(db_path, "id = ?", (action["target_id"],))[0]
    assert oldest["state"] == "soft_deleted" and oldest["purge_at"]
    assert len(ids()) == 3
    # Next session: the model merges two memories into one.
    lcli("ingest", "-", input=ndjson(conversation("s3", ["z"], day=3, app_id="chatapp")))
    stub.enqueue_json(extraction(facts=["Priya is learning Portuguese."]))
    facts = [
        r["id"]
        for r in memory_rows(db_path, "app_id = 'chatapp' AND state = 'active' AND kind = 'fact'")
    ]
    stub.enqueue_json(
        {
            "action": "merge",
            "target_id": facts[0],
            "merge_with_id": facts[1],
            "new_content": "Priya, a nurse, owns a red bicycle.",
        }
    )
    stub.enqueue_json({"action": "delete", "target_id": facts[2], "reason": "trivial"})
    out = lcli("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    (app,) = json.loads(out.stdout)["compaction"]
    assert app["after"] == 3 and [a["method"] for a in app["actions"]] == ["llm", "llm"]
    merged = memory_rows(db_path, "id = ?", (app["actions"][0]["new_id"],))[0]
    assert merged["content"] == "Priya, a nurse, owns a red bicycle."
    assert {r["state"] for r in memory_rows(db_path, f"id IN ({facts[0]}, {facts[1]})")} == {
        "superseded"
    }
    assert len(ids()) == 3


@backends
def test_daily_token_cap_stops_cleanly(lcli, stub, db_path, monkeypatch):
    monkeypatch.setenv("MEMCLI_LLM_DAILY_TOKEN_CAP", "15")  # one stub reply is 10 + 5 tokens
    records = one_a_day("x", "y", "z")
    lcli("ingest", "-", input=ndjson(records))
    stub.enqueue_json(extraction(facts=[NURSE]))
    out = lcli("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    report = json.loads(out.stdout)
    assert [s["session_id"] for s in report["sessions"]] == ["s1"]
    assert "15 of 15 tokens" in report["stopped"] and "stopped early" in out.stderr
    assert len(stub.chat_requests) == 1  # s2 was never sent
    usage = json.loads(lcli("stats", "--usage", "--json").stdout)
    (row,) = usage["by_command"]
    assert (row["command"], row["calls"], row["tokens_in"], row["tokens_out"]) == (
        "consolidate",
        1,
        10,
        5,
    )
    assert usage["by_day"][0]["calls"] == 1 and usage["total"]["calls"] == 1
    assert usage["by_day_command"][0]["models"] == "stub-model"


def test_a_slow_model_times_out_and_leaves_the_session_pending(
    lcli,
    stub,
    db_path,
    monkeypatch,
):
    monkeypatch.setenv("MEMCLI_LLM_TIMEOUT", "0.3")
    two_sessions(lcli)
    before = snapshot(db_path)
    for _ in range(2):  # the client's one retry
        stub.enqueue_json(extraction(facts=[NURSE]), delay=1.5)
    out = lcli("consolidate", "--json")
    assert out.exit_code == 1
    assert "did not answer within 0.3s" in json.loads(out.stdout)["stopped"]
    assert snapshot(db_path) == before


@backends
def test_a_held_lock_exits_75_and_a_dead_holder_is_taken_over(lcli, db_path, monkeypatch):
    two_sessions(lcli)
    monkeypatch.setenv("MEMCLI_LOCK_WAIT", "0")  # no wait: busy at once
    with run_lock_held(db_path, "consolidate"):
        out = lcli("consolidate", "--json")
        assert out.exit_code == 75 and out.stdout == ""
        assert "another `memcli consolidate` is running" in out.stderr
    out = lcli("consolidate", "--no-llm", "--json")  # its holder died without letting go
    assert out.exit_code == 0, out.stderr
    assert rows(db_path, "SELECT count(*) FROM run_locks") == [(0,)]
    assert rows(db_path, "SELECT command, status FROM lifecycle_runs") == [("consolidate", "ok")]


@backends
def test_a_run_waits_for_the_holder_to_finish_then_runs(lcli, db_path, monkeypatch):
    """Cron beside a daemon whose indexer consolidates a session: the second run waits its
    turn (`lifecycle.lock_wait`) instead of exiting 75."""
    two_sessions(lcli)
    monkeypatch.setenv("MEMCLI_LOCK_WAIT", "120")
    holding, finish = threading.Event(), threading.Event()

    def holder() -> None:
        with run_lock_held(db_path, "consolidate"):
            holding.set()
            finish.wait(120)

    other = threading.Thread(target=holder)
    other.start()
    try:
        assert holding.wait(60)
        threading.Timer(0.3, finish.set).start()  # the other run ends while this one waits
        out = lcli("consolidate", "--no-llm", "--json")
    finally:
        finish.set()
        other.join()
    assert out.exit_code == 0, out.stderr
    assert rows(db_path, "SELECT command, status FROM lifecycle_runs") == [("consolidate", "ok")]


def test_each_new_fact_is_embedded_once(memory, stub):
    """Consolidation embeds candidate facts to deduplicate them; writing one reuses that
    vector instead of embedding it again."""
    batches = record_calls(memory.embedder, "embed_documents")
    memory.ingest(conversation("s1", ["I am a nurse and love tea."])
                  + conversation("s2", ["Bye"], day=2))
    batches.clear()
    stub.enqueue_json(extraction(facts=[NURSE], preferences=[TEA]))
    report = consolidate(memory, model_for(memory, stub), settings())
    assert [a["text"] for a in report["sessions"][0]["added"]] == [NURSE, TEA]
    embedded = [text for batch in batches for text in batch]
    assert embedded.count(NURSE) == 1 and embedded.count(TEA) == 1
    stored = memory.db.scalar(
        "SELECT count(*) FROM memory_vectors v JOIN memories m ON m.id = v.memory_id"
        " WHERE m.kind != 'episode' AND m.content IN (?, ?)", (NURSE, TEA))
    assert stored == 2


@backends
def test_equally_similar_neighbours_link_to_the_oldest(memory, db_path):
    """A new fact links to its LINK_TOP_K most similar memories; among equals, the oldest.
    PostgreSQL returns ties in its heap's order, which an UPDATE (here `confirm`) changes:
    without an id tie-breaker the edges differed from SQLite's."""
    from memcli.derived.writer import LINK_TOP_K, write_memory
    from memcli.lifecycle.remember import confirm

    def fact() -> int:
        return write_memory(memory, content="Priya likes green tea.", kind="fact",
                            source_ids=[], user_id="priya", link=True)

    ids = [fact() for _ in range(8)]
    for old in ids[:LINK_TOP_K]:
        confirm(memory, old)  # an UPDATE: PostgreSQL writes a new row version elsewhere
    new = fact()
    linked = rows(db_path, "SELECT src_id FROM relations WHERE dst_id = ? AND kind = 'related'"
                           " ORDER BY src_id", (new,))
    assert [i for (i,) in linked] == ids[:LINK_TOP_K]


@backends
def test_sessions_of_two_tenants_are_consolidated_in_one_order(memory):
    """Same session id and times in two tenants: the log's order breaks the tie, the same on
    both engines (PostgreSQL has no rowid order to fall back on)."""
    for tenant in ("zeta", "alpha"):
        memory.ingest([{**r, "event_id": f"{tenant}-{r['event_id']}", "tenant_id": tenant}
                       for r in conversation("s1", ["I love green tea."])
                       + conversation("s2", ["Bye"], day=2)])
    report = consolidate(memory, None, settings())
    assert [(s["tenant_id"], s["session_id"]) for s in report["sessions"]] == [
        ("zeta", "s1"), ("alpha", "s1")]
