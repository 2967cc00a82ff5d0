"""Context bundles: budget, privacy, allowlists, delta header, determinism, relations, app mode,
views, request metrics. Real SQLite files, the real CLI, tiktoken counts."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from memcli import Memory
from memcli.acb.render import render_markdown
from memcli.config import AcbSettings
from memcli.core.tokens import count_tokens
from memcli.derived import writer as derive
from memcli.errors import NotAllowedError, UsageError
from memcli.ledger import entries as ledger
from memcli.providers.embedders import HashEmbedder
from tests.support.bundles import build_acb
from tests.support.records import ndjson, turns

pytestmark = pytest.mark.backends  # SQLite and PostgreSQL (tests/support/backend.py)


@pytest.fixture(autouse=True)
def without_sparse_leg(tmp_path, monkeypatch):
    """SPLADE runs a real model; bundles use whatever legs are configured, so CLI tests here
    turn it off (the library `memory` fixture has no sparse encoder either)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0, entity: 0.5, trigram: 0.5}\n"
    )
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))


def bundle_text(bundle: dict) -> str:
    return json.dumps(bundle, ensure_ascii=False)


def build(memory, **request):
    request.setdefault("track", False)
    return build_acb(memory, request)


def section(bundle: dict, name: str) -> dict:
    return next(s for s in bundle["sections"] if s["name"] == name)


def metric_rows(memory) -> list[dict]:
    return memory.db.query("SELECT * FROM request_metrics ORDER BY id")


# -- the budget -------------------------------------------------------------------------------
WORDS = st.sampled_from(
    "tea lisbon storage sqlite deploy anika march plan budget release "
    "migration review 上海 出差 ✓ x".split()
)
PROSE = st.lists(WORDS, min_size=1, max_size=120).map(" ".join)
# Any text at all (control characters, combining marks, CR, trailing spaces, blank lines): the
# block's count must still be the sum of its parts' counts.
ODD = st.text(min_size=1, max_size=300).filter(lambda t: t.strip())
TEXTS = st.one_of(PROSE, PROSE, ODD)


# No shrink phase: an example costs ~0.1 s (a fresh database each), and shrinking one took
# minutes; the failing example is still printed whole.
@settings(
    max_examples=30,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    turn_texts=st.lists(TEXTS, min_size=0, max_size=14),
    sensitivities=st.lists(st.sampled_from(["none", "low", "high"]), min_size=14, max_size=14),
    decisions=st.lists(TEXTS, max_size=3),
    tasks=st.lists(TEXTS, max_size=3),
    rules_words=st.integers(min_value=0, max_value=3000),
    max_tokens=st.integers(min_value=1, max_value=4000),
    caps=st.dictionaries(
        st.sampled_from(
            [
                "identity",
                "rules",
                "task_state",
                "decision_ledger",
                "retrieved_evidence",
                "recent_window",
            ]
        ),
        st.integers(min_value=0, max_value=2000),
        max_size=3,
    ),
    channel=st.sampled_from(["private", "public", "team", "agent"]),
    query=st.one_of(st.none(), TEXTS),
    encoding=st.sampled_from(["cl100k_base", "o200k_base"]),
)
def test_the_budget_is_never_exceeded(
    turn_texts,
    sensitivities,
    decisions,
    tasks,
    rules_words,
    max_tokens,
    caps,
    channel,
    query,
    encoding,
):
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp) / "context"
        context.mkdir()
        (context / "rules.md").write_text(" ".join(["rule"] * rules_words) + " end")
        # In-memory SQLite: the property is about packing, and a file costs an fsync each.
        memory = Memory(Memory.open(":memory:").db, encoding=encoding)
        records = turns("s1", turn_texts)
        for rec, sens in zip(records, sensitivities, strict=False):
            rec["sensitivity"] = sens
        if records:
            memory.ingest(records)
        for text in decisions:
            ledger.add_decision(memory, text, user_id="u1")
        for text in tasks:
            ledger.add_task(memory, text, user_id="u1")
        bundle = build_acb(
            memory,
            {
                "user_id": "u1",
                "session_id": "s1",
                "query_text": query,
                "max_tokens": max_tokens,
                "caps": caps,
                "channel": channel,
            },
            context_dir=context,
        )
        rendered = render_markdown(bundle)
        assert bundle["token_used"] <= max_tokens
        assert bundle["token_used"] == (count_tokens(rendered, encoding) if rendered else 0)
        for sec in bundle["sections"]:
            assert sec["tokens"] <= sec["cap"]
            assert sec["tokens"] <= max_tokens
            for item in sec["items"]:
                assert item["tokens"] == count_tokens(item_line(item), encoding)
        assert sum(s["tokens"] for s in bundle["sections"]) <= max_tokens - bundle["reserve_tokens"]
        memory.close()


