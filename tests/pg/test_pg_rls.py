"""Tenant-bound login roles on a real PostgreSQL server (schema 3, row-level security): a role
bound to tenant `a` cannot read tenant `b`'s rows with raw SQL, cannot write them, cannot lift
the binding with SET; memcli run as that role works within `a`; `memcli pg grant-tenant /
revoke-tenant / tenants` and their one-line errors.

The schema owner here is the fixture's superuser (not bound, as any owner); the tenant roles
are plain LOGIN roles created per test (trust auth on 127.0.0.1) and dropped afterwards. The
server and database fixtures come from conftest (one server per session).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.cli import CliRunner
from tests.support.records import ndjson, turns

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not installed")

# Tables holding a tenant column, and one of each kind keyed through another table.
TENANT_TABLES = ("events", "memories", "memory_vectors", "entities", "sessions", "history")


@dataclass
class Bound:
    url: str  # as the owner
    a: str  # as the role bound to tenant a
    b: str  # as the role bound to tenant b
    role_a: str
    role_b: str


def as_role(url: str, role: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[1]}"


def run(url: str, *args: str, input: str | None = None, env: dict | None = None):
    from memcli.cli.app import app

    full = {"MEMCLI_DB": url, "MEMCLI_EMBEDDER": "hash", "MEMCLI_TENANT": None, **(env or {})}
    return CliRunner().invoke(app, list(args), input=input, env=full, catch_exceptions=False)


def ok(url: str, *args: str, input: str | None = None, env: dict | None = None):
    result = run(url, *args, "--json", input=input, env=env)
    assert result.exit_code == 0, (args, result.stderr)
    return json.loads(result.stdout) if result.stdout.strip() else None


def one_line_error(result, code: int, *words: str) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memcli: error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def no_sparse(tmp_path, monkeypatch):
    """SPLADE runs a real model; tenancy does not depend on it."""
    config = tmp_path / "config.yaml"
    config.write_text("retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0, entity: 0.5,"
                      " trigram: 0.5}\n")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture
def bound(pg_memcli_db: str, no_sparse) -> Iterator[Bound]:
    """Two tenants' memories (both mention Alice), and a login role bound to each."""
    tag = uuid.uuid4().hex[:8]
    role_a, role_b = f"memcli_a_{tag}", f"memcli_b_{tag}"
    url = pg_memcli_db
    with psycopg.connect(url, autocommit=True) as admin:
        for role in (role_a, role_b):
            admin.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        for tenant, words in (("a", "apricot"), ("b", "blueberry")):
            records = turns(f"s{tenant}", [f"Alice likes {words} jam",
                                           f"I met Alice about {words}"])
            ok(url, "ingest", "--tenant-id", tenant, "-", input=ndjson(records))
        ok(url, "pg", "grant-tenant", role_a, "a")
        ok(url, "pg", "grant-tenant", role_b, "b")
        yield Bound(url, as_role(url, role_a), as_role(url, role_b), role_a, role_b)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            for role in (role_a, role_b):
                admin.execute(f'DROP OWNED BY "{role}"')
                admin.execute(f'DROP ROLE "{role}"')


