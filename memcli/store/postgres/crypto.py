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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
        return self._trace(row)


# -- key rotation and status: the PostgreSQL twins of the seam's Backend.sealed_columns,
# raw_rows and reseal (SQLite: pragma_table_list, a cursor without tracer, a SQL function).
def sealed_columns(db: PgDatabase) -> list[tuple[str, str]]:
    """Every text (table, column) of memcli's schema, where sealed values may sit."""
    return [(t, c) for t, c in db.execute(
        "SELECT c.table_name, c.column_name FROM information_schema.columns c"
        " JOIN pg_tables t ON t.schemaname = c.table_schema AND t.tablename = c.table_name"
        " WHERE c.table_schema = current_schema() AND c.data_type = 'text'"
        " ORDER BY c.table_name, c.ordinal_position")]


def raw_rows(db: PgDatabase, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows as stored (ciphertext stays ciphertext)."""
    return [tuple(row.values()) for row in db.stream(sql, params, raw=True)]


def reseal(db: PgDatabase, convert: Callable[[Any], Any], prefix: str) -> int:
    """Replace every value starting with `prefix` by `convert(value)` in the caller's
    transaction, in Python (no SQL function): per column, read the sealed values and write
    each back by ctid. The append-only events trigger is disabled for the transaction only
    (ALTER TABLE is transactional, as SQLite's drop and re-create of its trigger)."""
    assert db.in_transaction, "reseal runs inside the caller's transaction"
    done = 0
    db.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
    for table, column in sealed_columns(db):
        rows = raw_rows(db, f'SELECT ctid::text, "{column}" FROM "{table}"'
                            f' WHERE left("{column}", ?) = ?', (len(prefix), prefix))
        for ctid, value in rows:
            db.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE ctid = ?::tid',
                       (convert(value), ctid))
            done += 1
    db.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    return done