def item_line(item):
    from memcli.acb.render import item_line as line

    return line(item)


def test_default_budget_and_caps(memory):
    bundle = build(memory)
    assert bundle["budget_tokens"] == 65000 and bundle["reserve_tokens"] == 8800
    caps = {s["name"]: s["cap"] for s in bundle["sections"]}
    assert caps == {
        "identity": 1200,
        "rules": 6000,
        "profile": 2000,
        "reflection": 800,
        "task_state": 3000,
        "decision_ledger": 4000,
        "handoff_packet": 6000,
        "retrieved_evidence": 25200,
        "recent_window": 8000,
    }
    assert [s["name"] for s in bundle["sections"]][-1] == "recent_window"


def test_sections_fill_by_priority_and_report_what_was_cut(memory):
    memory.ingest(turns("s1", [f"turn number {i} about the lisbon plan " * 5 for i in range(30)]))
    big = build(memory, session_id="s1", user_id="u1")
    small = build(memory, session_id="s1", user_id="u1", max_tokens=600)
    assert section(big, "recent_window")["items"]
    # Priority: identity (10) is whole before the recent window (5) gets anything.
    assert section(small, "identity")["items"] and not section(small, "identity")["items"][0].get(
        "truncated"
    )
    assert len(section(small, "recent_window")["items"]) < len(
        section(big, "recent_window")["items"]
    )
    cut = [o for o in small["omissions"] if o["section"] == "recent_window"]
    assert cut and cut[0]["reason"] == "budget" and cut[0]["refs"][0].startswith("mem:")
    # The newest turns are the ones kept, shown oldest first.
    kept = [i["memory_id"] for i in section(small, "recent_window")["items"]]
    assert kept == sorted(kept) and kept[-1] == max(
        i["memory_id"] for i in section(big, "recent_window")["items"]
    )
    capped = build(memory, session_id="s1", user_id="u1", caps={"recent_window": 100})
    assert 0 < section(capped, "recent_window")["tokens"] <= 100
    assert any(o["reason"] == "section_cap" for o in capped["omissions"])


def test_the_last_turn_is_packed_before_evidence_at_every_budget(memory):
    """The turn being answered is the floor: a small budget goes to evidence only after it."""
    memory.ingest(turns("old", [f"The Lisbon trip plan, note {i}: book the hotel near the river"
                                for i in range(8)]))
    memory.ingest(turns("s2", ["Which hotel did we pick for the Lisbon trip in the end?"]))
    last = memory.db.scalar("SELECT id FROM memories WHERE session_id = 's2'")
    for budget in (400, 600, 2000):
        bundle = build(memory, user_id="u1", session_id="s2", query="Lisbon trip hotel",
                       max_tokens=budget)
        recent = section(bundle, "recent_window")["items"]
        assert [i["memory_id"] for i in recent] == [last], budget
        assert bundle["token_used"] <= budget
    # The priorities decide the rest: evidence still fills what is left.
    small = build(memory, user_id="u1", session_id="s2", query="Lisbon trip hotel",
                  max_tokens=600)
    assert section(small, "retrieved_evidence")["items"]
    assert not [o for o in small["omissions"] if o["section"] == "recent_window"]
    # A budget that cannot hold even the floor says so.
    tiny = build(memory, user_id="u1", session_id="s2", query="Lisbon trip hotel", max_tokens=40)
    assert not section(tiny, "recent_window")["items"]
    assert {"section": "recent_window", "reason": "budget"}.items() <= next(
        o for o in tiny["omissions"] if o["section"] == "recent_window").items()
    assert f"mem:{last}" in next(
        o for o in tiny["omissions"] if o["section"] == "recent_window")["refs"]


