"""memcli: long-term memory for AI agents in one local SQLite file.

Library API: `Memory` (open a database, ingest, query, history, purge), the typed results in
`memcli.core.records`, and the error tree in `memcli.errors`. `Memory` is imported on first use, so
light commands and `import memcli.core.tokens` do not pay for pydantic and the whole library.
"""

from __future__ import annotations

from memcli.core.version import __version__
from memcli.errors import MemcliError

# Not `from typing import TYPE_CHECKING`: every command's start imports this package first
# (the daemon client runs before anything else), and `typing` costs a few ms there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from memcli.operations.memory import Memory

__all__ = ["Memory", "MemcliError", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Memory":
        # start-up cost: the whole library, on first use
        from memcli.operations.memory import Memory  # noqa: PLC0415

        return Memory
    raise AttributeError(f"module 'memcli' has no attribute {name!r}")
