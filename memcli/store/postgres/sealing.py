"""`high` rows on PostgreSQL: the generic Sealer (memcli/store/sealing.py) runs as is.

The Sealer holds the key, seals on write and, through its `_trace`, opens every `enc:v1:`
value of a row (or drops the row when there is no key). On SQLite apsw calls `_trace` for every
row of every query; psycopg has no such hook, so PgDatabase calls it itself on each row of
`execute`/`query`/`scalar`/`stream` (not `stream(raw=True)`) once `PgBackend.install_decryption`
set `db.row_trace`, and leaves out the rows it maps to None. Here: the PostgreSQL twins of
`Backend.sealed_values`, `raw_rows` and `reseal`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memcli.store.postgres.connection import PgDatabase


# -- key rotation and status: the PostgreSQL twins of the seam's Backend.sealed_values,
# raw_rows and reseal (SQLite: pragma_table_list, a cursor without tracer, a SQL function).
def sealed_columns(db: PgDatabase, data_type: str = "text") -> list[tuple[str, str]]:
    """Every text (table, column) of memcli's schema, where sealed values may sit. A `high`
    artifact body is sealed text stored as UTF-8 in `bytea` (`data_type="bytea"` lists those
    columns; `reseal` and `sealed_values` cover both kinds)."""
    return [(t, c) for t, c in db.execute(
        "SELECT c.table_name, c.column_name FROM information_schema.columns c"
        " JOIN pg_tables t ON t.schemaname = c.table_schema AND t.tablename = c.table_name"
        " WHERE c.table_schema = current_schema() AND c.data_type = ?"
        " ORDER BY c.table_name, c.ordinal_position", (data_type,))]


def raw_rows(db: PgDatabase, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows as stored (ciphertext stays ciphertext)."""
    return [tuple(row.values()) for row in db.stream(sql, params, raw=True)]


def sealed_values(db: PgDatabase, prefix: str) -> dict[str, list[str]]:
    """`table.column` -> its stored values starting with `prefix`, as text: the text columns,
    then the bytea ones (a `high` artifact body: sealed text kept as UTF-8), the same set
    `reseal` rewrites, so `key status` counts what `key rotate` reseals."""
    found: dict[str, list[str]] = {}
    for table, column in sealed_columns(db):
        values = [r[0] for r in raw_rows(db, f'SELECT "{column}" FROM "{table}"'
                                             f' WHERE left("{column}", ?) = ?',
                                         (len(prefix), prefix))]
        if values:
            found[f"{table}.{column}"] = values
    head = prefix.encode()
    for table, column in sealed_columns(db, "bytea"):
        values = [bytes(r[0]).decode() for r in raw_rows(
            db, f'SELECT "{column}" FROM "{table}" WHERE substring("{column}" FROM 1 FOR ?) = ?',
            (len(head), head))]
        if values:
            found[f"{table}.{column}"] = values
    return found


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
    for table, column in sealed_columns(db, "bytea"):
        head = prefix.encode()
        rows = raw_rows(db, f'SELECT ctid::text, "{column}" FROM "{table}"'
                            f' WHERE substring("{column}" FROM 1 FOR ?) = ?', (len(head), head))
        for ctid, value in rows:
            db.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE ctid = ?::tid',
                       (convert(bytes(value).decode()).encode(), ctid))
            done += 1
    db.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    return done
