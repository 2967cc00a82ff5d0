"""memcli: long-term memory for AI agents in one local SQLite file.

Library API: `Memory` (open a database, ingest, query, history, purge), the typed results in
`memcli.models`, and the error tree in `memcli.errors`.
"""

from memcli.errors import MemcliError
from memcli.memory import Memory

__all__ = ["Memory", "MemcliError", "__version__"]
__version__ = "0.1.0"