def test_oversized_rules_file_is_truncated_to_its_cap(memory, tmp_path):
    (tmp_path / "rules.md").write_text("Always be kind. " * 5000)
    bundle = build_acb(memory, {"track": False}, context_dir=tmp_path)
    rules = section(bundle, "rules")
    assert rules["items"][0]["truncated"] and 5900 < rules["tokens"] <= 6000
    assert {"section": "rules", "reason": "truncated"}.items() <= next(
        o for o in bundle["omissions"] if o["section"] == "rules"
    ).items()
    assert bundle["provenance"]["views"]["rules"] == str(tmp_path / "rules.md")


# -- privacy ----------------------------------------------------------------------------------
@pytest.fixture
def private_world(memory):
    recs = turns(
        "s1",
        [
            "lisbon note zebra-none",
            "lisbon note zebra-low",
            "lisbon note zebra-high",
            "lisbon note zebra-secret",
        ],
    )
    for rec, sens in zip(recs, ["none", "low", "high", "secret"], strict=True):
        rec["sensitivity"] = sens
    memory.ingest(recs)
    ledger.add_decision(
        memory, "lisbon decision zebra-highdecision", user_id="u1", sensitivity="high"
    )
    ledger.add_task(memory, "lisbon task zebra-hightask", user_id="u1", sensitivity="high")
    return memory


@pytest.mark.parametrize("channel", ["public", "agent"])
def test_public_and_agent_channels_never_see_high_or_secret(private_world, channel):
    build(private_world, session_id="s1", user_id="u1", query_text="lisbon zebra", since=0)
    bundle = build(
        private_world,
        session_id="s1",
        user_id="u1",
        query_text="lisbon zebra",
        channel=channel,
        since=0,
    )
    text = bundle_text(bundle) + render_markdown(bundle)
    assert "zebra-none" in text and "zebra-low" in text
    assert "zebra-high" not in text  # turns, decisions, tasks, delta bullets alike
    assert "zebra-secret" not in text
    assert bundle["provenance"]["filters"]["sensitivity_allowed"] == ["none", "low"]


@pytest.mark.parametrize("channel", ["private", "team"])
def test_private_and_team_channels_load_high_but_never_secret(private_world, channel):
    bundle = build(
        private_world, session_id="s1", user_id="u1", query_text="lisbon zebra", channel=channel
    )
    text = bundle_text(bundle)
    assert "zebra-high" in text and "zebra-highdecision" in text and "zebra-hightask" in text
    assert "zebra-secret" not in text


def test_related_bullets_obey_the_channel(tmp_path):
    with Memory.open(tmp_path / "m.db", embedder=HashEmbedder(64)) as writer:
        low = derive.write_memory(
            writer,
            content="Priya drinks green tea every morning",
            kind="fact",
            source_ids=[],
            user_id="u1",
            sensitivity="low",
        )
        high = derive.write_memory(
            writer,
            content="Priya drinks green tea every morning daily",
            kind="fact",
            source_ids=[],
            user_id="u1",
            sensitivity="high",
        )
        assert (
            writer.db.query("SELECT count(*) AS n FROM relations WHERE kind = 'related'")[0]["n"]
            == 1
        )
        # A narrow query that finds only the first by its exact words (no dense leg).
        derive.write_memory(
            writer, content="unrelated memo about trains", kind="fact", source_ids=[], user_id="u1"
        )
    with Memory.open(tmp_path / "m.db") as reader:
        reader.retrieval.leg_weights = {"lexical": 1.0}
        reader.db.execute("DELETE FROM memories_fts WHERE rowid = ?", (high,))
        private = build(reader, user_id="u1", query_text="morning")
        public = build(reader, user_id="u1", query_text="morning", channel="public")
    item = section(private, "retrieved_evidence")["items"][0]
    assert item["memory_id"] == low and item["related"][0]["id"] == high
    assert "↳ related" in item["text"]
    pub_item = section(public, "retrieved_evidence")["items"][0]
    assert "related" not in pub_item and "daily" not in bundle_text(public)


