"""Read your own writes: a memory whose vector is not written yet ranks as the legs that can
find it say, not as the last hit of the dense leg (memcli.retrieval.search.fuse).

Inside `memcli serve` ingest commits the memory and its full-text rows and leaves its vector to
the indexer (memcli.ingest.background); `defer_embed=True` writes the same rows here, and
`index_next` is what the indexer runs, so no daemon and no clock is involved. The daemon's own
paths (forwarded CLI, HTTP, MCP) are in tests/service/test_daemon_read_your_writes.py.
"""

from __future__ import annotations

import pytest

from memcli.config import RetrievalSettings
from memcli.ingest.background import index_next
from memcli.retrieval import search
from memcli.retrieval.search import fuse, not_indexed
from memcli.retrieval.stages import RankContext

pytestmark = pytest.mark.backends


def _note(memory, i: int, *, defer: bool) -> int:
    report = memory.ingest([{"event_id": f"e{i}", "user_id": "u", "kind": "message",
                             "actor": {"type": "human", "id": "u"},
                             "content": {"text": f"the zebra{i}quokka report is due"}}],
                           defer_embed=defer)
    return report.memory_ids[0]


def test_a_write_waiting_for_its_vector_is_the_next_querys_first_hit(memory):
    for i in range(30):  # indexed neighbours: the dense leg finds them for every query below
        _note(memory, i, defer=False)
    for i in range(30, 40):
        new = _note(memory, i, defer=True)
        result = memory.query(f"zebra{i}quokka", top_k=1)
        assert [hit.id for hit in result.hits] == [new], f"write {i} missed"
        assert "lexical" in result.hits[0].scores and "dense" not in result.hits[0].scores
    done, _ = index_next(memory.db, memory.embedder, memory.sparse, after=0, limit=100)
    assert done == 10
    hit = memory.query("zebra39quokka", top_k=1).hits[0]
    assert hit.event_id == "e39" and {"lexical", "dense"} <= set(hit.scores)


def test_a_write_indexed_between_the_legs_and_the_ranking_is_still_first(memory):
    """The indexer may commit the write's vector after the dense leg ran and before the
    ranking looks: the leg could not see it, and the ranking knows (`Legs.indexed`)."""
    for i in range(30):
        _note(memory, i, defer=False)
    new = _note(memory, 30, defer=True)
    filters = memory.filters()
    legs = search.run_legs(memory.db, memory.embedder, "zebra30quokka", filters,
                           memory.retrieval)
    assert index_next(memory.db, memory.embedder, memory.sparse, after=0, limit=10)[0] == 1
    ranked = search.rank(RankContext(memory.db, filters, "zebra30quokka", memory.retrieval),
                         legs)
    assert ranked[0].id == new


def test_only_a_memory_without_its_vector_is_spared_the_dense_legs_floor(memory):
    indexed = _note(memory, 1, defer=False)
    waiting = _note(memory, 2, defer=True)
    legs = {"lexical": [(waiting, 3.0), (indexed, 2.0)], "dense": [(999, 0.9), (998, 0.1)]}
    assert not_indexed(memory.db, legs) == {waiting: frozenset({"dense"})}


def test_fusion_counts_a_leg_that_cannot_see_a_candidate_at_its_best_rank():
    legs = {"lexical": [(1, 5.0), (2, 1.0)], "dense": [(3, 0.9), (2, 0.5), (4, 0.1)]}
    for fusion in ("zscore", "rrf"):
        # Two hits asked for: the lexical list is a cut, not every match, so its scale does
        # not depend on the pool (the rule for a leg that returned every match, in `fuse`).
        settings = RetrievalSettings(fusion=fusion, candidates_per_leg=2)
        before = fuse(legs, settings)
        after = fuse(legs, settings, {1: frozenset({"dense"})})
        # Counted as the dense leg's first hit: its own lexical rank.
        top_dense = fuse({"lexical": legs["lexical"],
                          "dense": [(1, 0.9), (2, 0.5), (4, 0.1)]}, settings)[1].fused
        assert after[1].fused == pytest.approx(top_dense)
        assert after[1].fused > before[1].fused
        for other in (2, 3, 4):  # everyone else is scored as before
            assert after[other].fused == pytest.approx(before[other].fused)
