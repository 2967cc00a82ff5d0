"""Purge, forget and restore: what goes, what stays, and that nothing derived is left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcli import Memory
from memcli.config import RetrievalSettings
from memcli.providers.embedders import HashEmbedder
from memcli.store import relations as rel
from tests.support.backend import connect as backend_connect
from tests.support.backend import lexical_hits, rows, stored_bytes, table_names
from tests.support.records import ndjson

# conftest: no SPLADE, one click command; SQLite and PostgreSQL (tests/support/backend.py)
pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]


def connect(db_path: Path):
    """A plain connection of the test's own (with sqlite-vec so vec_memories can be read)."""
    return backend_connect(db_path)


def scalar(db_path: Path, sql: str, params: tuple = ()):
    conn = connect(db_path)
    try:
        return conn.execute(sql, params).fetchone()[0]
    finally:
        conn.close()


# Every table derived from memories or events, and how to count its rows that lost their owner.
ORPHAN_QUERIES = {
    "memories_fts": "SELECT count(*) FROM memories_fts"
    " WHERE rowid NOT IN (SELECT id FROM memories)",
    "memories_trigram": "SELECT count(*) FROM memories_trigram"
    " WHERE rowid NOT IN (SELECT id FROM memories)",
    "memory_vectors": "SELECT count(*) FROM memory_vectors"
    " WHERE memory_id NOT IN (SELECT id FROM memories)",
    "vec_memories": "SELECT count(*) FROM vec_memories"
    " WHERE memory_id NOT IN (SELECT id FROM memories)",
    "sparse_postings": "SELECT count(*) FROM sparse_postings"
    " WHERE memory_id NOT IN (SELECT id FROM memories)",
    "memory_sparse": "SELECT count(*) FROM memory_sparse"
    " WHERE memory_id NOT IN (SELECT id FROM memories)",
    "memory_entities": "SELECT count(*) FROM memory_entities WHERE memory_id NOT IN"
    " (SELECT id FROM memories) OR entity_id NOT IN (SELECT id FROM entities)",
    "entities": "SELECT count(*) FROM entities"
    " WHERE id NOT IN (SELECT entity_id FROM memory_entities)",
    "entity_aliases": "SELECT count(*) FROM entity_aliases"
    " WHERE entity_id NOT IN (SELECT id FROM entities)",
    "relations": "SELECT count(*) FROM relations WHERE src_id NOT IN (SELECT id FROM memories)"
    " OR dst_id NOT IN (SELECT id FROM memories)",
    "change_log": "SELECT count(*) FROM change_log WHERE memory_id IS NOT NULL"
    " AND memory_id NOT IN (SELECT id FROM memories)",
    "artifacts": "SELECT count(*) FROM artifacts WHERE event_id NOT IN"
    " (SELECT event_id FROM events)",
    "memories": "SELECT count(*) FROM memories WHERE event_id IS NOT NULL"
    " AND event_id NOT IN (SELECT event_id FROM events)",
    "sessions": "SELECT count(*) FROM sessions s WHERE NOT EXISTS (SELECT 1 FROM events e"
    " WHERE e.tenant_id = s.tenant_id AND e.session_id = s.session_id)",
}


# The terms each memory holds, per engine: SQLite's postings, PostgreSQL's sparsevec (the
# indices of its text form `{i:w,...}/dim`, 1-based).
STORED_TERMS = {
    "sparse_postings": "SELECT term_id FROM sparse_postings",
    "pg": "SELECT (t[1])::integer - 1 AS term_id FROM memory_sparse s,"
          " regexp_matches(split_part(s.vec::text, '}', 1), '(\\d+):', 'g') t",
}


def orphan_counts(conn) -> dict[str, int]:
    """{table: orphan rows} for every derived table this database has (0 everywhere is clean);
    `sparse_df`: terms whose count is not the number of memories holding them (a term no
    memory holds has no row)."""
    execute = conn.execute if hasattr(conn, "execute") else conn.db.execute
    names = table_names(execute)
    found = {
        table: execute(sql).fetchone()[0] for table, sql in ORPHAN_QUERIES.items() if table in names
    }
    terms = STORED_TERMS["sparse_postings" if "sparse_postings" in names else "pg"]
    found["sparse_df"] = execute(
        f"SELECT count(*) FROM sparse_df d FULL JOIN (SELECT term_id, count(*) AS n FROM"
        f" ({terms}) t GROUP BY term_id) p ON p.term_id = d.term_id"
        f" WHERE d.df IS DISTINCT FROM p.n").fetchone()[0]
    return found


