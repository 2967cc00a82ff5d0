"""A scripted OpenAI-compatible HTTP server on 127.0.0.1, for tests (not a test module).

Tests talk to it with the real `openai` client, so the whole path (HTTP, retries, timeouts,
parsing) runs as it would against Ollama or OpenAI. Replies come from a FIFO that each test
fills; every request body is recorded.

    with LLMStub() as stub:
        stub.enqueue('{"facts": []}')
        stub.enqueue("not json")                       # malformed content, HTTP 200
        stub.enqueue("bad format", status=400)          # error body {"error": {"message": ...}}
        stub.enqueue('{"a": 1}', delay=2.0)             # slow: trips a client timeout
        stub.enqueue("", raw_body="<html>oops</html>", content_type="text/html")
        ...  # point the client at stub.base_url ("http://127.0.0.1:<port>/v1")
        assert stub.requests[0]["model"] == "m"

An empty FIFO answers HTTP 500 with a message naming the request, so a missing `enqueue` shows
up as a clear failure. `POST /v1/embeddings` needs no script: it returns deterministic hashed
bag-of-words vectors of `embedding_dim`, so texts sharing words are similar.

In conftest.py: `from tests.support.llmstub import llm_stub  # noqa: F401` gives every test an
`llm_stub` fixture; or call `make_stub()` and use the result as a context manager.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.support.stubserver import StubHandler, StubServer

__all__ = ["LLMStub", "ScriptedReply", "llm_stub", "make_stub", "stub_embedding"]


@dataclass
class ScriptedReply:
    content: str
    status: int = 200
    delay: float = 0.0
    usage: tuple[int, int] | None = (10, 5)
    raw_body: str | bytes | None = None
    content_type: str = "application/json"
    finish_reason: str = "stop"
    headers: dict[str, str] = field(default_factory=dict)


def stub_embedding(text: str, dim: int) -> list[float]:
    """Hashed bag of words, L2-normalised: deterministic, and shared words mean similarity."""
    vec = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        slot = int.from_bytes(digest[:4], "little") % dim
        vec[slot] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0:  # no words: still a unit vector, so cosine never divides by zero
        vec[0], norm = 1.0, 1.0
    return [v / norm for v in vec]


class LLMStub(StubServer):
    """The server. `start()` (or `with`) binds a free port; `close()` stops it."""

    def __init__(self, *, embedding_dim: int = 64, model: str = "stub-model") -> None:
        super().__init__()
        self.embedding_dim = embedding_dim
        self.model = model
        self.requests: list[dict[str, Any]] = []  # every parsed request body, in arrival order
        self.paths: list[str] = []  # the path of each entry in `requests`
        self._queue: deque[ScriptedReply] = deque()

    # --- lifecycle ---------------------------------------------------------------------------

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return _handler_for(self)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting ---------------------------------------------------------------------------

    def enqueue(
        self,
        content: str,
        *,
        status: int = 200,
        delay: float = 0.0,
        usage: tuple[int, int] | None = (10, 5),
        raw_body: str | bytes | None = None,
        content_type: str = "application/json",
        finish_reason: str = "stop",
        headers: dict[str, str] | None = None,
    ) -> None:
        """Script the next chat reply.

        `content` is the assistant message (status 200) or the error message (other statuses).
        `usage=(prompt, completion)` tokens, or None to omit the usage block. `raw_body` replaces
        the whole HTTP body verbatim (with `content_type`), for non-JSON or broken bodies.
        """
        reply = ScriptedReply(
            content, status, delay, usage, raw_body, content_type, finish_reason, headers or {}
        )
        with self._lock:
            self._queue.append(reply)

    def enqueue_json(self, obj: Any, **kwargs: Any) -> None:
        """Script a reply whose content is `obj` serialised as JSON."""
        self.enqueue(json.dumps(obj), **kwargs)

    @property
    def pending(self) -> int:
        """Scripted replies not yet served (assert 0 to check a test used them all)."""
        with self._lock:
            return len(self._queue)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return self._bodies("/chat/completions")

    @property
    def embedding_requests(self) -> list[dict[str, Any]]:
        return self._bodies("/embeddings")

    def _bodies(self, suffix: str) -> list[dict[str, Any]]:
        with self._lock:
            pairs = list(zip(self.paths, self.requests, strict=True))
        return [body for path, body in pairs if path.endswith(suffix)]

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.paths.clear()

    # --- serving (called from handler threads) ----------------------------------------------

    def _record(self, path: str, body: dict[str, Any]) -> tuple[int, ScriptedReply | None]:
        with self._lock:
            self.requests.append(body)
            self.paths.append(path)
            return len(self.requests), (self._queue.popleft() if self._queue else None)

    def _chat_body(self, n: int, body: dict[str, Any], reply: ScriptedReply) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": f"chatcmpl-stub-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content},
                    "finish_reason": reply.finish_reason,
                }
            ],
        }
        if reply.usage is not None:
            p, c = reply.usage
            out["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
        return out

    def _embeddings_body(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = body.get("input", [])
        if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
            inputs = [inputs]
        as_b64 = body.get("encoding_format") == "base64"
        data = []
        for i, item in enumerate(inputs):
            # Token-id inputs are embedded by their text form: deterministic is all that counts.
            vec = stub_embedding(item if isinstance(item, str) else str(item), self.embedding_dim)
            emb: Any = vec
            if as_b64:
                emb = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        words = sum(len(str(x).split()) for x in inputs)
        return {
            "object": "list",
            "data": data,
            "model": body.get("model", self.model),
            "usage": {"prompt_tokens": words, "total_tokens": words},
        }


def _error(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _handler_for(stub: LLMStub) -> type[BaseHTTPRequestHandler]:
    class Handler(StubHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                data = [{"id": stub.model, "object": "model", "owned_by": "llmstub"}]
                self.send_body(200, {"object": "list", "data": data})
            else:
                self.send_body(404, _error(f"llmstub: no route GET {self.path}"))

        def do_POST(self) -> None:
            body = self.read_body()
            path = self.path.split("?")[0].rstrip("/")
            if path.endswith("/embeddings"):
                stub._record(path, body)
                self.send_body(200, stub._embeddings_body(body))
                return
            if not path.endswith("/chat/completions"):
                self.send_body(404, _error(f"llmstub: no route POST {self.path}"))
                return
            n, reply = stub._record(path, body)
            if reply is None:
                message = f"llmstub: no scripted reply left for chat request #{n} (call enqueue)"
                self.send_body(500, _error(message, "server_error"))
                return
            if reply.delay and stub._closing.wait(reply.delay):
                return  # stub closed while sleeping
            if reply.raw_body is not None:
                self.send_body(reply.status, reply.raw_body, reply.content_type, reply.headers)
            elif reply.status != 200:
                kind = "server_error" if reply.status >= 500 else "invalid_request_error"
                self.send_body(reply.status, _error(reply.content, kind), headers=reply.headers)
            else:
                out = stub._chat_body(n, body, reply)
                self.send_body(200, out, reply.content_type, reply.headers)

    return Handler


def make_stub(**kwargs: Any) -> LLMStub:
    """A started stub; close it (or use it in `with`). kwargs: embedding_dim, model."""
    return LLMStub(**kwargs).start()


@pytest.fixture
def llm_stub() -> Iterator[LLMStub]:
    """A started stub for one test, closed afterwards."""
    with make_stub() as stub:
        yield stub
