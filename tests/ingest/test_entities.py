"""Tests for memcli.entities: each entity kind with its norm, the name heuristics, query keys, and
a hypothesis check that extraction never raises on any text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcli.entities.extraction import Entity, extract_entities, query_entity_keys


def kinds(text: str, kind: str) -> list[tuple[str, str]]:
    """(value, norm) of the entities of one kind."""
    return [(e.value, e.norm) for e in extract_entities(text) if e.kind == kind]


def test_mentions_and_tags() -> None:
    text = "ping @Alice and @bob_smith about #Project-X, not #42, #fff or C# or x#y."
    assert kinds(text, "mention") == [("@Alice", "alice"), ("@bob_smith", "bob_smith")]
    assert kinds(text, "tag") == [("#Project-X", "project-x")]


def test_emails_are_not_mentions() -> None:
    text = "Write to Bob.Smith@Example.COM (or bob.smith@example.com)."
    assert kinds(text, "email") == [("Bob.Smith@Example.COM", "bob.smith@example.com")]
    assert kinds(text, "mention") == []


def test_urls_trim_punctuation_and_normalise() -> None:
    text = (
        "Docs: https://Example.com/Docs/ (see https://en.wikipedia.org/wiki/Python_(language)). "
        "Also www.python.org."
    )
    assert kinds(text, "url") == [
        ("https://Example.com/Docs/", "https://example.com/docs"),
        (
            "https://en.wikipedia.org/wiki/Python_(language)",
            "https://en.wikipedia.org/wiki/python_(language)",
        ),
        ("www.python.org", "www.python.org"),
    ]
    # Nothing inside a URL becomes a name, tag or mention.
    assert {e.kind for e in extract_entities("see https://github.com/Org/Repo#Readme?u=@me")} == {
        "url"
    }


@pytest.mark.parametrize(
    ("text", "value", "norm"),
    [
        ("released 2024-05-08 at noon", "2024-05-08", "2024-05-08"),
        ("at 2024-05-08T10:00:00Z", "2024-05-08", "2024-05-08"),
        ("on 2023/05/08 we", "2023/05/08", "2023-05-08"),
        ("1:56 pm on 8 May, 2023", "8 May, 2023", "2023-05-08"),
        ("the 8th of May 2023 was", "8th of May 2023", "2023-05-08"),
        ("on May 8, 2023 we", "May 8, 2023", "2023-05-08"),
        ("on Sept. 21st, 2022", "Sept. 21st, 2022", "2022-09-21"),
        ("since May 2023", "May 2023", "2023-05"),
        ("in Dec 2019 there", "Dec 2019", "2019-12"),
    ],
)
def test_dates(text: str, value: str, norm: str) -> None:
    assert kinds(text, "date") == [(value, norm)]


@pytest.mark.parametrize(
    "text",
    [
        "See you Monday or next Friday.",
        "It may 2023 be, who knows",  # lower-case "may" is the verb
        "invalid 2023-02-30 and 2023-13-01",
        "uuid 123e4567-e89b-12d3-a456-426614174000",
        "version 1.2.3 and 10 May",  # no year: nothing to normalise to
    ],
)
def test_not_dates(text: str) -> None:
    assert kinds(text, "date") == []


def test_names_skip_sentence_starts_and_stopwords() -> None:
    text = (
        "Yesterday I met Caroline Smith in Paris. The weather was nice. "
        "Then Melanie's dog barked at Dr. Jones on Monday in May."
    )
    assert kinds(text, "name") == [
        ("Caroline Smith", "caroline smith"),
        ("Paris", "paris"),
        ("Melanie", "melanie"),
        ("Jones", "jones"),
    ]


def test_single_capitalised_word_at_sentence_start_is_not_a_name() -> None:
    assert kinds("Painting is fun. Gardening too!", "name") == []
    # ...unless the same text also uses it mid-sentence.
    assert kinds("Alice went home. Later I called Alice.", "name") == [("Alice", "alice")]


def test_speaker_labels_and_greetings() -> None:
    text = "Caroline: Hey Mel! Thanks, Bob.\nUser: hi\nNote: done"
    assert kinds(text, "name") == [("Caroline", "caroline"), ("Mel", "mel"), ("Bob", "bob")]


def test_multiword_names_titles_and_limits() -> None:
    text = "I read The Lord of the Rings and Game of Thrones with Ludwig van Beethoven playing."
    assert [v for v, _ in kinds(text, "name")] == [
        "Lord of the Rings",
        "Game of Thrones",
        "Ludwig van Beethoven",
    ]
    # Four capitalised words in a row are a Title Case heading, not a name.
    assert kinds("notes on Annual General Meeting Minutes today", "name") == []
    # A comma or newline separates names.
    assert [v for v, _ in kinds("with Alice, Bob\nCarol Jones", "name")] == [
        "Alice",
        "Bob",
        "Carol Jones",
    ]


def test_acronyms_contractions_and_cjk_are_not_names() -> None:
    assert kinds("we use JSON and SQL. I'm sure it's OK, Don't worry.", "name") == []
    assert kinds("我在东京见到了田中。東京タワー", "name") == []
    assert kinds("我喜欢 Tokyo 的食物。", "name") == [("Tokyo", "tokyo")]


def test_dedupe_and_order_of_first_appearance() -> None:
    text = "@alice met Bob on 2024-05-08; later @Alice and Bob met again on May 8, 2024. #x #X"
    assert extract_entities(text) == [
        Entity("mention", "@alice", "alice"),
        Entity("name", "Bob", "bob"),
        Entity("date", "2024-05-08", "2024-05-08"),
        Entity("tag", "#x", "x"),
    ]


def test_same_norm_across_kinds_is_kept_per_kind() -> None:
    entities = extract_entities("ask @alice, or just Alice")
    assert [(e.kind, e.norm) for e in entities] == [("mention", "alice"), ("name", "alice")]


@pytest.mark.parametrize(
    ("query", "keys"),
    [
        ("What did Melanie paint?", ["melanie"]),
        ("Melanie painted what?", ["melanie"]),
        ("When did Caroline Smith visit Paris?", ["caroline smith", "caroline", "smith", "paris"]),
        ("what did @bob say about #launch?", ["bob", "launch"]),
        ("mail from Bob@Example.com on 8 May 2023", ["bob@example.com", "2023-05-08"]),
        ("what did melanie paint", []),
        ("", []),
    ],
)
def test_query_entity_keys(query: str, keys: list[str]) -> None:
    assert query_entity_keys(query) == keys


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=300))
def test_extraction_never_raises_and_values_come_from_the_text(text: str) -> None:
    entities = extract_entities(text)
    assert len({(e.kind, e.norm) for e in entities}) == len(entities)
    for e in entities:
        assert e.value in text
        assert e.norm
    assert isinstance(query_entity_keys(text), list)


WORDS = st.sampled_from(
    ["Alice", "Smith", "of", "the", "Mr.", "May", "8,", "2023", "@bob", "#tag", "x@y.io", " ",
     "\n", ".", ":", "'s", "https://a.b/c", "The", "I", "Monday", "东京", "-", "2024-05-08"]
)  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(st.lists(WORDS, max_size=20).map(" ".join))
def test_extraction_on_entity_like_text(text: str) -> None:
    for e in extract_entities(text):
        assert e.value in text
        assert e.norm == e.norm.lower()
    query_entity_keys(text)
