"""A scripted reranking server on 127.0.0.1, for tests and benches (not a test module).

It speaks both wire formats of the common `/rerank` endpoint, as the real servers do:
text-embeddings-inference's (`{"query", "texts"}` answered by `[{"index", "score"}]`) and the
Cohere/Jina body of vLLM, Infinity, llama.cpp's server, Cohere and Jina (`{"model", "query",
"documents", "top_n"}` answered by `{"results": [{"index", "relevance_score"}]}`, best first,
at most `top_n`). A body of neither shape is refused with 422, as a real server refuses it, and
so is a TEI body of more than 32 texts (TEI's default `--max-client-batch-size`).

    with RerankStub(scores={"green tea": 0.9}) as stub:   # a text holding a key scores its value
        ...  # point memcli at stub.url ("http://127.0.0.1:<port>/rerank")
        stub.fail(status=500)                # every later request: HTTP 500
        stub.fail(raw_body="<html>oops")     # or a body that is not JSON, or `delay` seconds
        assert stub.requests[0]["texts"] == [...]
        assert stub.headers[0]["authorization"] == "Bearer k"

Texts holding no key score 0.0; equal scores keep the order sent. Tests get a started one
from the `rerank_stub` fixture (tests/conftest.py).
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.stubserver import StubHandler, StubServer

__all__ = ["RerankStub"]

TEI_MAX_BATCH = 32


class RerankStub(StubServer):
    """The server. `start()` (or `with`) binds a free port; `close()` stops it."""

    def __init__(self, scores: dict[str, float] | None = None) -> None:
        super().__init__()
        self.scores = dict(scores or {})
        self.requests: list[dict[str, Any]] = []  # every parsed body, in arrival order
        self.headers: list[dict[str, str]] = []  # the headers of each, names lowercased
        self.paths: list[str] = []
        self.status = 200
        self.raw_body: str | None = None  # answered verbatim instead of the scores
        self.delay = 0.0

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return _handler_for(self)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/rerank"

    def fail(self, *, status: int = 200, raw_body: str | None = None, delay: float = 0.0) -> None:
        """Answer every later request with `status`, `raw_body` verbatim, after `delay` s."""
        self.status, self.raw_body, self.delay = status, raw_body, delay

    def score(self, query: str, text: str) -> float:
        return sum(value for key, value in self.scores.items() if key in text)

    def answer(self, body: dict[str, Any]) -> tuple[int, Any]:
        """The status and JSON answer to one body, in the wire format it was sent in."""
        query = body.get("query")
        if isinstance(body.get("texts"), list) and isinstance(query, str):  # TEI
            if len(body["texts"]) > TEI_MAX_BATCH:  # its --max-client-batch-size default
                return 422, {
                    "error": f"batch size {len(body['texts'])} > maximum allowed "
                    f"batch size {TEI_MAX_BATCH}",
                    "error_type": "Validation",
                }
            return 200, [
                {"index": i, "score": self.score(query, t)} for i, t in enumerate(body["texts"])
            ]
        if isinstance(body.get("documents"), list) and isinstance(query, str):  # Cohere, Jina
            docs = body["documents"]
            ranked = sorted(range(len(docs)), key=lambda i: -self.score(query, docs[i]))
            top = ranked[: body.get("top_n") or len(docs)]
            return 200, {
                "id": "stub",
                "results": [
                    {"index": i, "relevance_score": self.score(query, docs[i])} for i in top
                ],
            }
        return 422, {"error": "expected query with texts or documents"}

    def _record(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.paths.append(path)


def _handler_for(stub: RerankStub) -> type[BaseHTTPRequestHandler]:
    class Handler(StubHandler):
        def do_POST(self) -> None:
            body = self.read_body()
            stub._record(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            if stub.delay and stub._closing.wait(stub.delay):
                return  # stub closed while sleeping
            if stub.raw_body is not None:
                self.send_body(stub.status, stub.raw_body)
                return
            status, answer = (
                stub.answer(body)
                if stub.status == 200
                else (stub.status, {"error": "scripted failure"})
            )
            self.send_body(status, answer)

    return Handler
