"""Split long text into overlapping chunks that fit an embedding or context budget.

The text is cut into small atomic units (whitespace-separated words; inside a word, CJK sentence
and clause punctuation; as a last resort fixed-size character pieces), and each gap between two
units gets a strength: paragraph break > sentence end or line break > space > clause mark > raw
character cut. A chunk greedily takes units while it fits, then ends at the strongest gap in the
back half of its window, so chunks end on paragraphs or sentences whenever the text allows and cut
inside a word only when the word alone is too long. The next chunk starts a few units back from
where the previous one ended, so a fact that straddles a cut is still whole in one of them.

Sizes use the cheap estimate `ceil(len / 4)` tokens; exact counting happens in `tokens.py` for the
few commands that need it. Every chunk is `text[start:end]`, stripped of surrounding whitespace.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from dataclasses import dataclass

__all__ = ["Chunk", "chunk_text", "estimate_tokens", "CHARS_PER_TOKEN"]

CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of the input: `text == source[start:end]`, sized by the cheap token estimate."""

    text: str
    start: int
    end: int
    token_estimate: int


def estimate_tokens(text: str) -> int:
    """Cheap token estimate used for chunk sizes: one token per four characters, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


# Gap strengths, strongest first.
_PARAGRAPH, _SENTENCE, _SPACE, _CLAUSE, _HARD = 4, 3, 2, 1, 0

_WORD_RE = re.compile(r"\S+")
_BLANK_LINE_RE = re.compile(r"\n[^\S\n]*\n")
# Inside a run of non-space text (CJK has no spaces): after a sentence mark, or a clause mark,
# plus any closing quotes or brackets that belong to it.
_CJK_BREAK_RE = re.compile(r"(?:(?P<sent>[。！？]+)|(?P<clause>[，、；：]))[」』”’）】》]*")
_CJK_MARK_RE = re.compile(r"[。！？，、；：]")
_SENTENCE_MARKS = frozenset(".!?…。！？")
_CLOSERS = frozenset("\"'”’)]」』）】》")
_SENTENCE_END_RE = re.compile(r"[.!?…。！？][\"'”’)\]」』）】》]*$")


def _units(text: str, piece: int) -> tuple[list[int], list[int], list[int]]:
    """Atomic units as parallel lists: starts, ends, and the strength of the gap after each."""
    starts: list[int] = []
    ends: list[int] = []
    gaps: list[int] = []  # gaps[k]: strength of the cut between unit k and unit k + 1
    # One scan up front lets plain (non-CJK) text skip the per-word punctuation search: this loop
    # runs once per word, so it dominates the cost on large inputs.
    has_cjk_marks = _CJK_MARK_RE.search(text) is not None
    prev_end = 0
    for m in _WORD_RE.finditer(text):
        start, end = m.span()
        if starts:
            gap = text[prev_end:start]
            if "\n" in gap:
                # A line break usually ends a sentence, list item or chat turn; a blank line ends
                # a paragraph.
                gaps.append(_PARAGRAPH if _BLANK_LINE_RE.search(gap) else _SENTENCE)
            elif text[prev_end - 1] in _SENTENCE_MARKS or (
                text[prev_end - 1] in _CLOSERS
                and _SENTENCE_END_RE.search(text, max(0, prev_end - 4), prev_end)
            ):
                gaps.append(_SENTENCE)
            else:
                gaps.append(_SPACE)
        prev_end = end
        if end - start <= piece and not has_cjk_marks:
            starts.append(start)
            ends.append(end)
            continue
        # Split the word after CJK punctuation, then cut what is still longer than `piece`.
        bounds: list[tuple[int, int, int]] = []  # (start, end, strength of the gap before it)
        strength = -1  # the gap before the word itself is already recorded
        if has_cjk_marks:
            for p in _CJK_BREAK_RE.finditer(text, start, end):
                if p.end() < end:
                    bounds.append((start, p.end(), strength))
                    start = p.end()
                    strength = _SENTENCE if p.group("sent") else _CLAUSE
        bounds.append((start, end, strength))
        for b_start, b_end, b_strength in bounds:
            for offset in range(b_start, b_end, piece):
                if offset != b_start:
                    gaps.append(_HARD)
                elif b_strength >= 0:
                    gaps.append(b_strength)
                starts.append(offset)
                ends.append(min(offset + piece, b_end))
    return starts, ends, gaps


def chunk_text(text: str, max_tokens: int = 512, overlap_tokens: int = 32) -> list[Chunk]:
    """Split `text` into chunks of at most `max_tokens` (estimated), overlapping by up to
    `overlap_tokens`.

    Whitespace-only text gives `[]`; text that fits gives exactly one chunk, the stripped text.
    Raises ValueError unless `max_tokens >= 1` and `0 <= overlap_tokens < max_tokens`.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    if not 0 <= overlap_tokens < max_tokens:
        raise ValueError(
            f"overlap_tokens must be between 0 and max_tokens - 1, got {overlap_tokens}"
        )
    max_chars = max_tokens * CHARS_PER_TOKEN
    overlap_chars = overlap_tokens * CHARS_PER_TOKEN
    stripped = text.strip()
    if not stripped:
        return []
    if len(stripped) <= max_chars:
        start = len(text) - len(text.lstrip())
        return [Chunk(stripped, start, start + len(stripped), estimate_tokens(stripped))]

    # Over-long words are cut into pieces small enough to serve as overlap, so overlap still works
    # inside a huge word or an unpunctuated CJK run.
    piece = overlap_chars if overlap_chars else max_chars
    starts, ends, gaps = _units(text, piece)
    n = len(starts)
    chunks: list[Chunk] = []
    first = 0  # first unit of the current chunk
    last_end = -1  # last unit of the previous chunk: the next one must end beyond it
    while True:
        # Furthest unit that still fits in a chunk beginning at `first`.
        limit = bisect_right(ends, starts[first] + max_chars) - 1
        if limit == n - 1:
            last = limit
        else:
            last = _best_cut(starts, ends, gaps, first, max(first, last_end + 1), limit, max_chars)
        body = text[starts[first] : ends[last]]
        chunks.append(Chunk(body, starts[first], ends[last], estimate_tokens(body)))
        if last == n - 1:
            return chunks
        first = _overlap_start(starts, ends, gaps, first, last, overlap_chars, max_chars)
        last_end = last


