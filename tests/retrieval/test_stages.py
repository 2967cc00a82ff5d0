"""Each retrieval stage has a fixture where only that stage finds or orders the answer.

Every test runs the same query twice, with the stage on and off, so it fails if the stage is
broken (or silently does nothing).
"""

from __future__ import annotations

import pytest

from memcli import Memory
from memcli.config import RetrievalSettings
from memcli.providers.splade import SpladeEncoder
from tests.support.records import turns

LEXICAL = {"lexical": 1.0}


def ranked(memory: Memory, text: str, **settings) -> list[str]:
    memory.retrieval = RetrievalSettings(**settings)
    return [h.text for h in memory.query(text, top_k=20, record_access=False).hits]


def test_neighbour_turn_holding_the_answer_is_pulled_in(memory):
    # The answer comes *before* the matching turn, so the contextual key (previous turn) of the
    # matching turn does not reach it: only neighbour propagation can.
    memory.ingest(turns("s1", [
        "Unrelated: the quarterly report is due Monday.",
        "Yes! We named her Pixel and she sleeps all day.",
        "Is that the greyhound you adopted?",
    ]) + turns("s2", ["Pixel is also the name of my phone."]))
    question = "did they adopt the greyhound"
    off = ranked(memory, question, leg_weights=LEXICAL, neighbour_weight=0, session_weight=0)
    on = ranked(memory, question, leg_weights=LEXICAL, neighbour_weight=0.5, session_weight=0)
    answer = "Yes! We named her Pixel and she sleeps all day."
    assert answer not in off  # no shared word: lexical alone cannot find it
    assert answer in on[:2]


def test_session_boost_prefers_the_session_of_the_strongest_match(memory):
    memory.ingest(
        turns("a", ["We planned the Lisbon trip in detail", "Flights are booked for May",
                    "filler one", "filler two"])
        + turns("b", ["A trip to the dentist", "flights of stairs everywhere"])
    )
    question = "Lisbon trip flights"
    off = ranked(memory, question, leg_weights=LEXICAL, neighbour_weight=0, session_weight=0)
    on = ranked(memory, question, leg_weights=LEXICAL, neighbour_weight=0, session_weight=2.0)
    # Without the boost the lone "flights" match of session b can outrank session a's.
    assert on.index("Flights are booked for May") < on.index("flights of stairs everywhere")
    assert on != off


def test_when_questions_prefer_turns_with_a_time_expression(memory):
    memory.ingest(turns("s1", [
        "The concert was amazing, the concert crowd loved the concert encore",
        "We went to the concert on 12 March 2024",
    ]))
    question = "when was the concert"
    base = {"leg_weights": LEXICAL, "neighbour_weight": 0, "session_weight": 0}
    off = ranked(memory, question, time_boost=1.0, **base)
    on = ranked(memory, question, time_boost=3.0, **base)
    assert off[0].startswith("The concert was amazing")
    assert on[0] == "We went to the concert on 12 March 2024"


# Ranking by what the words match only: no neighbours, session, recency or importance.
WORDS_ONLY = {"leg_weights": LEXICAL, "neighbour_weight": 0, "session_weight": 0, "beta": 0,
              "gamma": 0}


def _hiking_said_by(memory, first: str, second: str) -> None:
    """Two turns on hiking: the first (more matching words) by `first`, then one by `second`."""
    records = turns("s1", ["Maria asked if I love hiking: I love hiking, Maria!",
                           "I love hiking too, mostly hills"])
    records[0]["actor"] = {"type": "human", "id": first}
    records[1]["actor"] = {"type": "human", "id": second}
    memory.ingest(records)


def test_speaker_named_in_the_question_is_preferred(memory):
    _hiking_said_by(memory, "bob", "maria")
    question = "does maria love hiking"
    off = ranked(memory, question, speaker_boost=1.0, **WORDS_ONLY)
    on = ranked(memory, question, speaker_boost=5.0, **WORDS_ONLY)
    assert off[0].startswith("Maria asked")  # more matching words
    assert on[0] == "I love hiking too, mostly hills"  # said by the speaker the question names