def fts_hits(db_path: Path, table: str, term: str) -> int:
    return lexical_hits(db_path, table, term)


def file_bytes(db_path: Path) -> bytes:
    return stored_bytes(db_path)


# Four conversations across two tenants, two users and an app; each has its own marker word
# (for FTS), CJK marker (for the trigram index) and person (for the entity index).
RECORDS = [
    {
        "event_id": "a1",
        "tenant_id": "t1",
        "user_id": "u1",
        "session_id": "s1",
        "app_id": "app1",
        "text": "alpha note qxalphaword 阿尔法标记 with Alfredo Quasimodo",
    },
    {
        "event_id": "a2",
        "tenant_id": "t1",
        "user_id": "u1",
        "session_id": "s1",
        "app_id": "app1",
        "kind": "tool_result",
        "content": {"output": "qxalphaword\n" + "alpha output line\n" * 5000},
    },
    {
        "event_id": "b1",
        "tenant_id": "t1",
        "user_id": "u1",
        "session_id": "s2",
        "text": "bravo note qxbravoword 布拉沃标记 with Bronislava Ekwueme",
    },
    {
        "event_id": "c1",
        "tenant_id": "t1",
        "user_id": "u2",
        "session_id": "s3",
        "app_id": "app1",
        "text": "charlie note qxcharlieword 查理标记 with Chidubem Okonkwo",
    },
    {
        "event_id": "d1",
        "tenant_id": "t2",
        "user_id": "u1",
        "session_id": "s4",
        "text": "delta note qxdeltaword 德尔塔标记 with Dagrun Haldorsen",
    },
]
MARKERS = {
    "a": ("qxalphaword", "阿尔法标记", "Alfredo Quasimodo"),
    "b": ("qxbravoword", "布拉沃标记", "Bronislava Ekwueme"),
    "c": ("qxcharlieword", "查理标记", "Chidubem Okonkwo"),
    "d": ("qxdeltaword", "德尔塔标记", "Dagrun Haldorsen"),
}


@pytest.fixture
def populated(cli, db_path):
    result = cli("ingest", "-", input=ndjson(RECORDS))
    assert result.exit_code == 0, result.stderr
    with Memory.open(db_path) as m, m.db.transaction():
        ids = {r["event_id"]: r["id"] for r in m.db.query("SELECT id, event_id FROM memories")}
        rel.add_edge(m.db, ids["a1"], ids["b1"], "related", 0.9)
        rel.add_edge(m.db, ids["c1"], ids["d1"], "related", 0.9)
        rel.add_edge(m.db, ids["b1"], ids["d1"], "supersedes", 1.0)
    assert orphan_counts(connect(db_path)) == dict.fromkeys(orphan_counts(connect(db_path)), 0)
    return ids


def _found(db_path: Path, group: str) -> dict[str, bool]:
    """Whether a conversation is still reachable: its index rows, and each retrieval leg alone
    (through the library, with the embedder the CLI uses; test_purge_cli_legs runs the CLI)."""
    word, cjk, person = MARKERS[group]
    found = {
        "fts rows": fts_hits(db_path, "memories_fts", word) > 0,
        "trigram rows": fts_hits(db_path, "memories_trigram", cjk) > 0,
    }
    with Memory.open(db_path, embedder=HashEmbedder(64)) as m:
        for leg, text, needle in (
            ("lexical", word, word),
            ("trigram", cjk, cjk),
            ("dense", word, word),
            ("entity", f"what about {person}?", person),
        ):
            m.retrieval = RetrievalSettings(leg_weights={leg: 1.0})
            hits = m.query(text, top_k=100, record_access=False,
                           filters=m.filters(all_tenants=True)).hits
            found[leg] = any(needle in h.text for h in hits)
    return found


SCOPES = [
    (["--session", "s1", "--tenant", "t1"], {"a"}),
    (["--user", "u1", "--all-tenants"], {"a", "b", "d"}),
    (["--user", "u1", "--tenant", "t1"], {"a", "b"}),
    # The configured tenant (`default`) has no u1: u1 of t1 and t2 are other people.
    (["--user", "u1"], set()),
    (["--tenant", "t1"], {"a", "b", "c"}),
    (["--app", "app1", "--tenant", "t1"], {"a", "c"}),
]


