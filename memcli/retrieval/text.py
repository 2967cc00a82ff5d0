"""Turn user text into what the lexical legs search: a LexicalQuery of plain terms and CJK
3-grams (each backend renders it in its own syntax; no user text is ever syntax)."""

from __future__ import annotations

import re

from memcli.store.backend import LexicalQuery

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
# Bounds on a query (memcli.core.request_base.MAX_QUERY_CHARS says why): BM25 scores an OR
# of terms, where the first 64 distinct terms carry a question.
MAX_QUERY_TERMS = 64
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


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


def lexical_query(text: str) -> LexicalQuery:
    """The terms and grams of a query, bounded by MAX_QUERY_TERMS each.

    Terms: stopwords dropped (all words kept when every word is one, e.g. "who is it");
    any term may match (an OR: FTS5's default AND finds almost nothing for questions).
    Grams: the distinct 3-character grams of the CJK runs (the trigram leg); a run of 1 or 2
    characters (烤鸭, 東京, 서울: many CJK words are two characters) is a gram of its own,
    which each engine matches as a substring (an index of 3-grams cannot answer it)."""
    words = terms(text)
    if not words:
        words = terms(text, drop_stopwords=False)
    grams: dict[str, None] = {}
    for run in _CJK.findall(text):
        pieces = [run] if len(run) < 3 else [run[i:i + 3] for i in range(len(run) - 2)]
        for piece in pieces:
            if len(grams) >= MAX_QUERY_TERMS:
                break
            grams.setdefault(piece, None)
    return LexicalQuery(terms=tuple(words[:MAX_QUERY_TERMS]), grams=tuple(grams))


RECALL_CUES = ("before", "last time", "earlier", "previously", "之前", "以前", "上次")


def has_recall_cue(text: str) -> bool:
    lowered = text.lower()
    return any(cue in lowered for cue in RECALL_CUES)