# -- allowlists -------------------------------------------------------------------------------
def test_a_disallowed_category_is_refused_and_recorded(memory):
    with pytest.raises(NotAllowedError):
        build_acb(memory, {"agent_id": "planner", "categories": ["event"], "query": "x"})
    row = metric_rows(memory)[-1]
    assert row["command"] == "acb" and row["error_stage"] == "filters"


def test_the_allowlist_applies_to_every_section(memory):
    memory.ingest(turns("s1", ["lisbon turn one", "lisbon turn two"]))
    ledger.add_decision(memory, "lisbon decision", user_id="u1")
    ledger.add_task(memory, "lisbon task", user_id="u1")
    planner = build(memory, agent_id="planner", session_id="s1", user_id="u1", query_text="lisbon")
    stylist = build(memory, agent_id="stylist", session_id="s1", user_id="u1", query_text="lisbon")
    assert section(planner, "decision_ledger")["items"] and section(planner, "task_state")["items"]
    assert not section(planner, "recent_window")["items"]  # planner may not read `event`
    assert not section(planner, "retrieved_evidence")["items"]
    assert all(
        not s["items"] for s in stylist["sections"] if s["name"] not in ("identity", "rules")
    )


def test_cli_disallowed_category_exits_2(cli, db_path):
    Memory.open(db_path).close()  # a database to read (a missing one is exit 1)
    result = cli("acb", "build", "--agent-id", "planner", "--categories", "event", "-q", "x")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("memcli: error: agent 'planner' may not read category event")


# -- delta header -----------------------------------------------------------------------------
def test_delta_header_only_when_something_changed(memory):
    memory.ingest(turns("s1", ["hello there"]))
    req = {"user_id": "u1", "session_id": "s1", "agent_id": "supervisor"}
    first = build_acb(memory, req)
    assert first["delta"] is None  # no base yet: the bundle is the full picture
    assert build_acb(memory, req)["delta"] is None  # nothing changed
    memory.ingest(turns("s1", ["new turn", "another turn"])[1:])
    assert build_acb(memory, req)["delta"] is None  # raw turns are in the recent window
    d = ledger.add_decision(memory, "Use SQLite", user_id="u1", session_id="s1")
    bundle = build_acb(memory, req)
    assert bundle["delta"]["bullets"] == [
        f"+created: [decisions] Decision: Use SQLite (#{d['memory_id']})"
    ]
    assert render_markdown(bundle).split("\n")[1].startswith("Memory updates since rev ")
    assert build_acb(memory, req)["delta"] is None
    # Another caller has its own base.
    assert build_acb(memory, {**req, "agent_id": "planner"})["delta"] is None


def test_delta_header_has_at_most_three_bullets(memory):
    memory.ingest(turns("s1", ["hello there"]))
    req = {"user_id": "u1", "session_id": "s1"}
    build_acb(memory, req)
    t = ledger.add_task(memory, "first task", user_id="u1", session_id="s1")
    for i in range(4):
        ledger.add_decision(memory, f"decision {i}", user_id="u1", session_id="s1")
    ledger.update_task(memory, t["id"], status="doing")
    episode = memory.db.scalar("SELECT id FROM memories WHERE kind = 'episode'")
    memory.forget(episode)
    delta = build_acb(memory, req)["delta"]
    assert len(delta["bullets"]) == 3
    assert delta["bullets"][0] == f"-deleted: [event] #{episode}"  # no text once forgotten
    assert delta["bullets"][1].startswith("↑updated: [tasks] Task [doing]: first task")
    assert delta["bullets"][2] == "… and 4 more (4 created)"
    assert delta["changes"] == 6  # the first task version, created then superseded, is not one


