"""memcli: long-term memory for AI agents in one local SQLite file.

Library API: `Memory` (open a database, ingest, query, history, purge), the typed results in
`memcli.models`, and the error tree in `memcli.errors`. `Memory` is imported on first use, so
light commands and `import memcli.tokens` do not pay for pydantic and the whole library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.errors import MemcliError

if TYPE_CHECKING:
    from memcli.memory import Memory

__all__ = ["Memory", "MemcliError", "__version__"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "Memory":
        from memcli.memory import Memory

        return Memory
    raise AttributeError(f"module 'memcli' has no attribute {name!r}")
