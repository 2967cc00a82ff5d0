"""The dense and the sparse pass over the same documents, run side by side.

Why: SPLADE-tiny computes on one BLAS thread (memcli/config.py's `thread_defaults`) and e5-small's
onnxruntime session on one thread per core. One after the other, a core idles through the whole
SPLADE pass: for ~200-character turns that pass is ~27 % of the CPU time of the two (e5-small
~47 texts per CPU-second, SPLADE-tiny ~127). Here the sparse pass runs on a worker thread while
the dense pass runs on the caller's, so the two share both cores; numpy's matrix products and
onnxruntime's `run` release the GIL, and the tokenizers' Python parts are a few % of either.
Both encoders lock their own calls, so nothing else changes for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from memcli.providers.embedders import Embedder
    from memcli.providers.splade import SpladeEncoder

D = TypeVar("D")
S = TypeVar("S")


def side_by_side(dense: Callable[[], D], sparse: Callable[[], S]) -> tuple[D, S]:
    """`dense()` on this thread and `sparse()` on a worker, both results; an error of either
    is raised after both have stopped (no pass outlives the call)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memcli-sparse") as pool:
        later = pool.submit(sparse)
        try:
            first = dense()
        except BaseException:
            later.cancel()  # a pass already running is waited for by the pool's exit
            raise
        return first, later.result()


def encode_both(embedder: Embedder | None, dense_texts: Sequence[str],
                sparse: SpladeEncoder | None, sparse_texts: Sequence[str],
                ) -> tuple[Any, list[dict[int, float]]]:
    """float32 vectors of `dense_texts` (None without an embedder or texts) and sparse terms
    of `sparse_texts` ([] without an encoder or texts), the two passes side by side."""

    def dense() -> Any:
        if embedder is None or not dense_texts:
            return None
        return embedder.embed_documents(dense_texts).astype("float32")

    def terms() -> list[dict[int, float]]:
        if sparse is None or not sparse_texts:
            return []
        return sparse.encode_documents(sparse_texts)

    if embedder is None or sparse is None or not dense_texts or not sparse_texts:
        return dense(), terms()  # one pass: no thread
    return side_by_side(dense, terms)