@pytest.mark.parametrize(("flags", "gone"), SCOPES, ids=[" ".join(f) for f, _ in SCOPES])
def test_purge_a_scope_leaves_nothing_of_it(cli, db_path, populated, flags, gone):
    for group in MARKERS:
        assert all(_found(db_path, group).values()), group

    result = cli("purge", *flags)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    gone_events = [r["event_id"] for r in RECORDS if r["event_id"][0] in gone]
    assert report["events"] == len(gone_events) and report["dry_run"] is False
    assert report["artifacts"] == (1 if "a" in gone else 0)

    left = {e for (e,) in connect(db_path).execute("SELECT event_id FROM events")}
    assert left == {r["event_id"] for r in RECORDS} - set(gone_events)
    for group in MARKERS:
        found = _found(db_path, group)
        if group in gone:
            assert not any(found.values()), (group, found)
        else:
            assert all(found.values()), (group, found)
    assert orphan_counts(connect(db_path)) == dict.fromkeys(orphan_counts(connect(db_path)), 0)
    assert scalar(db_path, "SELECT count(*) FROM relations") == sum(
        1
        for a, b in (("a1", "b1"), ("c1", "d1"), ("b1", "d1"))
        if a[0] not in gone and b[0] not in gone
    )

    history = json.loads(cli("history", "--all-tenants").stdout)
    assert history[0]["op"] == "PURGE" and history[0]["memory_id"] is None
    assert history[0]["meta"]["events"] == len(gone_events)


def test_purge_cli_legs(cli, db_path, populated):
    """The dense and entity legs alone, through the CLI, before and after a purge."""

    def legs(group):
        word, _, person = MARKERS[group]
        dense = json.loads(cli("query", word, "--legs", "dense", "--top-k", "100",
                               "--all-tenants").stdout)
        entity = json.loads(cli("query", f"what about {person}?", "--legs", "entity",
                                "--all-tenants").stdout)
        return any(word in h["text"] for h in dense), any(person in h["text"] for h in entity)

    assert legs("b") == (True, True) and legs("c") == (True, True)
    assert cli("purge", "--session", "s2", "--tenant", "t1").exit_code == 0
    assert legs("b") == (False, False) and legs("c") == (True, True)


def test_purged_text_is_gone_from_the_file(cli, db_path, populated):
    assert cli("purge", "--user", "u1", "--tenant", "t1").exit_code == 0
    raw = file_bytes(db_path)
    for word in ("qxalphaword", "qxbravoword", "Quasimodo", "Bronislava", "alpha output line"):
        assert word.encode() not in raw, word
    for cjk in ("阿尔法标记", "布拉沃标记"):
        assert cjk.encode() not in raw, cjk
    assert b"qxcharlieword" in raw  # what was not purged is still there, as plain text


def test_purge_one_memory_takes_its_event(cli, db_path, populated):
    mid = populated["b1"]
    result = cli("purge", "--memory", str(mid), "--tenant", "t1")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["scope"] == {"memory_id": mid, "tenant_id": "t1"}
    assert scalar(db_path, "SELECT count(*) FROM memories WHERE id = ?", (mid,)) == 0
    assert scalar(db_path, "SELECT count(*) FROM events WHERE event_id = 'b1'") == 0
    assert not any(_found(db_path, "b").values())
    assert all(_found(db_path, "a").values())
    assert orphan_counts(connect(db_path)) == dict.fromkeys(orphan_counts(connect(db_path)), 0)


def test_other_scope_keys_narrow_a_memory_purge(cli, db_path, populated):
    result = cli("purge", "--memory", str(populated["b1"]), "--user", "u2", "--tenant", "t1")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["events"] == 0
    assert scalar(db_path, "SELECT count(*) FROM events") == len(RECORDS)
    assert scalar(db_path, "SELECT count(*) FROM sessions") == 4
    result = cli("purge", "--memory", str(populated["b1"]), "--user", "u1",
                 "--tenant", "t1")
    assert json.loads(result.stdout)["events"] == 1
    assert scalar(db_path, "SELECT count(*) FROM events WHERE event_id = 'b1'") == 0
    assert [r[0] for r in rows(db_path, "SELECT session_id FROM sessions ORDER BY 1")] == [
        "s1", "s3", "s4"]


