"""`high` rows on PostgreSQL: the same Sealer as SQLite's, minus apsw's row tracer.

memcli/store/crypto.py's `Sealer` holds the key, seals on write and, through its `_trace`,
opens every `enc:v1:` value of a row (or drops the row when there is no key). On SQLite apsw
calls `_trace` for every row of every query; psycopg has no such hook, so PgDatabase calls it
itself on each row of `execute`/`query`/`scalar`/`stream` (not `stream(raw=True)`), and
leaves out the rows it maps to None. Only the parts that talk to apsw are replaced here:
finding whether the database has a key id yet, and installing (`db.row_trace`, the hook
the seam's `Backend.install_decryption(db, trace)` can set directly once merged).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcli.store.crypto import META_KEY_ID, Sealer

if TYPE_CHECKING:
    from memcli.store.postgres.connection import PgDatabase


class PgSealer(Sealer):
    def __init__(self, db: PgDatabase) -> None:  # noqa: D107 - Sealer's, without apsw
        self.db = db  # type: ignore[assignment]
        self._key = None
        self._loaded = False
        self.skipped = 0
        self.notice = None
        self._installed = False
        self._data_version = None
        self._has_meta = db.scalar("SELECT to_regclass('meta') IS NOT NULL")
        if self._has_meta and db.get_meta(META_KEY_ID) is not None:
            self.install()

    def install(self) -> None:
        self._installed = True
        self.db.row_trace = self.open_row

    def refresh(self) -> None:
        """A connection kept open (a server's) starts decrypting once another connection
        made the first `high` write. PostgreSQL has no `data_version`: one indexed read."""
        if not self._installed and self._has_meta and self.db.get_meta(META_KEY_ID):
            self.install()

    def open_row(self, row: tuple) -> tuple | None:
        """The row with its sealed values opened; None when it must be left out (no key)."""
        return self._trace(None, row)
