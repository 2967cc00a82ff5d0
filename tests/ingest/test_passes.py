"""The dense and the sparse pass of a document batch run side by side, and store what one after
the other would: `memcli embed` (Memory.embed_pending) and ingest."""

from __future__ import annotations

import threading

import apsw
import pytest

from memcli import Memory
from memcli.providers.embedders import HashEmbedder
from memcli.providers.splade import SpladeEncoder

pytestmark = pytest.mark.slow  # SPLADE-tiny's real weights

TEXTS = [
    "I moved to Lisbon in March and work from a cafe near the river.",
    "Anika visits on 21 March; we plan a trip to Sintra.",
    "The deploy failed because the migration locked the users table.",
    "用户每天早上喝咖啡。",
    "Remind me to renew the passport before June.",
]
RECORDS = [{"user_id": "u1", "session_id": "s1", "content": {"text": t}} for t in TEXTS]
# Long enough for a loaded machine; a pass that waits for the other in vain fails after it.
RENDEZVOUS_S = 30


class MeetingEmbedder(HashEmbedder):
    """Embeds documents only once the sparse pass has started too: run one after the other,
    the two never meet and the barrier breaks."""

    def __init__(self, barrier: threading.Barrier) -> None:
        super().__init__(64)
        self.barrier = barrier

    def embed_documents(self, texts):
        self.barrier.wait()
        return super().embed_documents(texts)


class MeetingSplade(SpladeEncoder):
    def __init__(self, barrier: threading.Barrier) -> None:
        super().__init__()
        self.barrier = barrier

    def encode_documents(self, texts, batch_size: int = 32):
        self.barrier.wait()
        return super().encode_documents(texts, batch_size)


def _rows(path, sql: str) -> list[tuple]:
    with apsw.Connection(str(path)) as conn:
        return list(conn.execute(sql))


def _sparse_reference(tmp_path) -> list[tuple]:
    """memory_sparse after the sparse pass alone (no embedder, so no second pass)."""
    path = tmp_path / "reference.db"
    with Memory.open(path, sparse=SpladeEncoder()) as memory:
        memory.ingest(RECORDS, defer_embed=True)
        memory.embed_pending()
    return _rows(path, "SELECT memory_id, terms FROM memory_sparse ORDER BY memory_id")


def _check_stored(path, reference: list[tuple]) -> None:
    vectors = _rows(path, "SELECT m.content, v.embedding FROM memories m"
                          " JOIN memory_vectors v ON v.memory_id = m.id ORDER BY m.id")
    assert len(vectors) == len(TEXTS)
    expected = HashEmbedder(64).embed_documents([content for content, _ in vectors])
    assert [blob for _, blob in vectors] == [row.tobytes() for row in expected]
    assert _rows(path, "SELECT memory_id, terms FROM memory_sparse ORDER BY memory_id") \
        == reference


@pytest.mark.parametrize("batch_size", [256, 2])
def test_embed_runs_the_two_passes_side_by_side(tmp_path, batch_size) -> None:
    barrier = threading.Barrier(2, timeout=RENDEZVOUS_S)
    path = tmp_path / "m.db"
    with Memory.open(path, embedder=HashEmbedder(64), sparse=SpladeEncoder()) as memory:
        memory.ingest(RECORDS, defer_embed=True)
    with Memory.open(path, embedder=MeetingEmbedder(barrier),
                     sparse=MeetingSplade(barrier)) as memory:
        assert memory.embed_pending(batch_size=batch_size) == len(TEXTS)
        assert memory.embed_pending(batch_size=batch_size) == 0
    _check_stored(path, _sparse_reference(tmp_path))


def test_ingest_runs_the_two_passes_side_by_side(tmp_path) -> None:
    barrier = threading.Barrier(2, timeout=RENDEZVOUS_S)
    path = tmp_path / "m.db"
    with Memory.open(path, embedder=MeetingEmbedder(barrier),
                     sparse=MeetingSplade(barrier)) as memory:
        memory.ingest(RECORDS)
    _check_stored(path, _sparse_reference(tmp_path))


def test_an_error_in_either_pass_is_raised(tmp_path) -> None:
    class Failing(SpladeEncoder):
        def encode_documents(self, texts, batch_size: int = 32):
            raise RuntimeError("sparse pass failed")

    path = tmp_path / "m.db"
    with Memory.open(path, embedder=HashEmbedder(64), sparse=SpladeEncoder()) as memory:
        memory.ingest(RECORDS, defer_embed=True)
    with Memory.open(path, embedder=HashEmbedder(64), sparse=Failing()) as memory:
        with pytest.raises(RuntimeError, match="sparse pass failed"):
            memory.embed_pending()
    # Nothing half-written: the batch's transaction never started.
    assert _rows(path, "SELECT count(*) FROM memory_vectors") == [(0,)]
