"""Hybrid search: run each leg, fuse their scores, then apply the ranking stages in order.

Legs (each returns ranked (memory id, score) lists, filtered in SQL):
  lexical  full text (SQLite: FTS5 BM25, porter; stopwords dropped, any term; context at 0.5)
  trigram  substring match of CJK 3-grams (scripts without spaces; SQLite: FTS5 trigram)
  sparse   SPLADE-tiny learned-sparse dot product (vocabulary expansion, English)
  dense    cosine similarity of the embedder's vectors
  entity   memories linked to entities the query names
Fusion: z-score (default, measured better than RRF on LoCoMo; see README) or weighted RRF.
Stages (memcli.retrieval.stages): small functions over the candidate list, each recording
its boost for --explain.
Relevance (`assess`, memcli.retrieval.relevance): each shown hit's calibrated probability of
being evidence, from its own leg scores, never from the other hits'.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from memcli.core.request_base import bound_query
from memcli.entities.extraction import query_entity_keys
from memcli.providers.query_batches import Batcher
from memcli.retrieval import relevance as judge
from memcli.retrieval import text as qtext
from memcli.retrieval.stages import (
    POOL_STAGES,
    RANK_COLUMNS,
    ROW_STAGES,
    Candidate,
    RankContext,
)
from memcli.store import backlog, search_sql
from memcli.store import sparse as sparse_sql
from memcli.store.filters import Filters
from memcli.store.memories import get_memories

if TYPE_CHECKING:
    from memcli.config import RetrievalSettings
    from memcli.providers.embedders import Embedder
    from memcli.providers.splade import SpladeEncoder
    from memcli.store.connection import Database


_WORKERS: dict[object, ThreadPoolExecutor] = {}
_WORKERS_LOCK = threading.Lock()


def _worker(key: object, label: str) -> ThreadPoolExecutor:
    """The single thread (`memcli-<label>`) that runs everything submitted under `key`, shared
    by every query in the process."""
    worker = _WORKERS.get(key)
    if worker is None:
        with _WORKERS_LOCK:
            worker = _WORKERS.get(key)
            if worker is None:
                worker = _WORKERS[key] = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=f"memcli-{label}")
    return worker


def _model_worker(model: Any) -> ThreadPoolExecutor:
    """The worker thread of one kind of query-side model.

    One thread per model class: SPLADE and the embedder load and encode side by side (on two
    cores, beside the SQL legs on the calling thread), while the calls of one model never run
    concurrently, whatever the engine's thread safety."""
    return _worker(type(model), type(model).__name__)


# The last result of each query-side model method: a session search that widens to its user
# runs the legs again for the same text, and must not embed it twice.
_LAST_CALL: dict[tuple[int, str], tuple[Any, str, Future[Any]]] = {}


# The method that encodes several query texts in one pass, where a model has one.
_BATCH_METHODS = {"embed_query": "embed_queries", "encode_query": "encode_queries"}
_BATCHERS: dict[tuple[type, str], Batcher] = {}


def _query_batcher(model: Any, method: str) -> Batcher:
    """The thread that runs `method` for every query of one kind of model in the process, the
    texts that arrive together in one batch (memcli/providers/query_batches.py)."""
    key = (type(model), method)
    batcher = _BATCHERS.get(key)
    if batcher is None:
        with _WORKERS_LOCK:
            batcher = _BATCHERS.get(key)
            if batcher is None:
                batcher = _BATCHERS[key] = Batcher(f"memcli-{type(model).__name__}-batch")
    return batcher


def _query_model_call(model: Any, method: str, text: str) -> Future[Any]:
    """`model.method(text)` on a worker thread, or the finished result of the same call.
    Models that encode several queries in one pass share it between concurrent queries."""
    key = (id(model), method)
    last = _LAST_CALL.get(key)
    if last is not None and last[0] is model and last[1] == text:
        done = last[2]
        if done.done() and not done.cancelled() and done.exception() is None:
            return done
    many = getattr(model, _BATCH_METHODS.get(method, ""), None)
    if callable(many):
        future = _query_batcher(model, method).submit(many, text)
    else:
        future = _model_worker(model).submit(getattr(model, method), text)
    _LAST_CALL[key] = (model, text, future)
    return future


