"""Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from memcli.providers import embedding
from memcli.providers.embedding import EmbedderError


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
        self.batch_size = min(embedding.check_batch_size(batch_size), self.max_batch)
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

    def embed_documents(self, texts: Sequence[str]) -> embedding.Vector:
        items = embedding.as_text_list(texts)
        if not items:
            return embedding.empty(self.dimension)
        rows: list[list[float]] = []
        for start in range(0, len(items), self.batch_size):
            rows.extend(self._request(items[start : start + self.batch_size]))
        return embedding.normalise_rows(rows, f"model {self.model!r}")

    def embed_query(self, text: str) -> embedding.Vector:
        return embedding.first_row(self.embed_documents([text]))


# --------------------------------------------------------------------------- hashing (tests)
