"""Schema versions through PRAGMA user_version: an append-only list of migrations.

A fresh database gets `schema.sql` (the whole current schema) in one transaction. An older
database gets each missing migration, each in its own transaction with its version bump.
A database newer than this code is refused. tests/store/test_store.py checks that a fresh database
and an upgraded one end up with the same schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memcli.config import bundled_text
from memcli.errors import SchemaError
from memcli.store.sqlite.fts import register_scope_function

if TYPE_CHECKING:
    from memcli.store.sqlite.connection import Database


def schema_sql() -> str:
    return bundled_text("schema.sql")


def _v1(db: Database) -> None:
    # Version 1, the first schema, frozen in its own file.
    db.conn.execute(bundled_text("store/schema_v1.sql"))


def _v2(db: Database) -> None:
    # memories_fts gains a `scope` column of hashed tenant/user/session tokens. An FTS5 table
    # cannot add a column, so it is rebuilt from `memories` (it is derived): the context column
    # is again each episode's previous episode in its session, as ingest writes it.

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


# Schema 3's entity tables, frozen here as schema.sql spells them (a later change to schema.sql
# gets a migration of its own; this text must not follow it).
_V3_ENTITY_TABLES = """
CREATE TABLE IF NOT EXISTS entities (
    id         INTEGER PRIMARY KEY,
    tenant_id  TEXT NOT NULL DEFAULT 'default',
    kind       TEXT NOT NULL,
    norm       TEXT NOT NULL,
    display    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (tenant_id, kind, norm)
);
CREATE INDEX IF NOT EXISTS entities_norm ON entities (norm);
CREATE TABLE IF NOT EXISTS entity_aliases (
    alias     TEXT NOT NULL,
    entity_id INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    PRIMARY KEY (alias, entity_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memory_entities (
    memory_id INTEGER NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    entity_id INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    PRIMARY KEY (memory_id, entity_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS memory_entities_entity ON memory_entities (entity_id, memory_id);
"""


def _v3(db: Database) -> None:
    # Entities get a tenant: until now one "alice" row was shared by every tenant naming her.
    # SQLite cannot change a UNIQUE constraint in place, and dropping `entities` while links
    # reference it would cascade, so the three tables are copied out (temp), dropped children
    # first, re-created and refilled. An entity keeps its id for the tenant of its oldest
    # linked memory; every other tenant mentioning it gets a row of its own and its links move
    # there. Aliases cannot be told apart by tenant: each copy gets the entity's aliases
    # (`memcli rebuild` recomputes them from each tenant's own text).
    db.conn.execute("""
        CREATE TEMP TABLE v3_links AS SELECT me.memory_id, me.entity_id, m.tenant_id
            FROM memory_entities me JOIN memories m ON m.id = me.memory_id;
        CREATE TEMP TABLE v3_owner AS SELECT e.id, coalesce((SELECT l.tenant_id FROM v3_links l
                WHERE l.entity_id = e.id ORDER BY l.memory_id LIMIT 1), 'default') AS tenant_id,
            e.kind, e.norm, e.display, e.created_at FROM entities e;
        CREATE TEMP TABLE v3_aliases AS SELECT alias, entity_id FROM entity_aliases;
        DROP TABLE memory_entities;
        DROP TABLE entity_aliases;
        DROP TABLE entities;""")
    db.conn.execute(_V3_ENTITY_TABLES)
    db.conn.execute("""
        INSERT INTO entities (id, tenant_id, kind, norm, display, created_at)
            SELECT id, tenant_id, kind, norm, display, created_at FROM v3_owner;
        INSERT INTO entities (tenant_id, kind, norm, display, created_at)
            SELECT DISTINCT l.tenant_id, o.kind, o.norm, o.display, o.created_at
            FROM v3_links l JOIN v3_owner o ON o.id = l.entity_id
            WHERE l.tenant_id <> o.tenant_id;
        INSERT INTO memory_entities (memory_id, entity_id)
            SELECT l.memory_id, e.id FROM v3_links l JOIN v3_owner o ON o.id = l.entity_id
            JOIN entities e ON e.tenant_id = l.tenant_id AND e.kind = o.kind
                           AND e.norm = o.norm;
        INSERT OR IGNORE INTO entity_aliases (alias, entity_id)
            SELECT a.alias, e.id FROM v3_aliases a JOIN v3_owner o ON o.id = a.entity_id
            JOIN entities e ON e.kind = o.kind AND e.norm = o.norm;
        DROP TABLE v3_links;
        DROP TABLE v3_owner;
        DROP TABLE v3_aliases;""")


def _v4(db: Database) -> None:
    # Schema 4 is PostgreSQL's (sparse_df kept by a trigger on memory_sparse, read-only for a
    # tenant role: memcli/store/postgres/v4_sparse_df.sql). SQLite has no roles, and its
    # sparse write path keeps counting in the writer's statements; the step exists so that
    # both engines keep one numbering of schema versions.
    del db


def _v5(db: Database) -> None:
    # Schema 5 is PostgreSQL's too (a GIN index over the sparse vectors' term ids:
    # memcli/store/postgres/v5_sparse_terms.sql); SQLite's postings already reach only the
    # memories holding a query term. One numbering of schema versions for both engines.
    del db


def _v6(db: Database) -> None:
    # Schema 6 is PostgreSQL's as well (memory_sparse gets its memory's tenant, and the term
    # index becomes (tenant_id, term ids): memcli/store/postgres/v6_sparse_tenant.sql); SQLite
    # keeps postings, not those vectors and their index. One numbering for both engines.
    del db


# Schema 6's CHECK on events.kind, and schema 7's (the same text with `command` added).
_V6_KINDS = "'task_update', 'artifact'))"
_V7_KINDS = "'task_update', 'artifact', 'command'))"


def _v7(db: Database) -> None:
    # Events gain the kind `command`: memcli's own writes record one before deriving their rows
    # (memcli/ledger/commands.py). SQLite cannot alter a CHECK, and copying `events` into a new
    # table would fire its append-only triggers and the cascade to `artifacts`; a CHECK that
    # only widens is one of the changes SQLite documents as safe to make in the stored schema
    # text (https://sqlite.org/lang_altertable.html#otheralter: no row is reread or rewritten,
    # every stored row satisfies the wider check). The schema cookie is bumped so every open
    # connection reloads the schema.
    text = db.scalar("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'events'")
    if _V7_KINDS in text:
        return
    if text.count(_V6_KINDS) != 1:
        raise SchemaError(f"database {db.path}: the events table is not schema 6's",
                          "restore it from a backup, or export and import it into a new file")
    cookie = int(db.scalar("PRAGMA schema_version"))
    db.conn.execute("PRAGMA writable_schema = ON")
    try:
        db.execute("UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = 'events'",
                   (text.replace(_V6_KINDS, _V7_KINDS),))
        db.conn.execute(f"PRAGMA schema_version = {cookie + 1}")
    finally:
        db.conn.execute("PRAGMA writable_schema = OFF")


# The append-only guard on events, as schema.sql spells it (schema 8 lifts it for one statement).
_EVENTS_NO_UPDATE = """CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END"""
ROLE_REWRITE = ("SET actor_type = CASE actor_type WHEN 'user' THEN 'human'"
                " WHEN 'assistant' THEN 'agent' END WHERE actor_type IN ('user', 'assistant')")


def _v8(db: Database) -> None:
    # One role vocabulary (memcli.core.roles): imports, the agent hooks and MCP stored the chat
    # spelling (user, assistant), the CLI and HTTP the PRD's (human, agent), so a `role`
    # filter missed one or the other. The rows take the PRD's words. Events are append-only:
    # their guard is dropped for this one statement, inside this migration's transaction, and
    # made again (an event's content_hash keeps the spelling it was written with: it only
    # tells a repeated record, and an imported turn is known by its event id).
    db.conn.execute("DROP TRIGGER IF EXISTS events_no_update")
    db.conn.execute(f"UPDATE events {ROLE_REWRITE}")
    db.conn.execute(_EVENTS_NO_UPDATE)
    db.conn.execute(f"UPDATE memories {ROLE_REWRITE}")


# Append only. Never edit a released migration: add a new one and update schema.sql to match.
MIGRATIONS: list[Callable[[Database], None]] = [_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8]
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