def preload_models(embedder: Embedder | None, sparse: SpladeEncoder | None) -> None:
    """Start loading the query-side models on their worker threads, so a process that is about
    to query loads them while it opens the database and runs the SQL legs. Models without a
    `load()` (remote or test embedders) load on first use as before."""
    for model in (sparse, embedder):
        load = getattr(model, "load", None)
        if model is None or not callable(load):
            continue

        def quiet(load: Callable[[], None] = load) -> None:
            try:
                load()
            except Exception:  # noqa: BLE001 - the query's own call reports it properly
                pass

        _model_worker(model).submit(quiet)


def warm_query_models(embedder: Embedder | None, sparse: SpladeEncoder | None) -> None:
    """Encode one query with each query-side model the way `run_legs` does (on their worker
    threads) and wait. For a process about to serve a query it has not seen yet (a spare
    command process of `memcli serve`): the first encode of a process pays for its threads,
    the engines' first allocations and the BLAS controller (docs/design/daemon.md, "Where a
    forwarded query's time goes"); this pays it before the query comes (a model loaded after
    the fork, MiniLM, is loaded now), and starts the lexical leg's thread and the loaders'."""
    # Local models only (those with a `load()`): a remote embedder's first call is a request
    # to its provider, never made for a warm-up.
    calls = [_query_model_call(model, method, "warm")
             for model, method in ((sparse, "encode_query"), (embedder, "embed_query"))
             if callable(getattr(model, "load", None))]
    calls.append(_worker("sql", "sql").submit(lambda: None))  # the lexical leg's thread
    preload_models(embedder, sparse)  # loaded already: only their threads start
    for call in calls:
        call.exception()  # waits; an error is the query's own to report


# The legs whose score is 0 for a memory that matches nothing of the query (full text,
# trigrams, entities, sparse terms): what such a leg does not return does not match.
MATCH_LEGS = ("lexical", "trigram", "entity", "sparse")

# The legs that read rows an indexer writes after the memory itself (memcli.ingest.background):
# a memory written a moment ago has its full-text and entity rows but not these yet.
INDEXED_LEGS = ("dense", "sparse")


class Legs(dict[str, list[tuple[int, float]]]):
    """Each leg's (memory id, score) hits, and `indexed`: the highest memory id with a vector
    ("dense") and with sparse terms ("sparse") just before those legs ran."""

    indexed: dict[str, int] | None = None


def run_legs(db: Database, embedder: Embedder | None, text: str, filters: Filters,
             settings: RetrievalSettings, timings: dict[str, float] | None = None,
             sparse: SpladeEncoder | None = None, reader: Database | None = None,
             ) -> Legs:
    """Each leg's (memory id, score) list, best first.

    `reader`: a second connection to the same database. The lexical leg, the most expensive
    SQL leg, then runs on it on another thread, beside the other legs on `db` (apsw releases
    the GIL while SQLite works): at 100k memories that took a one-user FTS-only query's legs
    from p50 7.7 / p95 14.5 to 5.7 / 10.7 ms."""
    text = bound_query(text)  # a request model cut it already, and said so
    n = settings.candidates_per_leg
    weights = settings.leg_weights
    legs = Legs()
    use_sparse = sparse is not None and weights.get("sparse", 0) > 0
    use_dense = embedder is not None and db.vec_enabled and weights.get("dense", 0) > 0

    # The query-side models (SPLADE and the embedder) run on their worker threads while this
    # thread runs the SQL legs: they release the GIL, so their time mostly overlaps the SQL's.
    sparse_vec: Future[dict[int, float]] | None = None
    dense_vec: Future[Any] | None = None
    if use_sparse:
        assert sparse is not None
        sparse_vec = _query_model_call(sparse, "encode_query", text)
    if use_dense:
        assert embedder is not None
        dense_vec = _query_model_call(embedder, "embed_query", text)

    def measured(name: str, fn: Callable[[], list[tuple[int, float]]]
                 ) -> list[tuple[int, float]]:
        t0 = time.perf_counter()
        hits = fn()
        if timings is not None:
            timings[name] = (time.perf_counter() - t0) * 1000
        return hits

    def timed(name: str, fn: Callable[[], list[tuple[int, float]]]) -> None:
        if weights.get(name, 0) > 0:
            legs[name] = measured(name, fn)

    lexical_on_reader: Future[list[tuple[int, float]]] | None = None
    try:
        # Before the dense and sparse legs: what they can see (read your writes, `fuse`).
        indexed = backlog.indexed_up_to(db, dense=use_dense, sparse=use_sparse)
        query = qtext.lexical_query(text)
        if query.terms and reader is not None and weights.get("lexical", 0) > 0:
            lexical_on_reader = _worker("sql", "sql").submit(measured, "lexical", lambda: (
                search_sql.lexical(reader, query, filters, n, settings.context_weight)))
        elif query.terms:
            timed(
                "lexical",
                lambda: search_sql.lexical(db, query, filters, n, settings.context_weight),
            )
        if query.grams:
            timed("trigram", lambda: search_sql.trigram(db, query, filters, n))
        keys = query_entity_keys(text)
        # How many memories the scope holds (an upper bound from the scope index, counting
        # stops at the cap): the entity, sparse and dense legs pick their query plan by it.
        # Counted once, only if one of them runs.
        scope_rows = 0
        if (keys and weights.get("entity", 0) > 0) or use_sparse or use_dense:
            scope_rows = search_sql.estimate_scope(db, filters, cap=search_sql.SCOPE_COUNT_CAP)
        small_scope = scope_rows <= search_sql.SMALL_SCOPE
        if keys:
            timed(
                "entity", lambda: search_sql.entity(db, keys, filters, n, small_scope=small_scope)
            )
        if sparse_vec is not None:
            def sparse_leg() -> list[tuple[int, float]]:
                # The highest memory id bounds the memory count from above and costs one b-tree
                # seek (a count(*) costs ~8 ms at 100k); it only scales the df cut-off.
                total = int(db.scalar("SELECT coalesce(max(id), 0) FROM memories"))
                max_df = max(settings.sparse_max_df, int(settings.sparse_max_df_ratio * total))
                return sparse_sql.search(db, sparse_vec.result(), filters, n, max_df,
                                         small_scope=small_scope)
            timed("sparse", sparse_leg)
        if dense_vec is not None:
            def dense() -> list[tuple[int, float]]:
                vector = dense_vec.result()
                return search_sql.dense(db, vector.astype("float32").tobytes(), filters, n,
                                 scope_rows=scope_rows)
            timed("dense", dense)
        if lexical_on_reader is not None:
            legs = Legs({"lexical": lexical_on_reader.result(), **legs})
        legs.indexed = indexed
    finally:
        # On an error in a SQL leg, never leave a model call or the reader's leg running
        # into the next query.
        for future in (sparse_vec, dense_vec, lexical_on_reader):
            if future is not None and not future.cancel():
                wait([future])
    return legs


