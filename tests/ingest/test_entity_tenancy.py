"""Entities belong to a tenant (schema 3): the same name in two tenants is two entity rows, each
tenant's profile and links stay its own, and upgrading a schema-2 database (SQLite and
PostgreSQL) splits an entity two tenants shared."""

from __future__ import annotations

import json

import apsw
import pytest

from memcli.store.sqlite import migrations
from memcli.store.sqlite.connection import Database
from tests.support.backend import rows
from tests.support.records import ndjson, turns


@pytest.mark.backends
def test_the_same_name_in_two_tenants_is_two_entities(cli, db_path):
    for tenant, word in (("a", "apricots"), ("b", "blueberries")):
        records = turns(f"s{tenant}", [f"I met Alice with {word}", "I met Alice again"])
        result = cli("ingest", "--tenant", tenant, "-", input=ndjson(records))
        assert result.exit_code == 0, result.stderr
    assert rows(db_path, "SELECT tenant_id, norm FROM entities WHERE norm = 'alice'"
                         " ORDER BY tenant_id") == [("a", "alice"), ("b", "alice")]
    # Every link joins a memory to an entity of the memory's own tenant.
    assert rows(db_path, "SELECT count(*) FROM memory_entities me"
                         " JOIN memories m ON m.id = me.memory_id"
                         " JOIN entities e ON e.id = me.entity_id"
                         " WHERE e.tenant_id <> m.tenant_id") == [(0,)]
    for tenant in ("a", "b"):
        result = cli("entity", "Alice", "--tenant", tenant, "--json")
        assert result.exit_code == 0, result.stderr
        profile = json.loads(result.stdout)
        assert profile["tenant_id"] == tenant and profile["mentions"] == 2
        other = "blueberries" if tenant == "a" else "apricots"
        assert other not in result.stdout


def _shared_entity_rows(execute) -> None:
    """Schema-2 rows: memories 1 (tenant b, the oldest) and 2, 3 (tenant a) all link entity 7
    'alice', which has two aliases; entity 8 'bob' is linked by nobody."""
    for mid, tenant in ((1, "b"), (2, "a"), (3, "a")):
        execute("INSERT INTO memories (id, content, tenant_id, event_time, created_at,"
                " updated_at) VALUES (?, ?, ?, 't', 't', 't')", (mid, f"I met Alice {mid}",
                                                                 tenant))
    execute("INSERT INTO entities (id, kind, norm, display, created_at) VALUES"
            " (7, 'name', 'alice', 'Alice', 't'), (8, 'name', 'bob', 'Bob', 't')")
    execute("INSERT INTO entity_aliases (alias, entity_id) VALUES ('alice', 7), ('ally', 7)")
    for mid in (1, 2, 3):
        execute("INSERT INTO memory_entities (memory_id, entity_id) VALUES (?, 7)", (mid,))


def _check_split(location) -> None:
    entities = rows(location, "SELECT id, tenant_id, norm FROM entities ORDER BY id")
    assert entities[:2] == [(7, "b", "alice"), (8, "default", "bob")]
    assert [(t, n) for _i, t, n in entities[2:]] == [("a", "alice")]
    copy = entities[2][0]
    assert rows(location, "SELECT memory_id, entity_id FROM memory_entities ORDER BY 1") == [
        (1, 7), (2, copy), (3, copy)]
    assert rows(location, "SELECT alias, entity_id FROM entity_aliases ORDER BY 2, 1") == [
        ("alice", 7), ("ally", 7), ("alice", copy), ("ally", copy)]


def test_sqlite_upgrade_to_3_splits_a_shared_entity(tmp_path):
    path = tmp_path / "v2.db"
    db = Database.__new__(Database)  # no migration on open: build schema 2 by hand
    db.path = str(path)
    db.conn = apsw.Connection(str(path))
    db.vec_enabled = False
    for version, step in enumerate(migrations.MIGRATIONS[:2], start=1):
        with db.transaction():
            step(db)
            db.conn.execute(f"PRAGMA user_version = {version}")
    _shared_entity_rows(db.conn.execute)
    db.conn.close()
    Database(path).close()  # migrates to 3
    assert rows(path, "PRAGMA user_version") == [(migrations.LATEST,)]
    _check_split(path)


def test_postgresql_upgrade_to_3_splits_a_shared_entity(pg_db):
    psycopg = pytest.importorskip("psycopg")
    from memcli.store.postgres import connect
    from memcli.store.postgres.migrations import LATEST, schema_sql
    from memcli.store.postgres.placeholders import rewrite

    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute(schema_sql())  # schema 2, as a database made before migration 3
        conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '2')")

        def execute(sql, params=()):
            plan = rewrite(sql)
            conn.execute(plan.sql, plan.bind(params))

        _shared_entity_rows(execute)
    connect(pg_db).close()  # migrates to 3
    assert rows(pg_db, "SELECT value FROM meta WHERE key = 'schema_version'") == [
        (str(LATEST),)]
    _check_split(pg_db)

