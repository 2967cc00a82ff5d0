"""`Database`: what every store module and the library may use of an open database, on any
engine, and the waits it uses.

Two classes provide it: SQLite's (memcli.store.sqlite.connection.Database, over apsw) and
PostgreSQL's (memcli.store.postgres.connection.PgDatabase, over psycopg). Neither names this
Protocol: it describes the surface they share, so that a store module annotated with it uses
nothing one engine lacks (an engine's own connection, `conn`, stays inside its package and
its Backend). Both are opened by memcli.store.opener.open_database.

SQL passed to these methods is portable (`?` and `:name` placeholders; the engine's spelling of
what differs comes from `dialect` and `backend`). Rows come back as tuples, `query`/`stream`
rows as dicts; a `high` row is opened by the Sealer (`crypto`) or left out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from memcli.store.backend import Backend
    from memcli.store.dialect import Dialect
    from memcli.store.sealing import Sealer

__all__ = ["BUSY_TIMEOUT", "HINT_WAIT", "Database", "Rows"]

# How long a writer waits for the write lock before the command gives up with exit 75
# (`MEMCLI_BUSY_TIMEOUT`, seconds). Write transactions are short (models and embeddings run
# before the lock is taken), so a wait this long means something holds the lock abnormally.
BUSY_TIMEOUT = 30.0
# Read commands record access counts and metrics in passing: hints, dropped after this wait
# rather than holding up the answer behind a long write.
HINT_WAIT = 1.0

# A statement's parameters: positional (`?`) or named (`:name`).
Params = Sequence[Any] | Mapping[str, Any] | None


class Rows(Protocol):
    """What `execute` returns: the statement's rows, as tuples (an apsw cursor on SQLite)."""

    def __iter__(self) -> Iterator[Any]: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Database(Protocol):
    """An open, migrated memcli database (see the module docstring)."""

    path: str  # a file path, or a server location with its password masked (messages)

    @property
    def backend(self) -> Backend[Any]:
        """The engine's operations (memcli.store.backend), each taking its own engine's class."""
        ...

    @property
    def dialect(self) -> Dialect:
        """SQL fragments in the engine's spelling (memcli.store.dialect)."""
        ...

    busy_timeout: float  # seconds a writer waits for the write lock (then exit 75)
    read_only: bool  # opened for reading only (a read command's second connection)
    vec_enabled: bool  # the dense leg can run (SQLite: sqlite-vec loaded)
    vec_warning: str | None  # why it cannot, said once by the CLI
    crypto: Sealer  # `high` values: seals on write, opens on read

    # -- statements
    def execute(self, sql: str, params: Params = None) -> Rows:
        """Run one statement; its rows."""
        ...

    def executemany(self, sql: str, seq: Iterable[Any]) -> Any:
        """Run one statement for each parameter set of `seq`."""
        ...

    def query(self, sql: str, params: Params = None) -> list[dict]:
        """Rows as dicts (column name -> value)."""
        ...

    def stream(self, sql: str, params: Params = None, *, raw: bool = False
               ) -> Iterator[dict]:
        """Rows as dicts, one at a time; `raw`: values as stored (ciphertext stays so)."""
        ...

    def scalar(self, sql: str, params: Params = None) -> Any:
        """The first column of the first row (None: no row)."""
        ...

    def insert(self, sql: str, params: Params = None) -> int:
        """Run an `INSERT ... RETURNING id`; that id."""
        ...

    def change_count(self, sql: str, params: Params = None) -> int:
        """Run an UPDATE/DELETE/INSERT; how many rows it changed."""
        ...

    # -- transactions
    @property
    def in_transaction(self) -> bool: ...

    def transaction(self, *, wait: float | None = None
                    ) -> contextlib.AbstractContextManager[None]:
        """One atomic unit of work, holding the writer lock (`wait`: seconds to wait for it
        instead of `busy_timeout`)."""
        ...

    def savepoint(self) -> contextlib.AbstractContextManager[None]:
        """A nested unit inside the current transaction, rolled back alone on error."""
        ...

    # -- the `meta` table, size, end
    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...

    def size_bytes(self) -> int:
        """Bytes the database takes on disk."""
        ...

    def close(self) -> None: ...