def not_indexed(db: Database, legs: dict[str, list[tuple[int, float]]]
                ) -> dict[int, frozenset[str]]:
    """The candidates the dense or sparse leg could not have found because their vector or
    sparse terms were not written when it ran: id -> those legs. A candidate above the leg's
    `Legs.indexed` mark had none then (no lookup); the others a leg missed are looked up, in
    one statement (a memory indexed out of id order)."""
    ran = [leg for leg in INDEXED_LEGS if legs.get(leg)]
    if not ran:
        return {}
    found = {leg: {mid for mid, _ in legs[leg]} for leg in ran}
    marks = getattr(legs, "indexed", None) or {}
    lacking: dict[int, set[str]] = {}
    looked_up: set[int] = set()
    for hits in legs.values():
        for mid, _ in hits:
            for leg in ran:
                if mid in found[leg]:
                    continue
                if leg in marks and mid > marks[leg]:
                    lacking.setdefault(mid, set()).add(leg)
                else:
                    looked_up.add(mid)
    if looked_up:
        waiting = backlog.still_waiting(db, sorted(looked_up), dense="dense" in found,
                                        sparse="sparse" in found)
        for mid, (lacks_vector, lacks_terms) in waiting.items():
            for leg, lacks in (("dense", lacks_vector), ("sparse", lacks_terms)):
                if lacks and leg in found and mid not in found[leg]:
                    lacking.setdefault(mid, set()).add(leg)
    return {mid: frozenset(legs_) for mid, legs_ in lacking.items()}


