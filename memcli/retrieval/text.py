"""Turn user text into safe FTS5 expressions: no user text can ever be FTS5 syntax."""

from __future__ import annotations

import re

# ~80 common English function words: with every term ORed, these only add noise.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    out over own same she should so some such than that the their theirs them then there these
    they this those through to too under until up very was we were what when where which while
    who whom why will with would you your yours yourself""".split()
)
_WORD = re.compile(r"\w+", re.UNICODE)
# Bounds on a query (a 100,000-character query ran past 60 s, in e5's window averaging and
# an OR of thousands of terms). What each leg can use: e5 reads 512 tokens per window
# (~2,000 characters of English; longer text is averaged over windows, blurring the vector),
# SPLADE keeps 64 query tokens, and BM25 scores an OR of terms, where the first 64 distinct
# terms carry a question. Longer queries are cut there, and the CLI says so.
MAX_QUERY_CHARS = 2000
MAX_QUERY_TERMS = 64
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


def bound_query(text: str) -> str:
    """The query as the legs search it: its first MAX_QUERY_CHARS characters."""
    return text if len(text) <= MAX_QUERY_CHARS else text[:MAX_QUERY_CHARS]


def quote(term: str) -> str:
    """An FTS5 string literal: double quotes doubled, so nothing inside is syntax."""
    return '"' + term.replace('"', '""') + '"'


def terms(text: str, *, drop_stopwords: bool = True) -> list[str]:
    """Lower-cased word terms of a query, stopwords dropped, order kept, duplicates removed."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):
            continue  # CJK runs go to the trigram leg
        if drop_stopwords and word in STOPWORDS:
            continue
        seen.setdefault(word, None)
    return list(seen)


def fts_match(text: str) -> str | None:
    """OR of quoted terms (FTS5's default AND finds almost nothing for questions)."""
    words = terms(text)
    if not words:
        words = terms(text, drop_stopwords=False)
    return " OR ".join(quote(w) for w in words[:MAX_QUERY_TERMS]) or None


def has_cjk(text: str) -> bool:
    return bool(_CJK.search(text))


def trigram_match(text: str) -> str | None:
    """OR of the quoted 3-character grams of the CJK runs in the text."""
    grams: dict[str, None] = {}
    for run in _CJK.findall(text):
        for i in range(max(0, len(run) - 2)):
            if len(grams) >= MAX_QUERY_TERMS:
                break
            grams.setdefault(run[i:i + 3], None)
    return " OR ".join(quote(g) for g in grams) or None


RECALL_CUES = ("before", "last time", "earlier", "previously", "之前", "以前", "上次")


def has_recall_cue(text: str) -> bool:
    lowered = text.lower()
    return any(cue in lowered for cue in RECALL_CUES)
