"""A reranker on a model server the user runs: the common `/rerank` endpoint, over HTTP.

A cross-encoder reads the query and a memory together, so it knows meaning the fused legs
only approximate. memcli sends it the fused top N of a query and reorders them by its scores
(memcli.retrieval.rerank); nothing is sent unless `rerank.url` is configured.

Two wire formats (docs/guides/reranking.md lists which server speaks which):
- "tei", text-embeddings-inference: `{"query", "texts", "truncate": true}` answered by
  `[{"index", "score"}, ...]`;
- "cohere", the body Cohere and Jina defined and vLLM, Infinity and llama.cpp's server
  accept: `{"model", "query", "documents", "top_n"}` answered by
  `{"results": [{"index", "relevance_score"}, ...]}`.

Every failure (refused, timeout, an HTTP error, an answer that is not one finite score per
text) raises `RerankError` with a one-line reason: the query keeps its fused order. `httpx`
(the `openai` client's own transport) is imported on the first call, never at start-up.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any, Protocol

from memcli.errors import MemcliError

if TYPE_CHECKING:
    import httpx

    from memcli.config import RerankSettings

_SHOWN = 120  # characters of a bad answer quoted in the reason
# text-embeddings-inference refuses more texts per request than its `--max-client-batch-size`,
# 32 by default ("batch size 50 > maximum allowed batch size 32", HTTP 422). A cross-encoder
# scores each pair on its own, so a larger top is sent in requests of 32.
TEI_BATCH = 32


class RerankError(MemcliError):
    """The reranker could not be used for this query; the message says why, in one line."""


class Reranker(Protocol):
    """What the ranking needs of a reranker (a fake for tests implements the same)."""

    model_id: str
    top_n: int

    def score(self, query: str, texts: list[str]) -> list[float]:
        """One score per text, in the order given; higher is more relevant."""
        ...

    def close(self) -> None: ...


class HttpReranker:
    """A `/rerank` endpoint reached through one `httpx.Client` (its connections kept alive
    between the queries of a process, such as `memcli serve`)."""

    def __init__(
        self,
        url: str,
        *,
        wire: str = "tei",
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 5.0,
        top_n: int = 20,
    ) -> None:
        self.url = url
        self.wire = wire
        self.model = model
        self.model_id = model or url
        self.api_key = api_key
        self.timeout = timeout
        self.top_n = top_n
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                import httpx

                headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
                # A plain-http endpoint (a local server) has no TLS to verify: skipping the CA
                # bundle saves its load, 0.08-0.18 s of a new process on a busy 2-core machine
                # (bench/results/rerank-latency.md). Redirects are not followed, so the client
                # never reaches an https URL with it.
                self._client = httpx.Client(
                    timeout=self.timeout, headers=headers, verify=not self.url.startswith("http://")
                )
            return self._client

    def body(self, query: str, texts: list[str]) -> dict[str, Any]:
        """The request body in this server's wire format."""
        if self.wire == "tei":
            # TEI refuses a text longer than its model's window unless told to cut it.
            return {"query": query, "texts": texts, "truncate": True}
        body: dict[str, Any] = {"query": query, "documents": texts, "top_n": len(texts)}
        if self.model:
            body["model"] = self.model
        return body

    def score(self, query: str, texts: list[str]) -> list[float]:
        if not texts:
            return []
        if self.wire == "tei" and len(texts) > TEI_BATCH:
            return [
                score
                for start in range(0, len(texts), TEI_BATCH)
                for score in self.score(query, texts[start : start + TEI_BATCH])
            ]
        import httpx

        try:
            reply = self._http().post(self.url, json=self.body(query, texts))
        except httpx.TimeoutException as exc:
            raise RerankError(f"no answer from {self.url} within {self.timeout:g} s") from exc
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
            raise RerankError(f"cannot reach {self.url}: {_one_line(str(exc))}") from exc
        if reply.status_code != 200:
            raise RerankError(
                f"{self.url} answered HTTP {reply.status_code}: {_one_line(reply.text)[:_SHOWN]}"
            )
        try:
            answer = reply.json()
        except ValueError as exc:
            raise RerankError(
                f"{self.url} answered with no JSON: {_one_line(reply.text)[:_SHOWN]!r}"
            ) from exc
        return parse_scores(answer, len(texts))

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def parse_scores(answer: Any, count: int) -> list[float]:
    """One score per text from either wire format's answer (a server that accepted one body
    and answers in the other's shape still counts), or RerankError saying what is wrong."""
    if isinstance(answer, dict) and isinstance(answer.get("results"), list):
        items, key = answer["results"], "relevance_score"
    elif isinstance(answer, list):
        items, key = answer, "score"
    else:
        raise RerankError(
            f'the answer is neither a list of scores nor {{"results": [...]}}: '
            f"{_one_line(str(answer))[:_SHOWN]!r}"
        )
    scores: dict[int, float] = {}
    for item in items:
        index = item.get("index") if isinstance(item, dict) else None
        value = item.get(key) if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise RerankError(f"the answer holds an item with no valid index: {item!r}"[:_SHOWN])
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
        ):
            raise RerankError(f"the answer holds an item with no finite {key}: {item!r}"[:_SHOWN])
        scores[index] = float(value)
    if len(scores) != count:
        raise RerankError(f"the answer scores {len(scores)} of the {count} texts sent")
    return [scores[i] for i in range(count)]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def make_reranker(settings: RerankSettings) -> HttpReranker | None:
    """The configured reranker, or None (no `rerank.url`: the default, offline)."""
    if not settings.url:
        return None
    return HttpReranker(
        settings.url,
        wire=settings.wire,
        model=settings.model,
        api_key=settings.api_key,
        timeout=settings.timeout,
        top_n=settings.top_n,
    )