def fuse(legs: dict[str, list[tuple[int, float]]], settings: RetrievalSettings,
         waiting: dict[int, frozenset[str]] | None = None) -> dict[int, Candidate]:
    """Each candidate's fused score: the weighted sum of its z-scores (or RRF terms) over
    the legs that returned hits, a leg that missed it counting as its last rank (a matching
    leg that returned every match: as no match, on the scale of the whole pool).

    `waiting` (`not_indexed`): legs that could not find a candidate yet (its vector or
    sparse terms are not written). Such a leg counts the candidate at the best rank the
    other legs gave it, not as its last: a memory written a moment ago ranks as its
    full-text match says until the indexer catches up (docs/design/read-your-writes.md)."""
    waiting = waiting or {}
    candidates: dict[int, Candidate] = {}
    for leg, hits in legs.items():
        for rank, (mid, score) in enumerate(hits, start=1):
            candidates.setdefault(mid, Candidate(mid)).legs[leg] = (rank, score)

    def rank_in(cand: Candidate, leg: str) -> int | None:
        """The candidate's rank in `leg`: its own, else (a leg that cannot see it yet) its
        best rank elsewhere, else None (missed: counted as last)."""
        if leg in cand.legs:
            return cand.legs[leg][0]
        if leg in waiting.get(cand.id, ()):
            return min(r for r, _ in cand.legs.values())
        return None

    for leg, hits in legs.items():
        if not hits:
            continue
        weight = settings.leg_weights.get(leg, 1.0)
        if settings.fusion == "rrf":
            for cand in candidates.values():
                at = rank_in(cand, leg)
                if at is not None:
                    cand.fused += weight / (settings.rrf_k + at)
            continue
        scores = [s for _, s in hits]
        # A candidate missing from this leg gets the leg's minimum, as if ranked last. But a
        # matching leg that returned fewer hits than asked returned every match: the others
        # match nothing (score 0), and the scale is taken over the whole pool, so one exact
        # unique match stands out as far as it is rare instead of scoring z = 1.
        population = scores
        if leg in MATCH_LEGS and len(hits) < settings.candidates_per_leg:
            population = scores + [0.0] * (len(candidates) - len(hits))
        mean = sum(population) / len(population)
        std = math.sqrt(sum((s - mean) ** 2 for s in population) / len(population))
        floor = (min(population) - mean) / std if std > 0 else 0.0
        for cand in candidates.values():
            at = rank_in(cand, leg)
            if at is None or at > len(hits):
                z = floor
            else:
                z = (scores[at - 1] - mean) / std if std > 0 else 1.0
            cand.fused += weight * z
    return candidates


def rank(ctx: RankContext, legs: dict[str, list[tuple[int, float]]]) -> list[Candidate]:
    """Fuse the legs, run the ranking stages, and return candidates best first.

    Each candidate's `row` holds only the columns the stages read (RANK_COLUMNS): a pool is
    hundreds of memories, of which a caller shows a few. `load_rows` fills in whole rows for
    the candidates a caller keeps."""
    cands = list(fuse(legs, ctx.settings, not_indexed(ctx.db, legs)).values())
    for stage in POOL_STAGES:
        cands = stage(cands, ctx)
    rows = get_memories(ctx.db, [c.id for c in cands], RANK_COLUMNS)
    cands = [c for c in cands if c.id in rows]
    for cand in cands:
        cand.row = rows[cand.id]
    for stage in ROW_STAGES:
        cands = stage(cands, ctx)
    cands.sort(key=lambda c: (-c.score, -c.fused, c.id))
    return cands


def load_rows(db: Database, cands: list[Candidate]) -> list[Candidate]:
    """Whole memory rows for the ranked candidates a caller keeps (see `rank`)."""
    rows = get_memories(db, [c.id for c in cands])
    for cand in cands:
        cand.row = rows.get(cand.id, cand.row)
    return cands


# The legs whose raw scores a hit's relevance reads (memcli.retrieval.relevance).
SIGNAL_LEGS = ("sparse", "dense")


