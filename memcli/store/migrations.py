"""Schema versions through PRAGMA user_version: an append-only list of migrations.

A fresh database gets `schema.sql` (the whole current schema) in one transaction. An older
database gets each missing migration, each in its own transaction with its version bump.
A database newer than this code is refused. tests/test_store.py checks that a fresh database
and an upgraded one end up with the same schema.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING

from memcli.errors import SchemaError

if TYPE_CHECKING:
    from memcli.store.connection import Database


def schema_sql() -> str:
    return resources.files("memcli").joinpath("schema.sql").read_text(encoding="utf-8")


def _v1(db: Database) -> None:
    # Version 1 is the first released schema: everything in schema.sql as of 0.1.
    db.conn.execute(schema_sql())


# Append only. Never edit a released migration: add a new one and update schema.sql to match.
MIGRATIONS: list[Callable[[Database], None]] = [_v1]
LATEST = len(MIGRATIONS)


def current_version(db: Database) -> int:
    return int(db.scalar("PRAGMA user_version"))


def check_version(db: Database) -> int:
    version = current_version(db)
    if version > LATEST:
        raise SchemaError(
            f"database {db.path} has schema version {version}, newer than this memcli "
            f"(supports up to {LATEST})",
            "upgrade memcli",
        )
    return version


def migrate(db: Database) -> int:
    """Bring the database to LATEST; returns the version it started from."""
    start = check_version(db)
    if start == LATEST:
        return start
    if start == 0 and not _has_tables(db):
        with db.transaction():
            db.conn.execute(schema_sql())
            db.conn.execute(f"PRAGMA user_version = {LATEST}")
        return start
    for version in range(start + 1, LATEST + 1):
        with db.transaction():
            # Another process may have migrated while we waited for the write lock.
            if current_version(db) >= version:
                continue
            MIGRATIONS[version - 1](db)
            db.conn.execute(f"PRAGMA user_version = {version}")
    return start


def _has_tables(db: Database) -> bool:
    return bool(db.scalar("SELECT count(*) FROM sqlite_schema WHERE type = 'table'"))
