"""SPLADE-tiny learned-sparse encoder, a BERT forward pass in plain numpy.

The checkpoint is rasyosef/splade-tiny (BERT-Tiny, 2 layers, 128 hidden, 4.4M parameters), vendored
in float16 under ``memcli/weights/splade_tiny`` (see the NOTICE there) and computed in float32.
A text becomes ``{vocab term id: weight}`` with the standard SPLADE pooling: for every vocabulary
term, the max over the text's tokens of ``log(1 + relu(mlm_logit))``. Query and document use the
same model; the score of a document is the dot product of the two sparse dicts.

numpy, tokenizers and safetensors are imported only when the first text is encoded, so importing
this module costs nothing on the start-up path of commands that never touch SPLADE.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memcli.config import package_path
from memcli.errors import MemcliError

if TYPE_CHECKING:
    import numpy as np
    from tokenizers import Tokenizer

MODEL_ID = "rasyosef/splade-tiny@fp16"
VOCAB_SIZE = 30522
DOC_MAX_TOKENS = 256
QUERY_MAX_TOKENS = 64
# Weights under this are dropped: such a term adds at most ~0.15 to a dot product where relevant
# matches score 5-30, yet the tail makes up ~7% of the postings. On LoCoMo 0.05 left recall@5-50
# unchanged (0.1 cut 13% of postings for -0.1 R@50; keeping only the top 64 terms per document
# lost 1.2 R@10, so there is no top-N cap by default). bench/results/experiments.md.
MIN_WEIGHT = 0.05

# Where the weights live inside the package: one place to change if they move.
_WEIGHTS_DIR = "weights/splade_tiny"
_WEIGHTS_FILE = "model.fp16.safetensors"
_TOKENIZER_FILE = "tokenizer.json"

_SEP_ID = 102
# A WordPiece token covers at least one character; cutting absurdly long inputs before tokenizing
# keeps a pasted megabyte from costing seconds when only the first 256 tokens are used.
_CHARS_PER_TOKEN_CAP = 32


class SpladeUnavailableError(MemcliError):
    """The SPLADE encoder cannot run: a runtime dependency or the vendored weights are missing."""

    exit_code = 1


class _Model:
    """Loaded weights (float32, pre-transposed for ``x @ W``) and the tokenizer."""

    def __init__(self) -> None:
        try:
            import numpy as np
            from safetensors.numpy import load as load_safetensors
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise SpladeUnavailableError(
                f"the SPLADE encoder needs numpy, tokenizers and safetensors ({exc.name} missing)",
                hint="pip install numpy tokenizers safetensors",
            ) from exc

        folder = package_path(_WEIGHTS_DIR)
        try:
            raw = (folder / _WEIGHTS_FILE).read_bytes()
            tokenizer_json = (folder / _TOKENIZER_FILE).read_text(encoding="utf-8")
        except OSError as exc:
            raise SpladeUnavailableError(
                f"SPLADE model files missing from {folder}",
                hint="reinstall memcli",
            ) from exc

        config = _read_metadata(raw)
        tensors = load_safetensors(raw)
        self.np = np

        def w(name: str) -> np.ndarray:
            return tensors[name].astype(np.float32)

        def lin(prefix: str) -> tuple[np.ndarray, np.ndarray]:
            # torch Linear stores (out, in); transposing once here makes every call x @ W.
            return np.ascontiguousarray(w(prefix + ".weight").T), w(prefix + ".bias")

        def norm(prefix: str) -> tuple[np.ndarray, np.ndarray]:
            return w(prefix + ".gamma"), w(prefix + ".beta")

        self.eps = float(config.get("layer_norm_eps", "1e-12"))
        self.heads = int(config.get("num_attention_heads", "2"))
        self.word = w("bert.embeddings.word_embeddings.weight")
        self.position = w("bert.embeddings.position_embeddings.weight")
        self.token_type0 = w("bert.embeddings.token_type_embeddings.weight")[0]
        self.emb_norm = norm("bert.embeddings.LayerNorm")
        self.layers: list[dict[str, Any]] = []
        n_layers = 1 + max(int(k.split(".")[3]) for k in tensors if k.startswith("bert.encoder."))
        for i in range(n_layers):
            p = f"bert.encoder.layer.{i}."
            self.layers.append(
                {
                    # Query, key and value side by side: one product instead of three.
                    "qkv": tuple(
                        np.concatenate(parts, axis=-1)
                        for parts in zip(
                            lin(p + "attention.self.query"),
                            lin(p + "attention.self.key"),
                            lin(p + "attention.self.value"),
                            strict=True,
                        )
                    ),
                    "o": lin(p + "attention.output.dense"),
                    "ln1": norm(p + "attention.output.LayerNorm"),
                    "ffn_in": lin(p + "intermediate.dense"),
                    "ffn_out": lin(p + "output.dense"),
                    "ln2": norm(p + "output.LayerNorm"),
                }
            )
        self.head_dense = lin("cls.predictions.transform.dense")
        self.head_norm = norm("cls.predictions.transform.LayerNorm")
        # The MLM decoder is tied to the word embeddings (tie_word_embeddings), so it is not stored.
        # Queries multiply by the transposed view; a contiguous copy, ~1.5x faster per product
        # but ~40 ms to make (a cold `memcli query` would pay that for one product), is made
        # on the first document batch, where the product runs once per text.
        self._decoder_copy: np.ndarray | None = None
        self.decoder_bias = w("cls.predictions.bias")
        if self.word.shape[0] != VOCAB_SIZE:
            raise SpladeUnavailableError(
                f"unexpected SPLADE vocabulary size {self.word.shape[0]}", hint="reinstall memcli"
            )

        self.tokenizer: Tokenizer = Tokenizer.from_str(tokenizer_json)
        # Padding and truncation are done here, per call, so one tokenizer serves docs and queries.
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()

    # -- building blocks -------------------------------------------------------------------------

    def _layer_norm(self, x: np.ndarray, params: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        centred = x - mean
        var = (centred * centred).mean(axis=-1, keepdims=True)
        return centred / self.np.sqrt(var + self.eps) * params[0] + params[1]

    def _gelu(self, x: np.ndarray) -> np.ndarray:
        # BERT's "gelu" is the exact erf form, not the tanh approximation; numpy has no erf, so use
        # Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7, far below float16 weight noise).
        np = self.np
        z = np.abs(x) * (1.0 / math.sqrt(2.0))
        t = 1.0 / (1.0 + 0.3275911 * z)
        poly = t * (
            0.254829592
            + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
        )
        erf = 1.0 - poly * np.exp(-z * z)
        return 0.5 * x * (1.0 + np.copysign(erf, x))

    def _softmax(self, x: np.ndarray) -> np.ndarray:
        x = x - x.max(axis=-1, keepdims=True)
        e = self.np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)

    # -- forward ---------------------------------------------------------------------------------

    def encoder(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """BERT encoder: (batch, length) ids and 0/1 mask -> (batch, length, hidden)."""
        np = self.np
        batch, length = ids.shape
        x = self.word[ids] + self.position[:length] + self.token_type0
        hidden = x.shape[-1]
        # Rows = tokens: every dense layer is then one plain 2-D BLAS product.
        x = self._layer_norm(x.reshape(batch * length, hidden), self.emb_norm)
        head_dim = hidden // self.heads
        scale = 1.0 / math.sqrt(head_dim)
        # Padded keys get a large negative score so softmax gives them zero weight.
        key_bias = ((1.0 - mask) * -1e9).astype(np.float32)[:, None, None, :]
        for layer in self.layers:
            qkv = _dense(x, layer["qkv"])
            # (tokens, 3 * hidden) -> 3 x (batch, heads, length, head_dim)
            q, k, v = qkv.reshape(batch, length, 3, self.heads, head_dim).transpose(2, 0, 3, 1, 4)
            probs = self._softmax((q @ k.transpose(0, 1, 3, 2)) * scale + key_bias)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
            x = self._layer_norm(_dense(ctx, layer["o"]) + x, layer["ln1"])
            inner = self._gelu(_dense(x, layer["ffn_in"]))
            x = self._layer_norm(_dense(inner, layer["ffn_out"]) + x, layer["ln2"])
        return x.reshape(batch, length, hidden)

    def decoder(self, copy: bool) -> np.ndarray:
        """The MLM decoder, (hidden, vocab): the view, or the contiguous copy."""
        if not copy:
            return self.word.T
        if self._decoder_copy is None:
            self._decoder_copy = self.np.ascontiguousarray(self.word.T)
        return self._decoder_copy

    def pooled_logits(self, ids: np.ndarray, mask: np.ndarray,
                      copy_decoder: bool = True) -> np.ndarray:
        """Per text, the max MLM logit of every vocabulary term over its real tokens: (batch, V).

        log(1 + relu(.)) is monotone, so taking the max before applying it is the same as SPLADE's
        max of activations, and the head runs only on real tokens, never on padding.
        """
        np = self.np
        states = self.encoder(ids, mask)
        lengths = mask.sum(axis=1).astype(np.int64).tolist()
        decoder = self.decoder(copy_decoder)
        out = np.empty((len(lengths), decoder.shape[1]), dtype=np.float32)
        for row, n in enumerate(lengths):
            t = self._gelu(_dense(states[row, :n], self.head_dense))
            t = self._layer_norm(t, self.head_norm)
            # One text at a time: its (n, 30522) logits stay in cache for the max, which measured
            # ~2x faster than one batch-wide product followed by a segmented max.
            np.max(t @ decoder, axis=0, out=out[row])
        out += self.decoder_bias
        return out


_BLAS: dict[str, Any] = {}


def _blas_single_thread() -> Any:
    """A context that limits numpy's BLAS to one thread (threadpoolctl; the controller that
    finds the loaded BLAS libraries is built once per process, after numpy has loaded its BLAS:
    built before, it would find none and limit nothing for the rest of the process)."""
    controller = _BLAS.get("controller")
    if controller is None:
        import numpy  # noqa: F401  (loads the BLAS library the controller must find)
        from threadpoolctl import ThreadpoolController

        controller = _BLAS["controller"] = ThreadpoolController()
    return controller.limit(limits=1, user_api="blas")


def _dense(x: np.ndarray, params: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """A linear layer, weights already transposed to (in, out)."""
    return x @ params[0] + params[1]


def _read_metadata(raw: bytes) -> dict[str, str]:
    """The ``__metadata__`` block of a safetensors file (its 8-byte length, then a JSON header)."""
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    return dict(header.get("__metadata__") or {})


class SpladeEncoder:
    """Encode texts into SPLADE sparse vectors ``{term_id: weight}`` over BERT's WordPiece vocab.

    Weights load on the first encode and are shared by every instance in the process.
    ``max_terms`` optionally keeps only the heaviest terms of each document (None keeps all).
    """

    model_id: str = MODEL_ID
    vocab_size: int = VOCAB_SIZE
    query_runtime = "numpy"  # what `memcli serve status` names

    _shared: _Model | None = None
    _load_lock = threading.Lock()

    def __init__(
        self,
        *,
        doc_max_tokens: int = DOC_MAX_TOKENS,
        query_max_tokens: int = QUERY_MAX_TOKENS,
        min_weight: float = MIN_WEIGHT,
        max_terms: int | None = None,
    ) -> None:
        if not 2 < doc_max_tokens <= 512 or not 2 < query_max_tokens <= 512:
            raise ValueError("token limits must be in 3..512 (BERT has 512 positions)")
        self.doc_max_tokens = doc_max_tokens
        self.query_max_tokens = query_max_tokens
        self.min_weight = min_weight
        self.max_terms = max_terms
        self._vocab_hash: str | None = None

    # -- public API ------------------------------------------------------------------------------

    @property
    def vocab_hash(self) -> str:
        """sha256 of the vocabulary (tokens in id order, newline-joined): term ids mean the same
        thing in two databases exactly when this matches."""
        if self._vocab_hash is None:
            tok = self._model().tokenizer
            joined = "\n".join(tok.id_to_token(i) or "" for i in range(self.vocab_size))
            self._vocab_hash = hashlib.sha256(joined.encode("utf-8")).hexdigest()
        return self._vocab_hash

    def encode_documents(
        self, texts: Sequence[str], batch_size: int = 32
    ) -> list[dict[int, float]]:
        """One sparse vector per text, in input order (truncated at ``doc_max_tokens``)."""
        return self._encode(texts, self.doc_max_tokens, batch_size, self.max_terms)

    def encode_query(self, text: str) -> dict[int, float]:
        """The sparse vector of one query (truncated at ``query_max_tokens``).

        On one BLAS thread: a query's matrices are tiny, and OpenBLAS's extra threads keep
        spinning after each call, taking a core from the SQL legs running beside it; with one
        thread a query at 100k memories answers in 47 ms p50 instead of 88."""
        with _blas_single_thread():
            return self._encode([text], self.query_max_tokens, 1, None, query=True)[0]

    def encode_queries(self, texts: Sequence[str]) -> list[dict[int, float]]:
        """`encode_query` of several texts in one padded batch, on one BLAS thread: the
        daemon's concurrent queries (memcli/providers/query_batches.py)."""
        with _blas_single_thread():
            return self._encode(texts, self.query_max_tokens, max(1, len(texts)), None,
                                query=True)

    def load(self) -> None:
        """Load the weights now (they otherwise load on the first encode)."""
        self._model()

    # -- internals -------------------------------------------------------------------------------

    @classmethod
    def _model(cls) -> _Model:
        if cls._shared is None:
            with cls._load_lock:
                if cls._shared is None:
                    cls._shared = _Model()
        return cls._shared

    def _encode(
        self, texts: Sequence[str], max_tokens: int, batch_size: int, max_terms: int | None,
        query: bool = False,
    ) -> list[dict[int, float]]:
        if isinstance(texts, str):
            raise TypeError("encode_documents takes a sequence of texts, not one string")
        results: list[dict[int, float]] = [{} for _ in texts]
        # Whitespace-only text has no tokens but [CLS]/[SEP]; the model would still "expand" those
        # into generic terms, which would make an empty memory match everything a little.
        todo = [i for i, t in enumerate(texts) if t and not t.isspace()]
        if not todo:
            return results
        model = self._model()
        np = model.np
        cap = max_tokens * _CHARS_PER_TOKEN_CAP
        encodings = model.tokenizer.encode_batch([texts[i][:cap] for i in todo])
        ids_list = []
        for enc in encodings:
            ids = enc.ids
            if len(ids) > max_tokens:
                ids = ids[: max_tokens - 1] + [_SEP_ID]
            ids_list.append(ids)
        # Sorting by length makes each padded batch nearly rectangular: little work on padding.
        order = sorted(range(len(todo)), key=lambda j: len(ids_list[j]))
        threshold = math.expm1(self.min_weight)  # compare logits, skip log1p on the 30k zeros
        for start in range(0, len(order), max(1, batch_size)):
            chunk = order[start : start + max(1, batch_size)]
            length = max(len(ids_list[j]) for j in chunk)
            ids = np.zeros((len(chunk), length), dtype=np.int64)
            mask = np.zeros((len(chunk), length), dtype=np.float32)
            for row, j in enumerate(chunk):
                ids[row, : len(ids_list[j])] = ids_list[j]
                mask[row, : len(ids_list[j])] = 1.0
            pooled = model.pooled_logits(ids, mask, copy_decoder=not query)
            for row, j in enumerate(chunk):
                logits = pooled[row]
                terms = np.flatnonzero(logits > threshold)
                weights = np.log1p(logits[terms])
                if max_terms is not None and len(terms) > max_terms:
                    keep = np.argpartition(-weights, max_terms)[:max_terms]
                    terms, weights = terms[keep], weights[keep]
                results[todo[j]] = dict(zip(terms.tolist(), weights.tolist(), strict=True))
        return results


_DEFAULT: list[SpladeEncoder] = []
_DEFAULT_LOCK = threading.Lock()


def default_encoder() -> SpladeEncoder:
    """The process's encoder with the default settings. One instance, so the queries of every
    request in `memcli serve` share one batch (memcli/providers/query_batches.py groups by
    model)."""
    with _DEFAULT_LOCK:
        if not _DEFAULT:
            _DEFAULT.append(SpladeEncoder())
        return _DEFAULT[0]