def assess(db: Database, embedder: Embedder | None, sparse: SpladeEncoder | None, text: str,
           filters: Filters, settings: RetrievalSettings, legs: dict[str, list[tuple[int, float]]],
           cands: list[Candidate], calibration: judge.Calibration | None = None
           ) -> list[Candidate]:
    """Set each candidate's `relevance` (memcli.retrieval.relevance) and return them.

    A leg that stopped at its limit (`candidates_per_leg`) before reaching a candidate is run
    again over the candidates it missed alone: each hit is judged by its own score, never by
    where other memories cut a list. The sparse and dense scores count only from the models
    the calibration was fitted with, and only for a memory that leg could see (indexed)."""
    if not cands:
        return cands
    calibration = calibration or judge.shipped()
    use_dense = ("dense" in legs and embedder is not None
                 and embedder.model_id == calibration.embedder)
    use_sparse = ("sparse" in legs and sparse is not None
                  and sparse.model_id == calibration.sparse)
    used = {"dense": use_dense, "sparse": use_sparse}
    scores = {leg: dict(legs.get(leg, ())) for leg in SIGNAL_LEGS}
    again = [leg for leg in SIGNAL_LEGS
             if used[leg] and len(legs[leg]) >= settings.candidates_per_leg]
    missing = sorted({c.id for c in cands for leg in again if c.id not in scores[leg]})
    if missing:
        more = run_legs(db, embedder if "dense" in again else None, text,
                        replace(filters, ids=tuple(missing)),
                        settings.model_copy(update={"leg_weights": dict.fromkeys(again, 1.0),
                                                    "candidates_per_leg": len(missing)}),
                        sparse=sparse if "sparse" in again else None)
        for leg in again:
            scores[leg].update(more.get(leg, ()))
    unseen: set[int] = set()
    if use_sparse:  # no sparse score: no shared term, or no sparse terms written yet
        lacking = [c.id for c in cands if c.id not in scores["sparse"]]
        if lacking:
            waiting = backlog.still_waiting(db, lacking, dense=False, sparse=True)
            unseen = {mid for mid, (_, no_terms) in waiting.items() if no_terms}
    terms = judge.query_terms(text)
    for cand in cands:
        signals = judge.Signals(
            coverage=judge.coverage(terms, cand.row.get("content") or ""),
            terms=terms.count,
            sparse=(scores["sparse"].get(cand.id, 0.0)
                    if use_sparse and cand.id not in unseen else None),
            # No cosine after the whole leg: the memory has no vector (yet).
            dense=scores["dense"].get(cand.id) if use_dense else None)
        cand.signals = signals
        cand.relevance = judge.relevance(signals, calibration)
    return cands


def judged_top(db: Database, embedder: Embedder | None, sparse: SpladeEncoder | None,
               text: str, filters: Filters, settings: RetrievalSettings,
               legs: dict[str, list[tuple[int, float]]], ranked: list[Candidate], top_k: int,
               threshold: float | None) -> list[Candidate]:
    """The first `top_k` candidates with their relevance; with `threshold`, the first `top_k`
    whose relevance reaches it (judged a window at a time, down the ranking)."""
    def judge(cands: list[Candidate]) -> list[Candidate]:
        return assess(db, embedder, sparse, text, filters, settings, legs, cands)

    if threshold is None:
        return judge(ranked[:top_k])
    kept: list[Candidate] = []
    window = max(top_k, 50)
    for start in range(0, len(ranked), window):
        kept += [c for c in judge(ranked[start:start + window])
                 if (c.relevance or 0.0) >= threshold]
        if len(kept) >= top_k:
            break
    return kept[:top_k]


def source_ids(row: dict[str, Any]) -> list[int]:
    """The memory ids a derived memory (a summary) was made from: `source_ids` holds ids or
    `mem:<id>` refs."""
    raw = row.get("source_ids") or "[]"
    values = json.loads(raw) if isinstance(raw, str) else raw
    found = (str(value).removeprefix("mem:") for value in values)
    return [int(text) for text in found if text.isdigit()]


def cap_summaries(db: Database, embedder: Embedder | None, sparse: SpladeEncoder | None,
                  text: str, filters: Filters, settings: RetrievalSettings,
                  legs: dict[str, list[tuple[int, float]]], cands: list[Candidate]) -> None:
    """A summary is no more relevant than the best of the turns it summarises (ground truth
    first: a model's summary may have drifted from what was said). The turns are judged on
    their own signals, shown or not, wherever they sit in the tenant's memory; whole rows
    (`load_rows`) are needed to know a summary."""
    wanted = {c.id: source_ids(c.row) for c in cands if c.row.get("kind") == "summary"}
    sources = sorted({i for ids in wanted.values() for i in ids})
    if not sources:
        return
    rows = get_memories(db, sources, RANK_COLUMNS)
    turns = [Candidate(mid, row=row) for mid, row in rows.items()]
    # Every leg that ran is run again over the turns alone (a limit of 0 marks each leg as
    # stopped before reaching them), in the tenant, whatever the query's narrower scope.
    scope = Filters(tenant_id=filters.tenant_id, all_tenants=filters.all_tenants,
                    states=("active", "superseded"))
    assess(db, embedder, sparse, text, scope, settings.model_copy(update={"candidates_per_leg": 0}),
           {leg: [] for leg in legs if leg in SIGNAL_LEGS}, turns)
    judged = {c.id: c.relevance or 0.0 for c in turns}
    for cand in cands:
        own = [judged[i] for i in wanted.get(cand.id, ()) if i in judged]
        if own and cand.relevance is not None:
            cand.relevance = min(cand.relevance, max(own))