def test_delta_since_is_explicit_and_restore_shows(memory):
    memory.ingest(turns("s1", ["hello there"]))
    episode = memory.db.scalar("SELECT id FROM memories")
    memory.forget(episode)
    memory.restore(episode)
    bundle = build(memory, user_id="u1", session_id="s1", since=1)
    assert bundle["delta"]["bullets"] == [f"↺restored: [event] hello there (#{episode})"]
    assert bundle["delta"]["since"] == {"default/u1/s1": 1}
    assert bundle["revision"]["default/u1/s1"] == 3


def test_revision_increments_atomically_on_every_write(memory):
    key = "default/u1/s1"

    def rev() -> int:
        return int(
            memory.db.scalar("SELECT revision FROM threads WHERE thread_key = ?", (key,)) or 0
        )

    memory.ingest(turns("s1", ["a", "b", "c"]))
    assert rev() == 1  # one batch, one revision
    ledger.add_decision(memory, "x", user_id="u1", session_id="s1")
    assert rev() == 2
    with pytest.raises(UsageError):
        ledger.add_decision(memory, "   ", user_id="u1", session_id="s1")
    assert rev() == 2


# -- determinism ------------------------------------------------------------------------------
def test_two_builds_are_identical(memory):
    memory.ingest(
        turns(
            "s1",
            ["I moved to Lisbon in March", "Anika visits on 21 March", "we use SQLite for storage"],
        )
    )
    ledger.add_decision(memory, "Use SQLite", user_id="u1")
    req = {
        "user_id": "u1",
        "session_id": "s1",
        "query_text": "when does Anika visit?",
        "agent_id": "supervisor",
    }
    build_acb(memory, req)  # sets the caller's base
    one, two = build_acb(memory, req), build_acb(memory, req)
    assert json.dumps(one, sort_keys=False) == json.dumps(two, sort_keys=False)
    assert section(one, "retrieved_evidence")["items"] or section(one, "recent_window")["items"]
    other = build_acb(memory, {**req, "query_text": "storage"})
    assert other["acb_id"] != one["acb_id"]


def test_two_cli_builds_are_byte_identical(cli):
    cli("ingest", "-", input=ndjson(turns("s1", ["I moved to Lisbon", "Anika visits"])))
    args = ("acb", "build", "--user", "u1", "--session", "s1", "-q", "Lisbon", "--no-track")
    for fmt in ("json", "markdown"):
        a, b = cli(*args, "-f", fmt), cli(*args, "-f", fmt)
        assert a.exit_code == 0 and a.stdout == b.stdout and a.stdout


def test_markdown_output_is_the_counted_prompt_block(cli):
    cli("ingest", "-", input=ndjson(turns("s1", ["I moved to Lisbon", "Anika visits"])))
    args = ("acb", "build", "--user", "u1", "--session", "s1", "--no-track")
    bundle = json.loads(cli(*args, "--json").stdout)
    markdown = cli(*args, "--format", "markdown").stdout
    assert markdown.startswith(f"# Context bundle {bundle['acb_id']}\n")
    assert count_tokens(markdown) == bundle["token_used"]
    assert "## recent_window\n- [2025-01-01T10:00] human: I moved to Lisbon\n" in markdown


def test_stdin_request_and_flags_override(cli):
    cli("ingest", "-", input=ndjson(turns("s1", ["I moved to Lisbon"])))
    request = {
        "user": "u1",
        "session_id": "s1",
        "max_tokens": 5000,
        "intent": "chat",
        "track": False,
    }
    result = cli("acb", "build", "-", "--max-tokens", "4000", "--json", input=json.dumps(request))
    bundle = json.loads(result.stdout)
    assert bundle["budget_tokens"] == 4000 and bundle["provenance"]["intent"] == "chat"
    bad = cli("acb", "build", "-", input='{"max_tokens": 10, "colour": "red"}')
    assert bad.exit_code == 2 and "colour" in bad.stderr
    assert cli("acb", "build", "--cap", "nosuch=5").exit_code == 2


