"""Tests for memcli.core.chunking: boundaries (paragraph > sentence > word > character), sizes,
overlap, CJK, and hypothesis properties (full coverage, never over the budget)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcli.core.chunking import Chunk, chunk_text, estimate_tokens


def check_invariants(text: str, chunks: list[Chunk], max_tokens: int) -> None:
    """What every chunking must satisfy, whatever the input."""
    for c in chunks:
        assert c.text == text[c.start : c.end]
        assert c.text == c.text.strip() and c.text
        assert c.token_estimate == math.ceil(len(c.text) / 4) <= max_tokens
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert a.start < b.start and a.end < b.end  # always moving forward
        assert b.start <= a.end or not text[a.end : b.start].strip()  # no gap with content
    covered = set()
    for c in chunks:
        covered.update(range(c.start, c.end))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())


def test_empty_and_whitespace() -> None:
    assert chunk_text("") == []
    assert chunk_text(" \n\t \u3000 ") == []


def test_short_text_is_one_stripped_chunk() -> None:
    text = "\n  Alice met Bob.  \n"
    assert chunk_text(text) == [Chunk("Alice met Bob.", 3, 17, 4)]


def test_estimate_tokens() -> None:
    assert [estimate_tokens("x" * n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]


def test_prefers_paragraph_breaks() -> None:
    first = " ".join(["First paragraph sentence."] * 4)  # 103 chars
    second = " ".join(["Second paragraph sentence."] * 4)
    text = f"{first}\n\n{second}"
    chunks = chunk_text(text, max_tokens=40, overlap_tokens=0)  # 160 chars per chunk
    assert [c.text for c in chunks] == [first, second]
    check_invariants(text, chunks, 40)


def test_prefers_sentence_ends_over_word_breaks() -> None:
    text = "One two three four five six seven. Eight nine ten eleven twelve thirteen fourteen."
    chunks = chunk_text(text, max_tokens=12, overlap_tokens=0)  # 48 chars per chunk
    assert chunks[0].text == "One two three four five six seven."
    check_invariants(text, chunks, 12)


def test_never_cuts_inside_a_word_that_fits() -> None:
    words = [f"w{i:03d}" + "x" * (i % 7) for i in range(300)]
    text = " ".join(words)
    chunks = chunk_text(text, max_tokens=20, overlap_tokens=4)
    for c in chunks:
        assert c.start == 0 or text[c.start - 1] == " "
        assert c.end == len(text) or text[c.end] == " "
    check_invariants(text, chunks, 20)


def test_long_word_is_cut_only_because_it_must() -> None:
    text = "before " + "a" * 100 + " after"
    chunks = chunk_text(text, max_tokens=8, overlap_tokens=2)
    assert chunks[0].text == "before"
    assert chunks[-1].text.endswith("after")
    check_invariants(text, chunks, 8)


def test_consecutive_chunks_overlap() -> None:
    text = " ".join(f"Sentence number {i} says something short." for i in range(60))
    chunks = chunk_text(text, max_tokens=50, overlap_tokens=10)
    assert len(chunks) > 3
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start < a.end  # shared text
        assert a.end - b.start <= 40  # within the overlap budget
        assert text[b.start - 1] == " "  # overlap begins on a word
    check_invariants(text, chunks, 50)


def test_no_overlap_when_disabled() -> None:
    text = " ".join(["word"] * 500)
    chunks = chunk_text(text, max_tokens=25, overlap_tokens=0)
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start > a.end
    check_invariants(text, chunks, 25)


def test_cjk_splits_on_sentence_marks() -> None:
    sentence = "东京是日本的首都，也是最大的城市。"  # 17 characters
    text = sentence * 30
    chunks = chunk_text(text, max_tokens=25, overlap_tokens=5)  # 100 characters per chunk
    assert len(chunks) > 5
    assert all(c.text.endswith("。") for c in chunks)
    check_invariants(text, chunks, 25)


def test_cjk_without_punctuation_still_chunks() -> None:
    text = "无标点的长句子" * 100
    chunks = chunk_text(text, max_tokens=10, overlap_tokens=2)
    assert len(chunks) > 10
    check_invariants(text, chunks, 10)


def test_lines_count_as_sentence_boundaries() -> None:
    text = "\n".join(f"Caroline: message number {i}" for i in range(40))
    chunks = chunk_text(text, max_tokens=30, overlap_tokens=0)
    assert all(c.text.startswith("Caroline:") for c in chunks)
    check_invariants(text, chunks, 30)


@pytest.mark.parametrize(("max_tokens", "overlap"), [(0, 0), (10, 10), (10, -1), (10, 11)])
def test_rejects_bad_sizes(max_tokens: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_text("text", max_tokens=max_tokens, overlap_tokens=overlap)


def test_large_input_is_fast_enough() -> None:
    text = "A short sentence here. " * 5_000  # 115 kB
    chunks = chunk_text(text)
    check_invariants(text, chunks, 512)


# --- properties ----------------------------------------------------------------------------------

TEXTS = st.one_of(
    st.text(max_size=400),
    st.lists(
        st.sampled_from(
            ["word", "longerword", "x" * 30, " ", "\n", "\n\n", ". ", "。", "，", "東京"]
        ),
        max_size=80,
    ).map("".join),
)


@settings(max_examples=80, deadline=None)
@given(TEXTS, st.integers(1, 40), st.data())
def test_chunks_cover_the_text_and_respect_the_max(text: str, max_tokens: int, data) -> None:
    overlap = data.draw(st.integers(0, max_tokens - 1))
    chunks = chunk_text(text, max_tokens=max_tokens, overlap_tokens=overlap)
    if not text.strip():
        assert chunks == []
    check_invariants(text, chunks, max_tokens)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.text("abcxyz", min_size=1, max_size=40), min_size=1, max_size=60),
    st.sampled_from([" ", "\n", ". ", "\n\n"]),
    st.integers(1, 12),
    st.data(),
)
def test_words_that_fit_are_never_cut(words: list[str], sep: str, max_tokens: int, data) -> None:
    overlap = data.draw(st.integers(0, max_tokens - 1))
    text = sep.join(words)
    chunks = chunk_text(text, max_tokens=max_tokens, overlap_tokens=overlap)
    if max(map(len, text.split())) <= max_tokens * 4:
        for c in chunks:
            assert c.start == 0 or text[c.start - 1].isspace()
            assert c.end == len(text) or text[c.end].isspace()
