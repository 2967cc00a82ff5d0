"""`memcli reflect`, `memcli insights`, procedural memories and who may read them."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from memcli.derived.writer import write_memory
from memcli.errors import NotAllowedError
from memcli.lifecycle.reflect import insights, reflect
from memcli.lifecycle.remember import procedure_steps, remember
from memcli.policy.categories import load_categories
from tests.support.lifecycle import memory_rows, model_for, settings

# SQLite and PostgreSQL (tests/support/backend.py)
pytestmark = pytest.mark.backends

REFLECTION = {
    "reflection": "Priya started a new job in Porto and is settling in; her sister "
    "Anika visits often.",
    "themes": ["work", "family"],
}


def facts(memory, texts: list[str], user: str = "priya") -> list[int]:
    return [
        write_memory(memory, content=t, kind="fact", source_ids=[], user_id=user, link=False)
        for t in texts
    ]


def test_reflection_needs_three_new_facts(memory, stub):
    facts(memory, ["Priya moved to Porto.", "Priya works as a teacher."])
    report = reflect(memory, model_for(memory, stub, "reflect"), settings())
    assert report["skipped"] == [
        {"tenant_id": "default", "user_id": "priya", "reason": "too_few_facts", "facts": 2}
    ]
    assert stub.chat_requests == []


def test_reflection_is_stored_protected_with_its_sources_and_then_skipped(
    memory,
    stub,
    db_path,
):
    ids = facts(
        memory,
        ["Priya moved to Porto.", "Priya works as a teacher.", "Anika visits Priya every weekend."],
    )
    facts(memory, ["Bo likes chess."], user="bo")
    stub.enqueue_json(REFLECTION)
    report = reflect(memory, model_for(memory, stub, "reflect"), settings())
    (made,) = report["created"]
    (row,) = memory_rows(db_path, "kind = 'reflection'")
    assert row["id"] == made["id"] and row["decay_rate"] == 0 and row["user_id"] == "priya"
    assert row["source_ids"] == ids and row["attributes"]["tags"] == ["weekly"]
    assert {s["user_id"]: s["reason"] for s in report["skipped"]} == {"bo": "too_few_facts"}
    prompt = stub.chat_requests[0]["messages"][1]["content"]
    assert "Anika visits Priya" in prompt and "Bo likes chess" not in prompt
    # A second run within 6 days is skipped, even with new facts; 7 days later it runs.
    facts(memory, ["Priya adopted a cat.", "Priya bought a bike.", "Priya joined a choir."])
    again = reflect(memory, model_for(memory, stub, "reflect"), settings())
    assert again["created"] == [] and again["skipped"][-1]["reason"] == "recent"
    stub.enqueue_json(REFLECTION)
    later = reflect(
        memory,
        model_for(memory, stub, "reflect"),
        settings(),
        now=datetime.now(UTC) + timedelta(days=6.5),
    )
    assert len(later["created"]) == 1 and len(stub.chat_requests) == 2


def test_reflect_without_a_model_says_so_and_writes_nothing(cli, db_path, monkeypatch, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("retrieval: {leg_weights: {lexical: 1, sparse: 0}}\n", encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    for text in ("Priya moved to Porto.", "Priya works as a teacher.", "Priya has a cat."):
        cli("remember", text, "--user", "priya")
    out = cli("reflect", "--json")
    assert out.exit_code == 0
    assert (
        out.stderr.startswith("memcli: warning: no LLM configured") and out.stderr.count("\n") == 1
    )
    report = json.loads(out.stdout)
    assert report["created"] == [] and report["skipped"][0]["reason"] == "no_llm"
    assert memory_rows(db_path, "kind = 'reflection'") == []


def test_insights_are_low_weight_and_at_most_daily(memory, stub, db_path):
    memory.ingest(
        [
            {
                "text": "Thanks for admitting the mistake, I trust you more now.",
                "user_id": "priya",
                "session_id": "s1",
            }
        ]
    )
    stub.enqueue_json(
        {
            "insights": [
                {
                    "summary": "Priya shows more trust when mistakes are admitted openly.",
                    "tags": ["trust"],
                }
            ]
        }
    )
    report = insights(memory, model_for(memory, stub, "insights"), settings())
    (made,) = report["created"]
    (row,) = memory_rows(db_path, "kind = 'insight'")
    assert row["id"] == made["id"] and row["category"] == "relationship_dynamic"
    assert row["importance"] == 0.2 and row["attributes"]["tags"] == ["trust"]
    assert "Recent conversation:" in stub.chat_requests[0]["messages"][1]["content"]
    again = insights(memory, model_for(memory, stub, "insights"), settings())
    assert again["created"] == [] and again["skipped"][0]["reason"] == "recent"
    assert len(stub.chat_requests) == 1


def test_a_malformed_insight_reply_changes_nothing_and_is_reported(
    memory,
    stub,
    db_path,
):
    memory.ingest([{"text": "You never listen to me.", "user_id": "priya", "session_id": "s1"}])
    stub.enqueue("Priya feels unheard.")  # not JSON
    stub.enqueue_json({"insights": "Priya feels unheard."})  # not a list
    report = insights(memory, model_for(memory, stub, "insights"), settings())
    assert report["created"] == [] and report["errors"][0]["task"] == "insights"
    assert "insights" in report["errors"][0]["reason"]
    assert memory_rows(db_path, "kind = 'insight'") == []
    # A failed run does not count as "ran in the last 24 h".
    stub.enqueue_json({"insights": []})
    assert insights(memory, model_for(memory, stub, "insights"), settings())["errors"] == []


def test_procedural_memories_are_numbered_steps(memory, db_path):
    assert procedure_steps("1. Pull main\n2) Run tests\n- Deploy", None) == [
        "Pull main",
        "Run tests",
        "Deploy",
    ]
    assert procedure_steps("Pull main; run tests", None) == ["Pull main", "run tests"]
    out = remember(
        memory,
        settings(),
        text=None,
        procedural=True,
        title="Release",
        steps=["Tag the commit", "Push the tag"],
        user_id="priya",
    )
    (row,) = memory_rows(db_path, "id = ?", (out["id"],))
    assert row["content"] == "Release\n1. Tag the commit\n2. Push the tag"
    assert (row["kind"], row["category"], row["decay_rate"]) == ("procedural", "procedural", 0)
    with pytest.raises(Exception, match="at least one step"):
        procedure_steps(" ; ", None)


def test_only_agents_that_list_procedural_may_read_it():
    shipped = load_categories(None)
    # An agent no allowlist names falls back on a `default` entry: "*" is not enough either.
    cats = replace(shipped, allowlists={**shipped.allowlists, "default": ("*",)})
    assert cats.hidden("executor") == ()  # its allowlist names procedural
    assert cats.hidden("supervisor") == ("procedural",)
    assert cats.hidden("someone-new") == ("procedural",)  # default "*" is not enough
    assert cats.hidden(None) == ("procedural",)  # a plain query leaves it out ...
    assert cats.hidden(None, ("procedural",)) == ()  # ... unless a person asks for it
    cats.check("executor", ("procedural", "tasks"))
    cats.check(None, ("procedural",))
    for agent in ("planner", "someone-new"):
        with pytest.raises(NotAllowedError, match="procedural"):
            cats.check(agent, ("procedural",))


def test_queries_return_procedures_only_to_allowlisted_agents(memory):
    remember(
        memory,
        settings(),
        text="Pull main; run the release script",
        procedural=True,
        user_id="priya",
    )
    remember(
        memory,
        settings(),
        text="Priya runs the release script on Fridays.",
        user_id="priya",
        category="tasks",
    )

    def kinds(agent):
        result = memory.query(
            "release script", filters=memory.filters(agent=agent, user_id="priya")
        )
        return {h.kind for h in result.hits}

    assert "procedural" in kinds("executor")
    assert "procedural" not in kinds(None)
    assert "procedural" not in kinds("supervisor")  # its allowlist does not name it


def test_users_are_visited_in_the_same_order_on_both_engines(memory, stub):
    """Memories without a user come first, then users by name, in `reflect` and `insights`
    alike: SQLite sorts NULL first, PostgreSQL last unless told (NULLS FIRST)."""
    facts(memory, ["Someone moved to Porto."], user=None)
    facts(memory, ["Priya moved to Porto."])
    facts(memory, ["Bo likes chess."], user="bo")
    report = reflect(memory, model_for(memory, stub, "reflect"), settings())
    assert [s["user_id"] for s in report["skipped"]] == [None, "bo", "priya"]
    report = insights(memory, None, settings())
    assert [(s["user_id"], s["reason"]) for s in report["skipped"]] == [
        (None, "no_llm"),
        ("bo", "no_llm"),
        ("priya", "no_llm"),
    ]
    assert stub.chat_requests == []


def test_usage_lists_a_days_models_in_name_order(memory, stub):
    """`stats --usage` joins the models of a day and command: SQLite's group_concat keeps
    the order first seen, PostgreSQL's string_agg(DISTINCT) sorts; now both sort."""
    from memcli.config import LLMSettings
    from memcli.derived.llm_usage import Model, usage_report
    from memcli.lifecycle.reflect import Insights

    for name in ("zeta-model", "alpha-model", "zeta-model"):
        stub.enqueue_json({"insights": []})
        model = Model(
            memory.db, LLMSettings(base_url=stub.base_url, model=name, max_retries=0), "insights"
        )
        model.ask("insights", "system", "material", Insights, tenant_id="default")
    (row,) = usage_report(memory.db)["by_day_command"]
    assert (row["models"], row["calls"]) == ("alpha-model,zeta-model", 3)


def test_an_insight_breaking_the_writing_rules_costs_that_insight_only(memory, stub, db_path):
    memory.ingest([{"text": "You never listen to me.", "user_id": "priya", "session_id": "s1"}])
    stub.enqueue_json(
        {
            "insights": [
                {"summary": "Priya " + "feels unheard " * 30},
                {"summary": "I think you should listen more."},
                {"summary": "Priya wants to be listened to."},
            ]
        }
    )
    report = insights(memory, model_for(memory, stub, "insights"), settings())
    assert [c["text"] for c in report["created"]] == ["Priya wants to be listened to."]
    assert [d["item"] for d in report["dropped"]] == ["insights[0]", "insights[1]"]
    assert "characters" in report["dropped"][0]["reason"]
    assert "third person" in report["dropped"][1]["reason"]
    assert report["errors"] == [] and len(stub.chat_requests) == 1
    assert [r["content"] for r in memory_rows(db_path, "kind = 'insight'")] == [
        "Priya wants to be listened to."
    ]
