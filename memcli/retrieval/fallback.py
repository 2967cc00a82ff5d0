"""The recency fallback: when every retrieval leg found nothing, the newest memories in scope.

The evolution plan's retrieval order ends with it: full text, then the trigram fallback (CJK),
then "recent scoring" when nothing matched. memcli runs it as one more leg, `recent`, so the
usual stages rank what it returns (the hits carry `"recent"` in their per-leg scores, and
`--explain` shows it) and the request's path ends in `>recent` (`stats --requests` counts
paths).

Where it applies: `acb build` always (a bundle is context for the next model call, and the
newest memories beat an empty section), and `query` with its default legs. A `query` whose
caller names the legs (`--legs`) is a strict search and still answers `[]` when nothing
matches. With the dense leg on, some leg nearly always finds something (it ranks every memory
in scope), so in practice the fallback fires for full-text-only configurations (no embedder, or
the dense leg weighted 0) and for text no leg can search.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from memcli.store import search_sql

if TYPE_CHECKING:
    from memcli.store.connection import Database
    from memcli.store.filters import Filters

RECENT_LEG = "recent"


def found_nothing(legs: dict[str, list[tuple[int, float]]]) -> bool:
    """True when no leg that ran returned a memory (or no leg ran)."""
    return not any(legs.values())


def recent_leg(db: Database, filters: Filters, limit: int, exclude: Collection[int] = ()
               ) -> dict[str, list[tuple[int, float]]]:
    """The `recent` leg: the newest `limit` memories in scope, scored 1/rank; `exclude`d ones
    (a bundle's recent window, already shown) left out."""
    ids = [i for i in search_sql.recent(db, filters, limit + len(exclude)) if i not in exclude][
        :limit
    ]
    return {RECENT_LEG: [(mid, 1.0 / rank) for rank, mid in enumerate(ids, start=1)]}