# -- retrieval, relations, app mode -----------------------------------------------------------
def test_evidence_uses_retrieval_and_does_not_repeat_recent_turns(memory):
    memory.ingest(turns("old", ["Priya is vegetarian and loves lentils"], user="u1"))
    memory.ingest(turns("s1", [f"small talk {i}" for i in range(5)], user="u1"))
    bundle = build(memory, user_id="u1", session_id="s1", query_text="is Priya vegetarian?")
    evidence = section(bundle, "retrieved_evidence")["items"]
    recent = {i["memory_id"] for i in section(bundle, "recent_window")["items"]}
    assert "vegetarian" in evidence[0]["text"] and evidence[0]["score"] > 0
    assert not recent & {i["memory_id"] for i in evidence}
    prov = bundle["provenance"]
    assert prov["retrieval_path"] == "session>user"  # the session alone had < 3 hits
    assert prov["query_terms"] == ["priya", "vegetarian"]
    assert 0 < prov["scored"] <= 200 and prov["candidate_pool_size"] <= 2000
    assert prov["deduped"] >= 1
    assert set(prov["weights"]) >= {"alpha", "beta", "gamma", "w_rel", "legs"}


def test_a_session_with_more_than_the_recent_window_is_searched_first(memory):
    memory.ingest(turns("other", ["lisbon elsewhere"], user="u1"))
    memory.ingest(turns("s1", [f"lisbon plan step {i}" for i in range(6)], user="u1"))
    settings = AcbSettings(recent_turns=2)
    bundle = build_acb(
        memory,
        {"user_id": "u1", "session_id": "s1", "query_text": "lisbon plan", "track": False},
        settings=settings,
    )
    assert bundle["provenance"]["retrieval_path"] == "session"
    evidence = [i["text"] for i in section(bundle, "retrieved_evidence")["items"]]
    assert len(evidence) == 4 and not any("elsewhere" in t for t in evidence)
    assert not any("step 4" in t or "step 5" in t for t in evidence)  # in the recent window
    cue = build_acb(
        memory,
        {
            "user_id": "u1",
            "session_id": "s1",
            "query_text": "lisbon plan we had before",
            "track": False,
        },
        settings=settings,
    )
    assert cue["provenance"]["retrieval_path"] == "session>user"
    assert any("elsewhere" in i["text"] for i in section(cue, "retrieved_evidence")["items"])


def test_related_edges_boost_and_list(memory, cli):
    a = derive.write_memory(
        memory,
        content="Priya drinks green tea every morning",
        kind="fact",
        source_ids=[],
        user_id="u1",
    )
    b = derive.write_memory(
        memory,
        content="Priya drinks green tea every morning daily",
        kind="fact",
        source_ids=[],
        user_id="u1",
    )
    derive.link_related(
        memory,
        b,
        memory.embedder.embed_documents(
            [memory.db.scalar("SELECT content FROM memories WHERE id = ?", (b,))]
        )[0].tobytes(),
        "default",
        "u1",
    )  # linking again must not duplicate the edge
    edges = memory.db.query("SELECT * FROM relations")
    assert len(edges) == 1 and edges[0]["strength"] >= derive.LINK_MIN
    bundle = build(memory, user_id="u1", query_text="green tea")
    items = {i["memory_id"]: i for i in section(bundle, "retrieved_evidence")["items"]}
    boost = round(0.05 * edges[0]["strength"], 6)
    assert items[a]["boosts"]["related"] == boost and items[b]["boosts"]["related"] == boost
    unboosted = build_acb(
        memory,
        {"user_id": "u1", "query_text": "green tea", "track": False},
        settings=AcbSettings(w_rel=0),
    )
    plain = {i["memory_id"]: i for i in section(unboosted, "retrieved_evidence")["items"]}
    assert "related" not in plain[a]["boosts"]
    assert items[a]["score"] == pytest.approx(plain[a]["score"] + boost, abs=1e-5)
    listed = json.loads(cli("related", str(a), "--json").stdout)
    assert [(r["other_id"], r["kind"]) for r in listed] == [(b, "related")]
    assert cli("related", "999").exit_code == 1
    assert json.loads(cli("related", str(a), "--kind", "supersedes", "--json").stdout) == []


