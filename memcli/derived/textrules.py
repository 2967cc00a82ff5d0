"""Text rules of derived memories, shared by the lifecycle steps: what a good one looks like,
and how alike two are.

- `check_memory_text` (and `FactText`, a string that passes it): the writing policy for
  model-written facts and insights (the memory system spec's semantic guard: complete,
  self-contained, 1-2 sentences, third person naming the person, at most 280 characters).
  An extracted item that breaks it is dropped on its own, with its reason
  (`lifecycle/extract.py`).
- `check_summary_text`: the episodic guard on a session summary: the same rules (up to 5
  sentences, 800 characters) and the past tense.
- `normalise` / `tokens` / `jaccard`: the cheap, model-free side of deduplication.
- `content_differs`: two texts can share 80 % of their words and still disagree ("moved to
  Sweden" / "moved to Norway"); a difference in numbers or capitalised words is a fact, so
  such pairs are never merged without a model looking at them. `safe_merge` adds the other
  cues of a contradiction (negation, tense: `memcli.derived.contradiction`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Annotated

from pydantic import AfterValidator

from memcli.derived.contradiction import (
    content_words,
    differs,
    expand_contractions,
    has_past_verb,
)

MAX_FACT_CHARS = 280
MAX_SENTENCES = 2

_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE_END = re.compile(r"[.!?。！？]+[\"')\]]*\s+(?=[A-Z0-9\"'(\[])")
# First and second person, as whole words. "I" only in capitals ("i" is rarely a pronoun in
# model output, and lower-case matching would catch roman numerals); "us" is left out because
# of "US". A fact must name its subject, so these mark a copied turn, not a fact.
_FIRST_SECOND = re.compile(
    r"\b(?:me|my|mine|myself|we|our|ours|ourselves|you|your|yours|yourself|yourselves)\b",
    re.IGNORECASE,
)
_CAPITAL_I = re.compile(r"(?<![\w'’])I(?:'m|'ve|'ll|'d|’m|’ve|’ll|’d)?(?![\w'’])")
# A text that opens with "She ..." names nobody: not self-contained. ("It rained" may stand.)
_OPENING_PRONOUN = re.compile(r"^\W*(he|she|they|him|her|them|his|hers|their|theirs)\b",
                              re.IGNORECASE)


def check_memory_text(
    value: str, *, max_chars: int = MAX_FACT_CHARS, max_sentences: int = MAX_SENTENCES
) -> str:
    """The cleaned text, or ValueError saying which rule it breaks (pydantic shows the reason)."""
    text = " ".join(str(value).split())
    if not text:
        raise ValueError("empty text")
    if len(text) > max_chars:
        raise ValueError(f"{len(text)} characters, at most {max_chars} allowed")
    if sentence_count(text) > max_sentences:
        raise ValueError(f"more than {max_sentences} sentences")
    pronoun = _FIRST_SECOND.search(text) or _CAPITAL_I.search(text)
    if pronoun:
        raise ValueError(
            f"not third person ({pronoun.group(0)!r}): name the person instead of I/you/we"
        )
    opening = _OPENING_PRONOUN.match(text)
    if opening:
        raise ValueError(
            f"not self-contained (opens with {opening.group(1)!r}): name the person first"
        )
    return text


def check_summary_text(value: str, *, max_chars: int = 800, max_sentences: int = 5) -> str:
    """A session summary: the fact rules, and its first sentence in the past tense (what was
    discussed, decided or done; later sentences may carry a plan forward)."""
    text = check_memory_text(value, max_chars=max_chars, max_sentences=max_sentences)
    first = _SENTENCE_END.split(text, maxsplit=1)[0]
    if not has_past_verb(first):
        raise ValueError("not in the past tense: say what was discussed, decided or done")
    return text


def sentence_count(text: str) -> int:
    return len(_SENTENCE_END.split(text.strip())) if text.strip() else 0


def normalise(text: str) -> str:
    """Lower case, contractions expanded ("doesn't" -> "does not"), accents folded, punctuation
    dropped, spaces collapsed: the exact-dup key."""
    folded = unicodedata.normalize("NFKD", expand_contractions(text).casefold())
    folded = "".join(c for c in folded if not unicodedata.combining(c))
    return " ".join(_WORD.findall(folded))


def tokens(text: str) -> frozenset[str]:
    return frozenset(normalise(text).split())


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def content_differs(a: str, b: str) -> bool:
    """True when one text has a number or a name the other lacks: not safe to merge blindly.
    A name the other text has only as its first word ("Ravi drinks" / "In the morning, Ravi
    drinks") is not lacking."""
    na, ma = content_words(a)
    nb, mb = content_words(b)
    ta, tb = tokens(a), tokens(b)
    return (
        na != nb
        or bool({n for n in ma - mb if n not in tb})
        or bool({n for n in mb - ma if n not in ta})
    )


def safe_merge(a: str, b: str, ta: frozenset[str], tb: frozenset[str]) -> bool:
    """Near-duplicates that may merge without a model: one only adds or drops words.

    A swapped word ("a nurse" / "a doctor", "blue" / "green") is how a fact changes, so a pair
    where each side has a word the other lacks needs the model's same/contradicts check, however
    high its Jaccard; so does a pair differing in a number or a name, and one that only adds a
    word when that word is a negation ("will not attend").
    """
    substitution = bool(ta - tb) and bool(tb - ta)
    return (
        not substitution
        and not content_differs(a, b)
        and differs(a, b, normalise(a).split(), normalise(b).split()) is None
    )


def contradiction_cue(a: str, b: str) -> str | None:
    """The cue (negation, number or date, name, tense) that keeps `a` and `b` from merging."""
    return differs(a, b, normalise(a).split(), normalise(b).split())


def fingerprint(text_a: str, text_b: str, score: float) -> str:
    """Order-independent key of a compared pair (and its similarity, so a new embedder rechecks)."""
    ha, hb = sorted(hashlib.sha256(normalise(t).encode()).hexdigest() for t in (text_a, text_b))
    return hashlib.sha256(f"{ha}|{hb}|{score:.2f}".encode()).hexdigest()


def clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# A fact as a model writes it: pydantic checks it against the writing policy.
FactText = Annotated[str, AfterValidator(check_memory_text)]