def raw(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def test_a_tenant_role_reads_only_its_tenant_even_with_raw_sql(bound):
    for table in TENANT_TABLES:
        # The owner sees both tenants; the bound roles one each.
        assert raw(bound.url, f"SELECT DISTINCT tenant_id FROM {table} ORDER BY 1") == [
            ("a",), ("b",)], table
        assert raw(bound.a, f"SELECT DISTINCT tenant_id FROM {table}") == [("a",)], table
        assert raw(bound.b, f"SELECT DISTINCT tenant_id FROM {table}") == [("b",)], table
    b_ids = [r[0] for r in raw(bound.url, "SELECT id FROM memories WHERE tenant_id = 'b'")]
    assert b_ids
    # Tables keyed by a memory, an entity or a thread: none of b's rows reach a.
    for sql in ("SELECT count(*) FROM memory_entities WHERE memory_id = ANY(%s)",
                "SELECT count(*) FROM relations WHERE src_id = ANY(%s) OR dst_id = ANY(%s)",
                "SELECT count(*) FROM change_log WHERE memory_id = ANY(%s)"):
        params = (b_ids,) * sql.count("%s")
        assert raw(bound.url, sql, params)[0][0] > 0 or "relations" in sql, sql
        assert raw(bound.a, sql, params) == [(0,)], sql
    assert raw(bound.a, "SELECT count(*) FROM threads WHERE thread_key LIKE 'b/%%'") == [(0,)]
    assert raw(bound.a, "SELECT count(*) FROM entity_aliases a JOIN entities e"
                        " ON e.id = a.entity_id WHERE e.tenant_id = 'b'") == [(0,)]
    texts = " ".join(r[0] for r in raw(bound.a, "SELECT content FROM memories"))
    assert "apricot" in texts and "blueberry" not in texts
    assert raw(bound.a, "SELECT memcli_tenant()") == [("a",)]


def test_a_tenant_role_cannot_write_another_tenants_rows(bound):
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        raw(bound.a, "INSERT INTO events (event_id, ts, recorded_at, tenant_id, content_hash)"
                     " VALUES ('x', 't', 't', 'b', 'hx')")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        raw(bound.a, "UPDATE memories SET tenant_id = 'b' WHERE tenant_id = 'a'")
    with psycopg.connect(bound.a, autocommit=True) as conn:
        assert conn.execute("UPDATE memories SET content = 'gone'"
                            " WHERE tenant_id = 'b'").rowcount == 0
        assert conn.execute("DELETE FROM memory_vectors WHERE tenant_id = 'b'").rowcount == 0
        assert conn.execute("DELETE FROM entities").rowcount >= 0  # a's own, if any unlinked
    for sql in ("TRUNCATE memories CASCADE",  # TRUNCATE is not filtered by RLS: not granted
                "INSERT INTO tenant_roles VALUES ('x', 'b')",
                "UPDATE tenant_roles SET tenant_id = 'b'"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            raw(bound.a, sql)
    texts = [r[0] for r in raw(bound.url, "SELECT content FROM memories WHERE tenant_id = 'b'")]
    assert len(texts) == 2 and all("blueberry" in t for t in texts)


def test_the_binding_cannot_be_lifted_with_set(bound):
    with psycopg.connect(bound.a, autocommit=True) as conn:
        conn.execute("SET memcli.tenant = 'b'")
        conn.execute("SELECT set_config('memcli.tenant', 'b', false)")
        assert conn.execute("SELECT memcli_tenant()").fetchone() == ("a",)
        assert conn.execute("SELECT count(*) FROM memories"
                            " WHERE tenant_id = 'b'").fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f'SET ROLE "{bound.role_b}"')  # not a member


def test_memcli_as_a_tenant_role_works_within_its_tenant(bound):
    # No tenant configured: the role's own. Ingest, query, bundle, remember, forget.
    ok(bound.a, "ingest", "-", input=ndjson(turns("s2", ["I saw Alice plant quince trees"])))
    hits = ok(bound.a, "query", "Alice jam quince blueberry", "--user-id", "u1")
    texts = " ".join(h["text"] for h in hits)
    assert "quince" in texts and "apricot" in texts and "blueberry" not in texts
    assert {h["tenant_id"] for h in hits} == {"a"}
    bundle = ok(bound.a, "acb", "build", "--user-id", "u1", "--query", "what does Alice like")
    assert "blueberry" not in json.dumps(bundle)
    fact = ok(bound.a, "remember", "Alice prefers tea", "--user-id", "u1")
    ok(bound.a, "forget", str(fact["id"]))
    tenants = {r[0] for r in raw(bound.url, "SELECT tenant_id FROM memories WHERE content"
                                            " LIKE '%%quince%%' OR content LIKE '%%tea%%'")}
    assert tenants == {"a"}
    entity = ok(bound.a, "entity", "Alice")
    assert entity["tenant_id"] == "a" and entity["mentions"] == 2  # apricot, quince
    # The owner, unbound, still reads every tenant.
    assert {h["tenant_id"] for h in ok(bound.url, "query", "Alice", "--all-tenants")} == {
        "a", "b"}


def test_a_tenant_that_disagrees_with_the_role_is_a_clear_error(bound):
    one_line_error(run(bound.a, "query", "Alice", env={"MEMCLI_TENANT": "b"}), 2,
                   "bound to tenant 'a'")
    one_line_error(run(bound.a, "query", "Alice", "--tenant-id", "b"), 2, "bound to tenant 'a'")
    record = {**turns("s9", ["Alice visits"])[0], "tenant_id": "b"}
    one_line_error(run(bound.a, "ingest", "-", input=ndjson([record])), 2, "own tenant")
    assert ok(bound.a, "query", "Alice", env={"MEMCLI_TENANT": "a"})  # agreeing is fine
    assert raw(bound.url, "SELECT count(*) FROM events WHERE event_id = 's9-0'") == [(0,)]


def test_a_tenant_role_never_migrates(bound):
    raw(bound.url, "UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    one_line_error(run(bound.a, "stats"), 1, "only the owner of its tables")
    assert raw(bound.url, "SELECT value FROM meta WHERE key = 'schema_version'") == [("2",)]


def test_grant_and_revoke_tenant(bound, tmp_path):
    assert ok(bound.url, "pg", "tenants") == [
        {"role": bound.role_a, "tenant_id": "a"}, {"role": bound.role_b, "tenant_id": "b"}]
    again = ok(bound.url, "pg", "grant-tenant", bound.role_a, "a")
    assert again["granted"] and again["already"]
    one_line_error(run(bound.url, "pg", "grant-tenant", bound.role_a, "b"), 2,
                   "bound to tenant 'a'", "revoke-tenant")
    one_line_error(run(bound.url, "pg", "grant-tenant", "postgres", "a"), 2, "superuser")
    one_line_error(run(bound.url, "pg", "grant-tenant", "nobody_here", "a"), 1,
                   "no role 'nobody_here'")
    one_line_error(run(bound.a, "pg", "grant-tenant", bound.role_b, "a"), 2, "only the owner")
    one_line_error(run(bound.a, "pg", "tenants"), 2, "cannot list")
    one_line_error(run(str(tmp_path / "m.db"), "pg", "tenants"), 2, "PostgreSQL feature")
    assert ok(bound.url, "pg", "revoke-tenant", bound.role_b) == {
        "role": bound.role_b, "tenant_id": "b", "revoked": True}
    one_line_error(run(bound.b, "query", "Alice"), 1, "permission denied")
    one_line_error(run(bound.url, "pg", "revoke-tenant", bound.role_b), 1, "not bound")
    assert ok(bound.url, "pg", "tenants") == [{"role": bound.role_a, "tenant_id": "a"}]


def recount(url: str) -> tuple[list[tuple], list[tuple]]:
    """BM25's statistics as kept, and as a recount over every memory (the owner's view)."""
    kept = raw(url, "SELECT lexeme, df FROM lexeme_df ORDER BY 1")
    counted = raw(url, "SELECT l, count(*)::integer FROM memories,"
                       " unnest(tsvector_to_array(fts)) l GROUP BY l ORDER BY 1")
    stats = raw(url, "SELECT docs, tokens FROM lexical_stats")
    total = raw(url, "SELECT count(*), coalesce(sum(fts_tokens), 0) FROM memories")
    return (kept, stats), (counted, [tuple(int(v) for v in total[0])])


def test_a_tenant_role_cannot_change_the_shared_statistics_or_the_schema(bound):
    """The tables without a tenant: BM25's df and lengths (scores of every tenant), the
    sequences (ids of every tenant) and meta (schema version, models, key id)."""
    before = raw(bound.url, "SELECT key, value FROM meta ORDER BY 1")
    for sql in ("UPDATE lexeme_df SET df = df + 1000",
                "DELETE FROM lexeme_df",
                "INSERT INTO lexeme_df VALUES ('zzzq', 5)",
                "UPDATE lexical_stats SET docs = 1",
                "SELECT setval(pg_get_serial_sequence('memories', 'id'), 1)",
                "SELECT setval(pg_get_serial_sequence('events', 'seq'), 1)",
                "INSERT INTO meta VALUES ('schema_version', '9') ON CONFLICT (key)"
                " DO UPDATE SET value = excluded.value",
                "INSERT INTO meta VALUES ('embedder_model', 'x') ON CONFLICT (key)"
                " DO UPDATE SET value = excluded.value",
                "INSERT INTO meta VALUES ('anything', 'x')",
                # An explicit id past the sequence would move it for every tenant.
                "INSERT INTO entities (id, tenant_id, kind, norm, display, created_at)"
                " VALUES (9000000000000000000, 'a', 'person', 'zed', 'Zed', 't')"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            raw(bound.a, sql)
    with psycopg.connect(bound.a, autocommit=True) as conn:
        assert conn.execute("UPDATE meta SET value = '9'").rowcount == 0
        assert conn.execute("DELETE FROM meta").rowcount == 0
    assert raw(bound.url, "SELECT key, value FROM meta ORDER BY 1") == before
    kept, counted = recount(bound.url)
    assert kept == counted
    assert raw(bound.url, "SELECT max(id) < 1000000 FROM entities") == [(True,)]


def test_a_tenant_roles_writes_keep_the_shared_statistics_right(bound):
    """The statistics triggers run as the owner: ingest, forget and purge as a role count."""
    ok(bound.a, "ingest", "-", input=ndjson(turns("s3", ["Alice grows quince and medlar",
                                                         "Bob grows medlar too"])))
    kept, counted = recount(bound.url)
    assert kept == counted and ("medlar", 2) in kept[0]
    ok(bound.a, "purge", "--session-id", "s3")
    kept, counted = recount(bound.url)
    assert kept == counted and not any(lexeme == "medlar" for lexeme, _ in kept[0])
    # New rows of the role still get ids from the sequences, past every tenant's.
    assert raw(bound.url, "SELECT count(DISTINCT id) = count(*) FROM memories") == [(True,)]


def test_a_tenant_roles_purge_says_the_owner_must_vacuum(bound):
    """VACUUM needs the tables' owner: the role's purge deletes for good (nothing reaches the
    rows) but says the text is still on disk, and doctor as the owner shows it until
    `doctor --fix` VACUUMs."""
    result = run(bound.a, "purge", "--session-id", "sa", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["memories"] == 2 and out["complete"] is False and out["vacuum"] == "owner"
    assert "owner" in result.stderr and "VACUUM" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert raw(bound.url, "SELECT count(*) FROM memories WHERE tenant_id = 'a'") == [(0,)]
    doctor = run(bound.url, "doctor", "--json")
    pending = [c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "purge_vacuum"]
    assert pending and pending[0]["status"] == "problem", doctor.stdout
    fixed = ok(bound.url, "doctor", "--fix")["fixed"]
    assert fixed["vacuumed"] is True, fixed
    doctor = json.loads(run(bound.url, "doctor", "--json").stdout)
    assert not [c for c in doctor["checks"] if c["check"] == "purge_vacuum"]
    # The owner's own purge VACUUMs and is complete, as before.
    out = ok(bound.url, "purge", "--tenant-id", "b", "--session-id", "sb")
    assert out["complete"] is True and "vacuum" not in out


@pytest.mark.parametrize("args", [("doctor",), ("doctor", "--fix"), ("rebuild",),
                                  ("rebuild", "--dry-run"), ("reindex",), ("key", "rotate")])
def test_doctor_and_rebuild_refuse_a_tenant_role(bound, args):
    """They read or rewrite every tenant's derived data; a role sees one tenant, so its
    counts would be wrong and its rewrites would reset the shared statistics."""
    before = recount(bound.url)
    one_line_error(run(bound.a, *args), 2, "bound to tenant 'a'", "owner")
    assert recount(bound.url) == before
