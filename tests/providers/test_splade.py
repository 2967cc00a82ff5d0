"""Tests for the numpy SPLADE-tiny encoder: real vendored weights, no fakes.

The model loads once per process (~0.3 s); every encode here is a handful of short texts, so the
whole file stays well under a few seconds.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from importlib import resources

import pytest
from tokenizers import Tokenizer

from memcli.providers.splade import (
    MIN_WEIGHT,
    MODEL_ID,
    VOCAB_SIZE,
    SpladeEncoder,
)

# Every test here but two loads the real model (~0.3 s once per process).
pytestmark = pytest.mark.slow

DOG_DOC = "Melanie: I adopted a dog last week, his name is Max."
OTHER_DOC = "Caroline: The weather in Paris was rainy all weekend."


@pytest.fixture(scope="module")
def encoder() -> SpladeEncoder:
    return SpladeEncoder()


@pytest.fixture(scope="module")
def vocabulary() -> Tokenizer:
    """The vendored WordPiece tokenizer, to read a term id as its token."""
    folder = resources.files("memcli.weights").joinpath("splade_tiny")
    return Tokenizer.from_str(folder.joinpath("tokenizer.json").read_text(encoding="utf-8"))


def sparse_dot(query: dict[int, float], doc: dict[int, float]) -> float:
    """Dot product of two sparse vectors (the SPLADE relevance score)."""
    return sum(w * doc[t] for t, w in query.items() if t in doc)


def top_tokens(vocabulary: Tokenizer, vec: dict[int, float], n: int) -> list[str]:
    return [vocabulary.id_to_token(t) for t, _ in sorted(vec.items(), key=lambda kv: -kv[1])[:n]]


def test_identity(encoder: SpladeEncoder) -> None:
    assert encoder.model_id == MODEL_ID == "rasyosef/splade-tiny@fp16"
    assert encoder.vocab_size == VOCAB_SIZE == 30522
    # Pinned: a changed vocabulary must be a deliberate change (stored term ids would lose meaning).
    assert encoder.vocab_hash == "0f052197aac305fe42f378b5c61554b7bacb34b8be4af83fec2cfdcdffbc9973"


def test_import_is_lazy() -> None:
    code = (
        "import sys, memcli; before = set(sys.modules); import memcli.providers.splade; "
        "new = set(sys.modules) - before; "
        "print(sorted(m for m in new if m.split('.')[0] in {'numpy', 'tokenizers', 'safetensors'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_deterministic(encoder: SpladeEncoder) -> None:
    first = encoder.encode_documents([DOG_DOC, OTHER_DOC])
    again = encoder.encode_documents([DOG_DOC, OTHER_DOC])
    assert first == again
    assert encoder.encode_query("What pet does Melanie have?") == encoder.encode_query(
        "What pet does Melanie have?"
    )


def test_output_types_and_weights(encoder: SpladeEncoder) -> None:
    (vec,) = encoder.encode_documents([DOG_DOC])
    assert vec
    assert all(isinstance(t, int) and 0 <= t < VOCAB_SIZE for t in vec)
    assert all(isinstance(w, float) and w >= encoder.min_weight for w in vec.values())


def test_document_top_terms_include_its_words(encoder: SpladeEncoder,
                                              vocabulary: Tokenizer) -> None:
    (vec,) = encoder.encode_documents([DOG_DOC])
    top = top_tokens(vocabulary, vec, 20)
    for word in ("dog", "adopted", "max", "melanie", "week"):
        assert word in top


def test_query_ranks_relevant_document_first(encoder: SpladeEncoder,
                                             vocabulary: Tokenizer) -> None:
    query = encoder.encode_query("What pet does Melanie have?")
    dog, other = encoder.encode_documents([DOG_DOC, OTHER_DOC])
    assert sparse_dot(query, dog) > 2 * sparse_dot(query, other)
    assert {"pet", "melanie"} <= set(top_tokens(vocabulary, query, 10))


def test_vocabulary_expansion(encoder: SpladeEncoder, vocabulary: Tokenizer) -> None:
    # "dog" is not in the document, yet the two vectors share terms: that is SPLADE's expansion.
    doc_text = "Melanie: I adopted a puppy last week."
    query = encoder.encode_query("dog")
    (doc,) = encoder.encode_documents([doc_text])
    literal = set(re.findall(r"\w+", doc_text.lower()))
    shared = {vocabulary.id_to_token(t) for t in query.keys() & doc.keys()}
    assert shared - literal, shared
    assert sparse_dot(query, doc) > 0


def test_empty_and_blank_texts(encoder: SpladeEncoder) -> None:
    assert encoder.encode_query("") == {}
    assert encoder.encode_documents([]) == []
    docs = encoder.encode_documents(["", "   \n\t", DOG_DOC])
    assert docs[0] == {} and docs[1] == {} and docs[2]


def test_non_ascii_does_not_crash(encoder: SpladeEncoder) -> None:
    texts = ["Café naïve résumé", "日本語のテキスト", "🙂🎉", "Ünïcödé\u200b\x00control", "\ufeff"]
    out = encoder.encode_documents(texts)
    assert len(out) == len(texts)
    assert out[0]  # accents are stripped to known words
    assert isinstance(encoder.encode_query("Где живёт Мелани?"), dict)


def test_batching_and_padding_do_not_change_vectors(encoder: SpladeEncoder) -> None:
    texts = [DOG_DOC, "short", OTHER_DOC + " " + OTHER_DOC, "Hi!"]
    together = encoder.encode_documents(texts, batch_size=32)
    one_by_one = [encoder.encode_documents([t])[0] for t in texts]
    for a, b in zip(together, one_by_one, strict=True):
        # Terms near the threshold may flip when float32 sums reorder; compare what matters.
        common = a.keys() & b.keys()
        assert len(common) >= 0.97 * max(len(a), len(b))
        assert max(abs(a[t] - b[t]) for t in common) < 1e-4


def _assert_same_terms(a: dict[int, float], b: dict[int, float]) -> None:
    """The same weights within float32 noise: the same tokens encoded in another batch take
    other BLAS kernels (on other CPUs too), which differ in the last bits; a term that sits on
    the weight threshold may then appear on one side only, with a weight at the threshold."""
    assert len(a.keys() & b.keys()) >= 0.97 * max(len(a), len(b))
    for term in a.keys() | b.keys():
        x, y = a.get(term), b.get(term)
        if x is not None and y is not None:
            assert abs(x - y) <= 1e-4
        else:
            assert (x if y is None else y) <= MIN_WEIGHT + 1e-4


def test_truncation() -> None:
    # Words past the token limit cannot matter. Small limits exercise the same code cheaply.
    small = SpladeEncoder(doc_max_tokens=16, query_max_tokens=8)
    filler = "alpha " * 40
    _assert_same_terms(small.encode_query(filler + "zebra"), small.encode_query(filler))
    (long_doc, same) = small.encode_documents([filler + "zebra", filler])
    _assert_same_terms(long_doc, same)
    assert (SpladeEncoder().doc_max_tokens, SpladeEncoder().query_max_tokens) == (256, 64)


def test_max_terms_prunes_to_heaviest(encoder: SpladeEncoder) -> None:
    full = encoder.encode_documents([DOG_DOC])[0]
    pruned = SpladeEncoder(max_terms=10).encode_documents([DOG_DOC])[0]
    assert len(pruned) == 10
    assert sorted(pruned.values()) == sorted(full.values())[-10:]


def test_rejects_a_bare_string(encoder: SpladeEncoder) -> None:
    with pytest.raises(TypeError):
        encoder.encode_documents("not a list")  # type: ignore[arg-type]


def test_vendored_files_match_notice() -> None:
    folder = resources.files("memcli.weights").joinpath("splade_tiny")
    notice = folder.joinpath("NOTICE").read_text(encoding="utf-8")
    vendored = notice.split("Vendored files")[1].split("Conversion")[0]
    expected = dict(re.findall(r"^  (\S+) .*\n\s+sha256 ([0-9a-f]{64})", vendored, re.MULTILINE))
    assert set(expected) == {"model.fp16.safetensors", "tokenizer.json", "LICENSE"}
    for name, digest in expected.items():
        assert hashlib.sha256(folder.joinpath(name).read_bytes()).hexdigest() == digest, name


def test_a_query_encodes_on_one_blas_thread(encoder: SpladeEncoder, monkeypatch) -> None:
    """encode_query limits BLAS to one thread while it runs (and only then)."""
    from threadpoolctl import threadpool_info

    from memcli.providers import splade

    def blas_threads() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads()
    if not before:
        pytest.skip("numpy has no BLAS threadpool threadpoolctl can see")
    seen: list[list[int]] = []
    real = splade._Model.pooled_logits

    def spy(self, ids, mask, **kwargs):
        seen.append(blas_threads())
        return real(self, ids, mask, **kwargs)

    monkeypatch.setattr(splade._Model, "pooled_logits", spy)
    assert encoder.encode_query("does Melanie have a dog")
    assert seen and all(n == 1 for n in seen[0])
    assert blas_threads() == before
    seen.clear()
    encoder.encode_documents(["Melanie adopted a puppy"])
    assert seen and seen[0] == before


def test_the_first_query_of_a_process_is_on_one_blas_thread() -> None:
    """In a fresh process the first encode_query is limited too: the BLAS controller is built
    after numpy has loaded its BLAS library, not before (it would then control nothing)."""
    script = (
        "from threadpoolctl import threadpool_info\n"
        "from memcli.providers import splade\n"
        "seen = []\n"
        "real = splade._Model.pooled_logits\n"
        "def spy(self, ids, mask, **kw):\n"
        "    seen.append([i['num_threads'] for i in threadpool_info()"
        " if i['user_api'] == 'blas'])\n"
        "    return real(self, ids, mask, **kw)\n"
        "splade._Model.pooled_logits = spy\n"
        "splade.SpladeEncoder().encode_query('does Melanie have a dog')\n"
        "print(seen[0])\n"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout.strip()
    if out == "[]":
        pytest.skip("numpy has no BLAS threadpool threadpoolctl can see")
    assert out == "[1]", out