def test_app_mode_shows_only_that_apps_memories(memory):
    for i in range(12):
        derive.write_memory(
            memory,
            content=f"alpha app note {i} about invoices",
            kind="fact",
            source_ids=[],
            app_id="alpha",
            user_id="u1",
            link=False,
        )
    derive.write_memory(
        memory,
        content="bravo app note about invoices",
        kind="fact",
        source_ids=[],
        app_id="bravo",
        user_id="u1",
    )
    memory.ingest(turns("s1", ["bravo conversation about invoices"], app_id="bravo"))
    bundle = build(memory, user_id="u1", app_id="alpha", query_text="invoices")
    block = section(bundle, "app_memories")["items"]
    assert len(block) == 10  # at most N per app, newest first
    assert block[0]["text"].startswith("1. [Created: ") and "note 11" in block[0]["text"]
    text = bundle_text(bundle)
    assert "bravo" not in text
    markdown = render_markdown(bundle)
    assert "(memories for app: alpha)\nThe following are memories from previous" in markdown
    assert not any(s["name"] == "app_memories" for s in build(memory)["sections"])


def test_truncated_tool_output_is_reported(memory):
    big = "\n".join(f"line {i} of the build log" for i in range(4000))
    memory.ingest(
        [
            {
                "event_id": "t1",
                "session_id": "s1",
                "user_id": "u1",
                "kind": "tool_result",
                "ts": "2025-01-01T10:00:00Z",
                "content": {"tool": "make", "output": big},
            }
        ]
    )
    bundle = build(memory, session_id="s1", user_id="u1")
    tool = [o for o in bundle["omissions"] if o["reason"] == "truncated_tool_output"]
    assert tool and tool[0]["artifact_id"].startswith("art_")
    assert tool[0]["refs"] == ["event:t1"]


def test_handoff_packet_and_checkpoint(memory):
    ledger.save_checkpoint(memory, {"step": 3, "plan": "ship"}, user_id="u1", thread_id="s1")
    bundle = build(
        memory,
        user_id="u1",
        session_id="s1",
        handoff="planner hands over: ship it",
        include_checkpoint=True,
    )
    items = section(bundle, "handoff_packet")["items"]
    assert items[0]["text"] == "planner hands over: ship it"
    assert items[1]["text"].endswith('{"plan": "ship", "step": 3}')
    ledger.save_checkpoint(
        memory, {"secret_plan": 1}, user_id="u1", thread_id="s1", sensitivity="high"
    )
    public = build(memory, user_id="u1", session_id="s1", include_checkpoint=True, channel="public")
    assert not section(public, "handoff_packet")["items"]


# -- views ------------------------------------------------------------------------------------
def test_views_show_and_edit(cli, isolated_env, monkeypatch, tmp_path, db_path):
    Memory.open(db_path).close()  # a database to build from (a missing one is exit 1)
    shown = cli("acb", "show", "rules", "-f", "text")
    assert shown.exit_code == 0 and "decision ledger" in shown.stdout
    edited = cli("acb", "edit", "rules", "--no-editor")
    path = Path(edited.stdout.strip())
    assert path == isolated_env / "config" / "memcli" / "rules.md"
    assert path.read_text() == shown.stdout
    editor = tmp_path / "editor.py"
    editor.write_text("import sys\nopen(sys.argv[1], 'a').write('- Answer in French.\\n')\n")
    monkeypatch.setenv("EDITOR", f"{sys.executable} {editor}")
    assert cli("acb", "edit", "rules").exit_code == 0
    bundle = json.loads(cli("acb", "build", "--json").stdout)
    assert section(bundle, "rules")["items"][0]["text"].endswith("- Answer in French.")
    assert bundle["provenance"]["views"]["rules"] == str(path)
    (path.parent / "identity.yaml").write_text("name: Ada\nrole: release manager\n")
    assert json.loads(cli("acb", "show", "identity", "--json").stdout)["text"].startswith(
        "name: Ada"
    )


