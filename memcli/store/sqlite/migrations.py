"""Schema versions through PRAGMA user_version: an append-only list of migrations.

A fresh database gets `schema.sql` (the whole current schema) in one transaction. An older
database gets each missing migration, each in its own transaction with its version bump.
A database newer than this code is refused. tests/test_store.py checks that a fresh database
and an upgraded one end up with the same schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memcli.errors import SchemaError

if TYPE_CHECKING:
    from memcli.store.sqlite.connection import Database


def schema_sql() -> str:
    from memcli.config import bundled_text

    return bundled_text("schema.sql")


def _v1(db: Database) -> None:
    # Version 1, the first schema, frozen in its own file.
    from memcli.config import bundled_text

    db.conn.execute(bundled_text("store/schema_v1.sql"))


def _v2(db: Database) -> None:
    # memories_fts gains a `scope` column of hashed tenant/user/session tokens. An FTS5 table
    # cannot add a column, so it is rebuilt from `memories` (it is derived): the context column
    # is again each episode's previous episode in its session, as ingest writes it.
    from memcli.store.sqlite.fts import register_scope_function

    register_scope_function(db)
    db.conn.execute("DROP TABLE memories_fts")
    db.conn.execute("""CREATE VIRTUAL TABLE memories_fts USING fts5 (
        content, context, scope,
        content = '',
        contentless_delete = 1,
        tokenize = 'porter unicode61 remove_diacritics 2'
    )""")
    db.conn.execute("""
        INSERT INTO memories_fts (rowid, content, context, scope)
        SELECT id, content,
               CASE WHEN kind = 'episode' AND session_id IS NOT NULL THEN coalesce(lag(content)
                    OVER (PARTITION BY tenant_id, session_id, kind = 'episode'
                          ORDER BY event_seq, chunk_index), '') ELSE '' END,
               memcli_scope_terms(tenant_id, user_id, session_id)
        FROM memories""")


# Append only. Never edit a released migration: add a new one and update schema.sql to match.
MIGRATIONS: list[Callable[[Database], None]] = [_v1, _v2]
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


def table_names(db: Database) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