@pytest.mark.backends
def test_a_speaker_is_named_by_any_word_of_a_two_word_name(memory):
    _hiking_said_by(memory, "Bob Stone", "Maria Lopez")
    memory.retrieval = RetrievalSettings(speaker_boost=5.0, **WORDS_ONLY)
    hits = {h.text: h for h in memory.query("does maria love hiking", top_k=5).hits}
    assert "speaker" in hits["I love hiking too, mostly hills"].boosts
    assert "speaker" not in hits["Maria asked if I love hiking: I love hiking, Maria!"].boosts


@pytest.mark.backends
def test_a_question_naming_a_date_prefers_turns_told_that_week(memory):
    records = (turns("s1", ["I baked bread with my sister in May"])
               + turns("s2", ["I baked bread this morning"]))
    records[0]["ts"] = "2023-03-02T10:00:00Z"  # months before the date the question names
    records[1]["ts"] = "2023-05-09T18:00:00Z"  # the day after it
    memory.ingest(records)
    question = "What did she bake on 8 May, 2023?"
    off = ranked(memory, question, date_boost=1.0, **WORDS_ONLY)
    on = ranked(memory, question, date_boost=4.0, **WORDS_ONLY)
    assert off[0] == "I baked bread with my sister in May"  # more matching words
    assert on[0] == "I baked bread this morning"
    memory.retrieval = RetrievalSettings(**WORDS_ONLY)  # on by default
    hits = {h.text: h for h in memory.query(question, top_k=5, record_access=False).hits}
    assert hits["I baked bread this morning"].boosts["date"] > 1.0
    assert "date" not in hits[off[0]].boosts


@pytest.mark.backends
def test_every_candidate_gains_from_a_neighbour_in_the_pool_not_only_the_top_ones(memory):
    memory.ingest(turns("s1", ["zebra zebra zebra stripes", "a quiet afternoon"])
                  + turns("s2", ["zebra crossing", "stripes on the road"]))
    # neighbour_pool=1: only the best match brings neighbours into the pool, but the second
    # match still lifts its own neighbour that the legs found.
    memory.retrieval = RetrievalSettings(leg_weights=LEXICAL, neighbour_pool=1,
                                         session_weight=0)
    hits = {h.text: h for h in memory.query("zebra stripes", top_k=10,
                                             record_access=False).hits}
    assert "neighbours" in hits["stripes on the road"].boosts  # linked to "zebra crossing"
    assert "neighbours" in hits["a quiet afternoon"].boosts  # pulled in by the best match

def test_contextual_key_finds_a_turn_by_its_previous_turn(memory):
    memory.ingest(turns("s1", ["What is your favourite board game?", "Definitely Catan."]))
    question = "favourite board game"
    hits = {h.text: h for h in memory.query(question, top_k=10).hits}
    # The answer shares no word with the question; its context column (the previous turn) does.
    assert "lexical" in hits["Definitely Catan."].scores
    memory.retrieval = RetrievalSettings(leg_weights=LEXICAL, neighbour_weight=0)
    from memcli.retrieval.text import lexical_query
    from memcli.store.search_sql import lexical

    with_ctx = dict(lexical(memory.db, lexical_query(question), memory.filters(), 10, 0.5))
    without = dict(lexical(memory.db, lexical_query(question), memory.filters(), 10, 0.0))
    answer_id = hits["Definitely Catan."].id
    assert answer_id in with_ctx
    assert with_ctx[answer_id] > without.get(answer_id, 0.0)


@pytest.mark.slow
def test_sparse_leg_matches_without_shared_words(db_path):
    with Memory.open(db_path, sparse=SpladeEncoder()) as memory:
        memory.ingest(turns("s1", ["Melanie adopted a puppy last spring",
                                   "The budget meeting ran long"]))
        memory.retrieval = RetrievalSettings(leg_weights={"sparse": 1.0}, neighbour_weight=0,
                                             session_weight=0)
        hits = memory.query("does Melanie have a dog", top_k=5).hits
        assert hits and hits[0].text == "Melanie adopted a puppy last spring"
        assert "sparse" in hits[0].scores
        memory.retrieval = RetrievalSettings(leg_weights=LEXICAL, neighbour_weight=0)
        lexical_only = memory.query("dog pet", top_k=5).hits
        assert lexical_only == []  # "puppy" is no lexical match for "dog": SPLADE expands it