# -- request metrics --------------------------------------------------------------------------
def test_every_build_appends_a_metrics_row(memory):
    memory.ingest(turns("s1", ["I moved to Lisbon", "Lisbon is sunny", "Lisbon trams"]))
    fast = build(memory, session_id="s1", user_id="u1")
    slow = build(memory, session_id="s1", user_id="u1", query_text="Lisbon", max_tokens=200)
    rows = metric_rows(memory)
    # Every session turn is in the recent window, so the search widened to the user.
    assert [(r["retrieval_path"], r["fallbacks"]) for r in rows] == [
        ("none", 0),
        ("session>user", 1),
    ]
    assert rows[0]["items"] == sum(len(s["items"]) for s in fast["sections"])
    assert rows[1]["tokens_used"] == slow["token_used"] and rows[1]["truncated"] == 1
    assert rows[1]["lexical_hits"] == 3 and rows[1]["vector_hits"] == 3
    assert all(r["error_stage"] is None and r["latency_ms"] > 0 for r in rows)
    access = memory.db.scalar("SELECT sum(access_count) FROM memories")
    assert access >= 3


def test_a_failing_stage_is_recorded(memory):
    class BrokenEmbedder(HashEmbedder):
        def embed_query(self, text):
            raise RuntimeError("model server is down")

    memory.ingest(turns("s1", ["I moved to Lisbon"]))
    broken = Memory(memory.db, embedder=BrokenEmbedder(64))
    with pytest.raises(RuntimeError, match="model server is down"):
        build_acb(broken, {"user_id": "u1", "session_id": "s1", "query_text": "Lisbon"})
    with pytest.raises(UsageError):  # a valid model the build refuses: no such section
        build_acb(memory, {"caps": {"nosuch": 5}})
    stages = [(r["command"], r["error_stage"]) for r in metric_rows(memory)]
    assert stages == [("acb", "retrieval"), ("acb", "request")]


def test_stats_requests_window(cli):
    cli("ingest", "-", input=ndjson(turns("s1", ["I moved to Lisbon"])))
    cli("query", "Lisbon", "--user", "u1")
    cli("acb", "build", "--user", "u1", "--session", "s1", "-q", "Lisbon")
    cli("acb", "build", "--user", "u1", "--session", "s1")
    cli("acb", "build", "--agent", "planner", "--category", "event")
    out = json.loads(cli("stats", "--requests", "--since", "1h", "--json").stdout)
    assert out["requests"] == 4 and out["errors"] == {"filters": 1}
    acb = out["by_command"]["acb"]
    assert acb["requests"] == 3 and acb["retrieval_requests"] == 1
    # The hit rate is the full-text one (at least 3 full-text hits): one turn is not enough,
    # though the full-text legs found it.
    assert acb["hit_rate"] == 0.0 and acb["leg_hit_rates"]["fulltext"] == 1.0
    # The one-turn session is thin: the retrieval widened to the user.
    assert acb["fallback_share"] == round(1 / 3, 4) and acb["latency_ms"]["p50"] > 0
    assert out["by_command"]["query"]["requests"] == 1
    future = json.loads(cli("stats", "--requests", "--since", "2999-01-01", "--json").stdout)
    assert future["requests"] == 0 and future["latency_ms"]["p95"] is None
    assert cli("stats", "--requests", "--since", "yesterday").exit_code == 2
    assert cli("stats", "--since", "1h").exit_code == 2


def test_config_overrides_one_cap_and_keeps_the_rest(tmp_path, monkeypatch, cli, db_path):
    Memory.open(db_path).close()  # a database to build from (a missing one is exit 1)
    config = tmp_path / "config.yaml"
    config.write_text(
        "retrieval:\n  leg_weights: {lexical: 1.0}\n"
        "acb:\n  reserve: 0\n  sections: {rules: {cap: 50}}\n"
    )
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    bundle = json.loads(cli("acb", "build", "--json").stdout)
    assert section(bundle, "rules")["cap"] == 50 and section(bundle, "rules")["priority"] == 9
    assert section(bundle, "identity")["cap"] == 1200 and bundle["reserve_tokens"] == 0
    assert AcbSettings(sections={"rules": 10}).sections["recent_window"].cap == 8000