def test_app_purge_keeps_the_sessions_other_events(cli, db_path):
    records = [{"event_id": "in-app", "text": "from the app", "session_id": "s1", "app_id": "a"},
               {"event_id": "direct", "text": "typed by hand", "session_id": "s1"}]
    assert cli("ingest", "-", input=ndjson(records)).exit_code == 0
    assert cli("purge", "--app", "a", "--user", "nobody").exit_code == 0
    assert scalar(db_path, "SELECT event_count FROM sessions") == 2
    assert cli("purge", "--app", "a", "--tenant", "default").exit_code == 0
    assert [r[0] for r in rows(db_path, "SELECT event_id FROM events")] == ["direct"]
    assert scalar(db_path, "SELECT event_count FROM sessions WHERE session_id = 's1'") == 1


def test_purge_part_of_a_session_recounts_it(cli, db_path, populated):
    conn = connect(db_path)
    conn.execute("UPDATE sessions SET summary = '{\"text\": \"mentions qxalphaword\"}'")
    conn.close()
    assert cli("purge", "--memory", str(populated["a1"]), "--tenant", "t1").exit_code == 0
    conn = connect(db_path)
    row = conn.execute(
        "SELECT event_count, started_at, summary FROM sessions WHERE session_id = 's1'"
    ).fetchone()
    ts = conn.execute("SELECT ts FROM events WHERE event_id = 'a2'").fetchone()[0]
    conn.close()
    # One event left; the summary was written from the purged one, so it goes too.
    assert row == (1, ts, None)


def test_purge_a_chunked_event_takes_every_chunk(cli, db_path):
    long = " ".join(f"qxlongword sentence {i} of a very long message." for i in range(500))
    report = json.loads(cli("ingest", "--text", long, "--session", "s1").stdout)
    assert len(report["memory_ids"]) > 1
    assert cli("purge", "--memory", str(report["memory_ids"][-1])).exit_code == 0
    assert scalar(db_path, "SELECT count(*) FROM memories") == 0
    assert fts_hits(db_path, "memories_fts", "qxlongword") == 0


def test_dry_run_prints_the_plan_and_deletes_nothing(cli, db_path, populated):
    def counts():
        conn = connect(db_path)
        present = table_names(conn.execute)  # (no vec_memories on PostgreSQL)
        return {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] if t in present else None
            for t in (
                "events",
                "memories",
                "memory_vectors",
                "vec_memories",
                "memory_entities",
                "relations",
                "artifacts",
                "sessions",
                "history",
            )
        }

    before = counts()
    result = cli("purge", "--session", "s1", "--tenant", "t1", "--dry-run")
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["dry_run"] is True
    in_s1 = scalar(db_path, "SELECT count(*) FROM memories WHERE session_id = 's1'")
    assert in_s1 > 2  # the long tool output was cut into many chunks
    assert (plan["events"], plan["memories"], plan["artifacts"]) == (2, in_s1, 1)
    assert sorted(plan["event_ids"]) == ["a1", "a2"]
    assert counts() == before
    text = cli("purge", "--session", "s1", "--tenant", "t1", "--dry-run", "--format", "text")
    assert text.stdout.strip() == f"would purge 2 event(s), {in_s1} memories, 1 artifact(s)"
    assert counts() == before


def test_purge_refuses_without_a_scope(cli, db_path, populated):
    result = cli("purge")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("memcli: error: purge needs a scope")
    assert scalar(db_path, "SELECT count(*) FROM events") == len(RECORDS)


def test_purge_clears_the_sparse_index(db_path):
    from memcli.providers.splade import SpladeEncoder

    with Memory.open(db_path, embedder=HashEmbedder(64), sparse=SpladeEncoder()) as m:
        m.ingest(
            [
                {**r, "kind": "message", "content": {"text": r.get("text", "tool output")}}
                if "content" in r
                else r
                for r in RECORDS
            ]
        )
        assert m.db.scalar("SELECT count(*) FROM memory_sparse") == len(RECORDS)
        everywhere = m.filters(all_tenants=True)
        before = m.query("qxbravoword Bronislava", top_k=3, filters=everywhere).hits
        assert before[0].text.startswith("bravo") and "sparse" in before[0].scores
        m.purge(user_id="u1")
        assert orphan_counts(m) == dict.fromkeys(orphan_counts(m), 0)
        assert m.db.scalar("SELECT count(*) FROM memory_sparse") == 1
        m.retrieval.leg_weights = {"sparse": 1.0}
        assert [h.text[:7] for h in m.query("bravo alpha delta charlie",
                                            filters=everywhere).hits] == ["charlie"]


