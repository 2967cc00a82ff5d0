"""SPLADE's document counts (`sparse_df`) on PostgreSQL, schema 4 (v4_sparse_df.sql): kept by
SECURITY DEFINER statement triggers on `memory_sparse`, so a tenant-bound role's writes count
while the role itself can only read the table (a role that could write it would push a term
past `max_df` and prune it from every tenant's sparse leg).

After each kind of write the real CLI makes with the real SPLADE model (ingest, correct,
purge), as the owner and as a bound role, the kept counts equal a recount made here from the
stored vectors' text form (independent of the SQL that keeps them); a bound role's direct
writes are refused; a database made at schema 3 (counts skewed, an old binding's write
rights) comes over exact and read-only; doctor stays healthy."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.cli import CliRunner
from tests.support.records import ndjson, turns

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not installed")

from memcli.store.postgres.sparse import literal, term_ids  # noqa: E402

# Every statement a bound role might try on the shared counts (TRUNCATE was never granted).
ROLE_WRITES = ("UPDATE sparse_df SET df = df + 1000",
               "INSERT INTO sparse_df (term_id, df) VALUES (65000, 99999)",
               "INSERT INTO sparse_df (term_id, df) SELECT term_id, 1 FROM sparse_df"
               " ON CONFLICT (term_id) DO UPDATE SET df = 1",
               "DELETE FROM sparse_df",
               "TRUNCATE sparse_df")


@dataclass
class Role:
    owner: str  # the URL as the owner
    url: str  # as the role bound to tenant a
    name: str


def _as_role(url: str, role: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[1]}"


def _raw(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def _run(url: str, *args: str, input: str | None = None):
    from memcli.cli.app import app

    env = {"MEMCLI_DB": url, "MEMCLI_EMBEDDER": "hash", "MEMCLI_TENANT": None}
    return CliRunner().invoke(app, [*args, "--json"], input=input, env=env,
                              catch_exceptions=False)


def _ok(url: str, *args: str, input: str | None = None):
    result = _run(url, *args, input=input)
    assert result.exit_code == 0, (args, result.stderr)
    return json.loads(result.stdout) if result.stdout.strip() else None


@pytest.fixture
def splade_on(tmp_path, monkeypatch):
    """The SPLADE leg on (the real model): the counts are what this file is about."""
    config = tmp_path / "config.yaml"
    config.write_text("retrieval:\n  leg_weights: {lexical: 1.0, sparse: 1.0, dense: 1.0,"
                      " entity: 0.5, trigram: 0.5}\n")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture
def role(pg_memcli_db: str, splade_on) -> Iterator[Role]:
    """A login role bound to tenant `a`, dropped afterwards."""
    name = f"memcli_s_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_memcli_db, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{name}" LOGIN')
    try:
        _ok(pg_memcli_db, "pg", "grant-tenant", name, "a")
        yield Role(pg_memcli_db, _as_role(pg_memcli_db, name), name)
    finally:
        with psycopg.connect(pg_memcli_db, autocommit=True) as admin:
            admin.execute(f'DROP OWNED BY "{name}"')
            admin.execute(f'DROP ROLE "{name}"')


def _kept(url: str) -> dict[int, int]:
    return dict(_raw(url, "SELECT term_id, df FROM sparse_df"))


def _counted(url: str) -> dict[int, int]:
    """Memories holding each term, from every stored vector (the owner sees all tenants)."""
    return dict(Counter(t for (text,) in _raw(url, "SELECT vec::text FROM memory_sparse")
                        for t in term_ids(text)))


def _check(url: str, step: str) -> dict[int, int]:
    kept = _kept(url)
    assert kept == _counted(url), step
    assert all(df > 0 for df in kept.values()), step  # no row left at 0
    return kept


def _sparse_rows(url: str) -> int:
    return _raw(url, "SELECT count(*) FROM memory_sparse")[0][0]


def test_counts_follow_ingest_correct_and_purge_as_owner_and_role(role):
    owner, bound = role.owner, role.url
    for tenant, fruit in (("a", "apricot"), ("b", "blueberry")):
        _ok(owner, "ingest", "--tenant-id", tenant, "-", input=ndjson(turns(
            f"s{tenant}", [f"Alice likes {fruit} jam", f"I met Alice about {fruit} pie"])))
    assert _sparse_rows(owner) == 4
    _check(owner, "owner ingest")

    _ok(bound, "ingest", "-", input=ndjson(turns("r1", ["Quince trees grow in the garden",
                                                        "The medlar is a rare fruit"])))
    assert _sparse_rows(owner) == 6
    before = _check(owner, "role ingest")

    fact = _ok(owner, "remember", "Alice prefers jasmine tea", "--user-id", "u1",
               "--tenant-id", "b")
    _ok(owner, "correct", str(fact["id"]), "Alice prefers green jasmine tea", "--tenant-id", "b")
    mine = _ok(bound, "remember", "Bob collects vintage typewriters", "--user-id", "u1")
    _ok(bound, "correct", str(mine["id"]), "Bob collects vintage cameras")
    assert _sparse_rows(owner) == 10
    after = _check(owner, "correct")
    assert after != before

    _ok(bound, "purge", "--session-id", "r1")
    assert _sparse_rows(owner) == 8
    _check(owner, "role purge")
    _ok(owner, "purge", "--tenant-id", "b", "--session-id", "sb")
    assert _sparse_rows(owner) == 6
    _check(owner, "owner purge")

    doctor = _run(owner, "doctor")
    assert doctor.exit_code == 0 and json.loads(doctor.stdout)["healthy"], doctor.stdout


def test_a_bound_role_cannot_write_the_counts(role):
    _ok(role.owner, "ingest", "--tenant-id", "a", "-",
        input=ndjson(turns("sa", ["Alice likes apricot jam"])))
    before = _check(role.owner, "ingest")
    assert before
    for sql in ROLE_WRITES:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _raw(role.url, sql)
    assert _raw(role.url, "SELECT count(*) FROM sparse_df") == [(len(before),)]  # reads
    assert _kept(role.owner) == before


def test_reset_and_truncate_empty_the_counts(pg_memcli_db, splade_on):
    _ok(pg_memcli_db, "ingest", "-", input=ndjson(turns("s", ["Alice likes apricot jam",
                                                              "Bob likes blueberry pie"])))
    assert _check(pg_memcli_db, "ingest")
    _ok(pg_memcli_db, "rebuild")  # empties the sparse index, encodes again, recounts
    assert _check(pg_memcli_db, "rebuild")
    _raw(pg_memcli_db, "TRUNCATE memory_sparse")  # an administrator's, by hand
    assert _kept(pg_memcli_db) == {}


def test_schema_3_comes_over_exact_and_read_only(pg_db):
    """A database made before schema 4: counts written by anyone (here skewed), a role bound
    then with write rights on sparse_df. The migration recounts and takes the rights back."""
    from memcli.store.postgres import connect
    from memcli.store.postgres.migrations import LATEST, schema_sql

    name = f"memcli_s_{uuid.uuid4().hex[:8]}"
    ts = "2025-01-01T00:00:00Z"
    vectors = {1: {3: 120, 7: 5}, 2: {3: 40, 9: 300}, 3: {7: 1, 11: 2}}
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute(schema_sql())  # schema 2, then migration 3 as it was released
        from importlib import resources

        conn.execute(resources.files("memcli.store.postgres").joinpath("v3_tenancy.sql")
                     .read_text("utf-8"))
        conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '3')")
        for mid in vectors:
            conn.execute("INSERT INTO memories (id, content, tenant_id, user_id, event_time,"
                         " created_at, updated_at) VALUES (%s, 'x', 'a', 'u', %s, %s, %s)",
                         (mid, ts, ts, ts))
            conn.execute("INSERT INTO memory_sparse (memory_id, vec) VALUES"
                         " (%s, %s::sparsevec)", (mid, literal(vectors[mid])))
        conn.execute("INSERT INTO sparse_df (term_id, df) VALUES (3, 2), (7, 5000), (11, 1),"
                     " (40, 8)")  # 7 inflated, 9 missing, 40 held by no memory
        conn.execute(f'CREATE ROLE "{name}" LOGIN')
        conn.execute("INSERT INTO tenant_roles (role, tenant_id) VALUES (%s, 'a'),"
                     " ('dropped_long_ago', 'a')", (name,))
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{name}"')
        conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON sparse_df TO "{name}"')
    try:
        connect(pg_db).close()  # migrates to LATEST
        assert _raw(pg_db, "SELECT value FROM meta WHERE key = 'schema_version'") == [
            (str(LATEST),)]
        assert _kept(pg_db) == {3: 2, 7: 2, 9: 1, 11: 1}
        for sql in ROLE_WRITES:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                _raw(_as_role(pg_db, name), sql)
        assert len(_raw(_as_role(pg_db, name), "SELECT * FROM sparse_df")) == 4
        # From now on the trigger keeps them: a replaced vector moves its counts.
        _raw(pg_db, "UPDATE memory_sparse SET vec = %s::sparsevec WHERE memory_id = 3",
             (literal({9: 4}),))
        _raw(pg_db, "DELETE FROM memories WHERE id = 1")  # its vector goes by cascade
        assert _kept(pg_db) == {3: 1, 9: 2} == _counted(pg_db)
    finally:
        with psycopg.connect(pg_db, autocommit=True) as admin:
            admin.execute(f'DROP OWNED BY "{name}"')
            admin.execute(f'DROP ROLE "{name}"')
