"""The optional reranker's step, after fusion and the ranking stages: the top N reordered.

The configured reranker (memcli.providers.reranker) scores the query against the text of each
of the fused top N candidates; those N are put in its order and the rest keep theirs. The N
scores of that top are handed out again in the new order, so `score` still sorts the list
(a caller that sorts by it, like the bundle's packer, keeps the reranker's order) and each
moved candidate's `rerank` boost says by how much its score moved. The reranker's raw score
is reported beside, never mixed into `score` nor into `relevance`.

A reranker that fails (down, slow, a bad answer) leaves the order as it was and says why in
the report: a query never fails for want of a model server.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from memcli.core.records import RerankReport
from memcli.providers.reranker import RerankError

if TYPE_CHECKING:
    from memcli.core.records import Hit
    from memcli.providers.reranker import Reranker
    from memcli.retrieval.stages import Candidate


def rerank(ranked: list[Candidate], text: str, reranker: Reranker | None) -> RerankReport | None:
    """Reorder the top `reranker.top_n` of `ranked` (best first, in place) by the reranker's
    scores. None when no reranker is configured; a report saying why when it was skipped."""
    if reranker is None:
        return None
    head = ranked[: reranker.top_n]
    report = RerankReport(model=reranker.model_id, candidates=len(head))
    if not head:
        return report
    t0 = time.perf_counter()
    try:
        scores = reranker.score(text, [c.row.get("content") or "" for c in head])
        if len(scores) != len(head):
            raise RerankError(f"the reranker gave {len(scores)} scores for {len(head)} texts")
    except RerankError as exc:
        report.skipped = exc.message
        return report
    finally:
        report.latency_ms = round((time.perf_counter() - t0) * 1000, 3)
    # Equal scores keep the fused order: the sort is stable on the original position.
    order = sorted(range(len(head)), key=lambda i: -scores[i])
    slots = sorted((c.score for c in head), reverse=True)
    for position, i in enumerate(order):
        cand = head[i]
        if slots[position] != cand.score:
            cand.boosts["rerank"] = slots[position] - cand.score
            cand.score = slots[position]
        report.scores[cand.id] = scores[i]
    ranked[: len(head)] = [head[i] for i in order]
    report.reranked = True
    return report


def annotate(hits: list[Hit], report: RerankReport | None) -> None:
    """Each hit's reranker score, and the reason on every hit when the reranker was skipped."""
    if report is None:
        return
    for hit in hits:
        hit.rerank_score = report.scores.get(hit.id)
        hit.rerank_skipped = report.skipped