# -- forget and restore -----------------------------------------------------------------------


def test_forget_hides_restore_brings_back(cli, db_path, populated, monkeypatch):
    monkeypatch.setenv("MEMCLI_TENANT", "t1")  # the memory's tenant: forget acts in one
    mid = populated["b1"]
    found = json.loads(cli("query", "qxbravoword", "--all-tenants").stdout)
    assert any(h["id"] == mid for h in found)
    result = cli("forget", str(mid))
    assert result.exit_code == 0
    forgot = json.loads(result.stdout)
    assert forgot["id"] == mid and forgot["state"] == "soft_deleted" and forgot["purge_at"]
    for legs in ("lexical", "dense", "entity", "trigram", "lexical,dense,entity,trigram"):
        hits = json.loads(
            cli(
                "query",
                "qxbravoword Bronislava Ekwueme 布拉沃标记",
                "--legs",
                legs,
                "--top-k",
                "100",
                "--all-tenants",
            ).stdout
        )
        assert mid not in {h["id"] for h in hits}, legs
    # Soft delete keeps the rows: the event and the memory are still in the file.
    assert scalar(db_path, "SELECT state FROM memories WHERE id = ?", (mid,)) == "soft_deleted"

    result = cli("restore", str(mid))
    assert result.exit_code == 0 and json.loads(result.stdout)["state"] == "active"
    restored = json.loads(cli("query", "qxbravoword", "--all-tenants").stdout)
    assert any(h["id"] == mid for h in restored)
    ops = [r["op"] for r in json.loads(cli("history", str(mid), "--all-tenants").stdout)]
    assert ops == ["RESTORE", "DELETE", "ADD"]
    text = cli("history", str(mid), "--all-tenants", "--format", "text").stdout
    assert "RESTORE" in text and "DELETE" in text and "soft_deleted -> active" in text


def test_forget_and_restore_errors(cli, populated, monkeypatch):
    monkeypatch.setenv("MEMCLI_TENANT", "t1")
    missing = cli("forget", "999999")
    assert missing.exit_code == 1 and missing.stderr.strip() == (
        "memcli: error: no memory with id 999999"
    )
    active = cli("restore", str(populated["a1"]))
    assert active.exit_code == 2 and "not soft-deleted" in active.stderr
    assert cli("forget", "not-a-number").exit_code == 2


def test_purge_removes_soft_deleted_memories_too(cli, db_path, populated, monkeypatch):
    monkeypatch.setenv("MEMCLI_TENANT", "t1")
    assert cli("forget", str(populated["b1"])).exit_code == 0
    assert cli("purge", "--session", "s2", "--tenant", "t1").exit_code == 0
    assert scalar(db_path, "SELECT count(*) FROM memories WHERE event_id = 'b1'") == 0
    assert orphan_counts(connect(db_path)) == dict.fromkeys(orphan_counts(connect(db_path)), 0)


def test_user_purge_takes_checkpoints_and_thread_state(cli, db_path):
    from memcli.store.opener import open_database

    assert cli("ingest", "--text", "my plan is secret-ish", "--user", "zed",
               "--session", "z1").exit_code == 0
    assert cli("checkpoint", "save", "--user", "zed", "--thread", "z1",
               "--data", '{"step": 3, "note": "half way"}').exit_code == 0
    assert cli("checkpoint", "save", "--user", "amy", "--thread", "a1",
               "--data", '{"step": 1}').exit_code == 0
    assert cli("purge", "--user", "zed").exit_code == 0
    db = open_database(db_path)
    assert db.scalar("SELECT count(*) FROM checkpoints WHERE user_id = 'zed'") == 0
    assert db.scalar("SELECT count(*) FROM checkpoints WHERE user_id = 'amy'") == 1
    assert db.scalar("SELECT count(*) FROM threads WHERE thread_key LIKE '%/zed/%'") == 0
    db.close()