def test_zscore_and_rrf_fusion_both_rank_and_differ_in_scores(memory):
    memory.ingest(turns("s1", ["alpha beta gamma", "alpha beta", "alpha", "delta"]))
    z = ranked(memory, "alpha beta gamma", fusion="zscore")
    r = ranked(memory, "alpha beta gamma", fusion="rrf")
    assert z[0] == r[0] == "alpha beta gamma"


def test_sparse_leg_query_plans_agree(memory):
    """The small-scope plan (score only in-scope postings) and the large-scope plan (score all,
    walk best first until `limit` pass the filters) must return the same hits in the same order."""
    import random

    from memcli.store import sparse as sparse_sql

    for user in ("u1", "u2", "u3"):
        memory.ingest(turns(f"s-{user}", [f"turn {i} of {user}" for i in range(30)], user=user))
    ids = [r[0] for r in memory.db.execute("SELECT id FROM memories ORDER BY id")]
    rng = random.Random(7)
    with memory.db.transaction():
        sparse_sql.insert_postings(memory.db, [
            (mid, {t: rng.uniform(0.1, 3.0) for t in rng.sample(range(40), 6)}) for mid in ids])
    query = {t: rng.uniform(0.5, 2.0) for t in range(0, 40, 3)}
    for scope in ({"user_id": "u2"}, {}, {"session_id": "s-u3"}):
        filters = memory.filters(**scope)
        for limit in (3, 10, 200):
            small = sparse_sql.search(memory.db, query, filters, limit, 10**6, small_scope=True)
            large = sparse_sql.search(memory.db, query, filters, limit, 10**6, small_scope=False)
            assert small and (limit > 3 or len(small) == 3)
            assert small == large, (scope, limit)
            assert [s for _, s in small] == sorted((s for _, s in small), reverse=True)


def test_entity_leg_query_plans_agree(memory):
    from memcli.store import search_sql as search

    names = ["Anika", "Priya", "Tomas", "Berlin", "Lisbon"]
    for user in ("u1", "u2", "u3"):
        memory.ingest(turns(f"s-{user}", [
            f"{names[i % 5]} met {names[(i * 3 + 1) % 5]} about item {i} for {user}"
            for i in range(25)], user=user))
    keys = ["anika", "lisbon", "tomas"]
    for scope in ({"user_id": "u2"}, {}, {"session_id": "s-u3"}):
        filters = memory.filters(**scope)
        for limit in (2, 7, 200):
            small = search.entity(memory.db, keys, filters, limit, small_scope=True)
            large = search.entity(memory.db, keys, filters, limit, small_scope=False)
            assert small and (limit > 2 or len(small) == 2)
            assert small == large, (scope, limit)


@pytest.mark.backends
def test_a_unique_exact_full_text_match_outranks_near_copies_the_other_legs_prefer(memory):
    # The dense leg's 200 candidates are all near-copies (the hash embedder sees the shared
    # word pieces), so it does not return the one memory holding the exact word; the
    # full-text leg returns that memory alone. Counted as the dense leg's last, with z = 1 for
    # a leg's only hit, it used to fall out of the top 20.
    copies = [f"agent {i % 7} heartbeat {i}: w16xdeploy queue" for i in range(260)]
    exact = ("Remember for the release checklist that the rollout of c16xdeploy needs the"
             " staging sign-off from the platform team before Friday")
    records = [r for n in range(0, 260, 52) for r in turns(f"copies-{n}", copies[n:n + 52])]
    memory.ingest(records + turns("notes", [exact]))
    result = memory.query("c16xdeploy", top_k=10, record_access=False)
    assert result.legs["lexical"] == 1 and result.legs["dense"] == 200
    assert exact in [h.text for h in result.hits[:3]]
