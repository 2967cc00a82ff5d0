"""When a session search widens to its user: one rule for `query` and `acb build`.

The evolution plan (V1.1-2, "you said it before but in another session"): search the session first
and widen to the user when `fts_hits < threshold` or the query carries a recall cue. The count is of
full-text evidence only: the memories the lexical (FTS5 BM25) and trigram (CJK) legs found in the
session. Counting every leg's hits, as memcli did before, never widened: the dense leg ranks every
turn of the session, relevant or not, so any session of 3 turns looked "covered" (asked "which
database for billing" in a session about the weather, the query answered with 4 weather turns and
never looked at the session where the database was decided).

When no full-text leg ran (`--legs dense`, or a query with no searchable word), there is no
lexical evidence to count and the rule falls back to the ranked candidates, as before.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import TYPE_CHECKING

from memcli.retrieval.text import has_recall_cue
from memcli.store.sessions import session_owner

if TYPE_CHECKING:
    from memcli.store.connection import Database
    from memcli.store.filters import Filters

FULLTEXT_LEGS = ("lexical", "trigram")


def fulltext_hits(legs: dict[str, list[tuple[int, float]]],
                  exclude: Collection[int] = ()) -> int | None:
    """Distinct memories the full-text legs found (`exclude`d ones not counted), or None when
    no full-text leg ran."""
    ran = [legs[name] for name in FULLTEXT_LEGS if name in legs]
    if not ran:
        return None
    found = {mid for hits in ran for mid, _ in hits}
    return len(found.difference(exclude))


def widen_before_search(text: str) -> bool:
    """A recall cue ("before", "last time", 之前 ...) widens whatever the session holds."""
    return has_recall_cue(text)


def session_is_thin(legs: dict[str, list[tuple[int, float]]], ranked_ids: Collection[int],
                    threshold: int, exclude: Collection[int] = ()) -> bool:
    """The evolution plan's `fts_hits < threshold` over the session's search (`legs`); `exclude`:
    memories the caller already shows (a bundle's recent window), which are no evidence of coverage.
    Without full-text legs, the ranked candidates are counted instead."""
    hits = fulltext_hits(legs, exclude)
    if hits is None:
        hits = len(set(ranked_ids).difference(exclude))
    return hits < threshold


def should_widen(text: str, legs: dict[str, list[tuple[int, float]]],
                 ranked_ids: Collection[int], threshold: int,
                 exclude: Collection[int] = ()) -> bool:
    """The whole rule, for a session search that has run."""
    return widen_before_search(text) or session_is_thin(legs, ranked_ids, threshold, exclude)


def wider_scope(db: Database, filters: Filters) -> Filters | None:
    """The session's user scope, or None when the session has no (unambiguous) owner:
    "everyone" is never a session's user, so an anonymous session never widens."""
    if not filters.session_id:
        return None
    wider = filters.widen_to_user()
    if wider.user_id is None:
        owner = session_owner(db, filters.session_id, filters.tenant_id)
        wider = replace(wider, user_id=owner)
    return wider if wider.user_id is not None else None