def _best_cut(
    starts: list[int],
    ends: list[int],
    gaps: list[int],
    first: int,
    lowest: int,
    limit: int,
    max_chars: int,
) -> int:
    """Index of the last unit of the chunk: the strongest gap, preferring a reasonably full chunk.

    Candidates are units `lowest..limit`. Among those ending in the back half of the window, take
    the strongest gap (the latest on ties). If that would cut inside a word, look at the whole
    window instead, so a word is only split when no word boundary fits at all.
    """
    half = starts[first] + max_chars // 2
    best, best_strength = limit, -1
    for k in range(limit, lowest - 1, -1):
        if ends[k] < half:
            break
        if gaps[k] > best_strength:
            best, best_strength = k, gaps[k]
    if best_strength > _HARD:
        return best
    for k in range(limit, lowest - 1, -1):
        if gaps[k] > best_strength:
            best, best_strength = k, gaps[k]
    return best


def _overlap_start(
    starts: list[int],
    ends: list[int],
    gaps: list[int],
    first: int,
    last: int,
    overlap_chars: int,
    max_chars: int,
) -> int:
    """First unit of the next chunk: as far back as the overlap budget allows.

    The overlap must end at `last`, fit in `overlap_chars`, begin at a word boundary unless the
    previous chunk itself ended inside a word, and leave room for the whole next word (when that
    word fits in a chunk at all), so overlap never forces a cut inside a word.
    """
    nxt = last + 1
    # End of the word that starts at `nxt`: its units are joined by raw character cuts.
    need = ends[nxt]
    j = nxt
    while j < len(gaps) and gaps[j] == _HARD and ends[j + 1] - starts[nxt] <= max_chars:
        j += 1
    if j == len(gaps) or gaps[j] != _HARD:
        need = ends[j]  # the whole word fits in one chunk: keep room for all of it
    best = nxt
    inside_word = gaps[last] == _HARD
    k = last
    while k > first and ends[last] - starts[k] <= overlap_chars:
        if need - starts[k] <= max_chars and (inside_word or gaps[k - 1] != _HARD):
            best = k
        k -= 1
    return best
