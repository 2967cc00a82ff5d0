"""`memcli rebuild`: drop or corrupt the derived tables of a database built through the real
CLI, rebuild from the event log, and get the same ids, query results, bundles and history;
what a person deleted stays deleted; a second rebuild changes nothing; a dry run writes
nothing; a busy database exits 75. On SQLite and PostgreSQL (the backend matrix,
tests/support/backend.py): the damage is each engine's (its index tables, or indexes)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil

import pytest

from memcli.store.opener import open_database
from tests.support.backend import index_names, is_pg, writer_lock_held
from tests.support.pg_db import scratch_database, with_database
from tests.support.records import ndjson, turns

pytestmark = [pytest.mark.backends, pytest.mark.long]  # full rebuilds, seconds each


def Database(location):  # noqa: N802 - the engine's own Database for a path or a URL
    return open_database(location)

LONG = " ".join(f"Sentence {i} about the Zephyr project budget and Lisbon offices." for i in
                range(120))  # ~7,500 characters: three chunks, so chunk ids are checked too
QUERIES = [("alice", "green tea"), ("alice", "Lisbon budget"), ("bob", "Paris trip"),
           ("alice", "Zurich"), ("bob", "hiking plans"), ("alice", "SQLite decision")]
# Index tables a rebuild rewrites in another physical layout (FTS5 segments written in one
# go instead of one per ingest, vec0 chunks): compared through queries, not byte for byte.
LAYOUT = ("memories_fts", "memories_trigram", "vec_memories")


def _records() -> list[dict]:
    alice = turns("s1", ["I like green tea in the morning", "Alice met Bob in Paris",
                         "The Paris trip is in May", LONG], user="alice")
    alice += turns("s2", ["Bob prefers hiking plans on weekends", "@carol joins the trip",
                          "Budget for Lisbon is 3000 EUR"], user="alice")
    bob = turns("s3", ["Bob is planning a Paris trip with Alice", "Hiking plans for June",
                       "Green tea or coffee?"], user="bob")
    secret = {"event_id": "hi-1", "session_id": "s4", "user_id": "alice",
              "sensitivity": "high", "ts": "2025-01-02T10:00:00Z",
              "content": {"text": "Alice's Zurich bank appointment is on Friday"}}
    return alice + bob + [secret]


# Entity links by the entity's (kind, norm), not its id: entities emptied and made again get
# ids from SQLite's max(rowid) + 1 (the old ones) but from PostgreSQL's identity sequence (new
# ones). Entity ids are internal (no command shows or takes one); which entity is which is not.
NATURAL = {
    "memory_entities": "SELECT me.memory_id, e.kind, e.norm FROM memory_entities me"
                       " JOIN entities e ON e.id = me.entity_id",
    "entity_aliases": "SELECT a.alias, e.kind, e.norm FROM entity_aliases a"
                      " JOIN entities e ON e.id = a.entity_id",
}


def _dump(path, skip: tuple[str, ...] = ()) -> dict[str, list]:
    """Every row of every table (sorted), virtual tables' shadow tables included."""
    db = Database(path)
    try:
        virtual = (*db.backend.lexical_tables, *db.backend.vector_tables)  # shadows hold theirs
        names = sorted(n for n in db.backend.table_names(db)
                       if n not in virtual and not n.startswith("sqlite_"))
        return {n: sorted(map(repr, db.execute(NATURAL.get(n, f"SELECT * FROM {n}"))))
                for n in names if not n.startswith(skip)}
    finally:
        db.close()


def _edges(path) -> list[tuple]:
    db = Database(path)
    try:
        return list(db.execute("SELECT src_id, dst_id, kind, strength FROM relations"
                               " ORDER BY src_id, dst_id, kind"))
    finally:
        db.close()


def _json(result) -> object:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _build(cli, db_path) -> dict:
    """Three users' sessions, a long event, a `high` item (with a key), a forgotten memory, a
    pinned one, a fact (corrected), a decision; written through the CLI."""
    assert cli("ingest", "-", input=ndjson(_records())).exit_code == 0
    ids = {r["content"]["text"]: i for i, r in _memory_rows(db_path)}
    state = {"forgotten": ids["Green tea or coffee?"], "pinned": ids["Alice met Bob in Paris"]}
    assert cli("forget", str(state["forgotten"])).exit_code == 0
    assert cli("pin", str(state["pinned"])).exit_code == 0
    fact = _json(cli("remember", "Alice prefers green tea", "--user", "alice"))["id"]
    state["fact"] = fact
    state["corrected"] = _json(cli("correct", str(fact), "Alice prefers jasmine green tea",
                                   "--tenant", "default"))["id"]
    _json(cli("decision", "add", "Use SQLite for the memory store", "--user", "alice"))
    return state


@pytest.fixture(scope="module")
def built_once():
    """Per engine, the database `_build` wrote once for the module and its state (each test
    gets a copy: building costs seconds, with the SPLADE model); the PostgreSQL one is
    dropped at the module's end."""
    with contextlib.ExitStack() as stack:
        yield stack, {}


def _copy(source, target) -> None:
    """Make `target` a copy of the database at `source` (nothing connected to either)."""
    if not is_pg(source):
        shutil.copyfile(source, target)  # memcli closed it: the WAL is folded in, and gone
        os.chmod(target, 0o600)  # as memcli made it (copyfile takes the umask's mode)
        return
    import psycopg

    server, name = str(target).rsplit("/", 1)
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{str(source).rsplit("/", 1)[1]}"')


@pytest.fixture
def built(cli, db_path, backend, monkeypatch, request, tmp_path_factory, built_once):
    """A copy of the database `_build` writes through the CLI (see built_once)."""
    monkeypatch.setenv("MEMCLI_KEY", base64.b64encode(b"r" * 32).decode())
    stack, made = built_once
    if backend not in made:
        if backend == "sqlite":
            source = tmp_path_factory.mktemp("built") / "memory.db"
        else:
            server = request.getfixturevalue("pg_server")
            name = stack.enter_context(scratch_database(
                server, request.getfixturevalue("pg_memcli_template"), prefix="memcli_built_"))
            source = with_database(server, name)
        monkeypatch.setenv("MEMCLI_DB", str(source))
        made[backend] = (source, _build(cli, source))
        monkeypatch.setenv("MEMCLI_DB", str(db_path))
    source, state = made[backend]
    _copy(source, db_path)
    return dict(state)


def _memory_rows(path) -> list[tuple[int, dict]]:
    db = Database(path)
    try:
        return [(mid, {"content": {"text": c}}) for mid, c in
                db.execute("SELECT id, content FROM memories WHERE kind = 'episode'")]
    finally:
        db.close()


def _results(cli) -> dict:
    """What a user sees: query hits (ids, order, scores), a bundle's items, the history."""
    out = {}
    for user, text in QUERIES:
        hits = _json(cli("query", text, "--user", user, "--top-k", "8", "--format", "json"))
        out[f"q:{user}:{text}"] = [(h["id"], h["score"]) for h in hits]
    bundle = _json(cli("acb", "build", "--user", "alice", "--session", "s2", "-q", "Lisbon",
                       "--no-track", "--format", "json"))
    out["acb"] = json.dumps(_ids_in(bundle), sort_keys=True)
    for user in ("alice", "bob"):
        out[f"history:{user}"] = _json(cli("history", "--user", user, "--limit", "1000",
                                           "--format", "json"))
    return out


def _ids_in(value) -> list:
    """Every memory id a bundle names (sections, evidence, tasks, decisions), in order."""
    found: list = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("id", "memory_id") and isinstance(item, int):
                found.append(item)
            else:
                found += _ids_in(item)
    elif isinstance(value, list):
        for item in value:
            found += _ids_in(item)
    return found


def _same(before: dict, after: dict) -> None:
    assert before.keys() == after.keys()
    for key in before:
        if key.startswith("q:"):
            assert [i for i, _ in after[key]] == [i for i, _ in before[key]], key
            for (_, a), (_, b) in zip(after[key], before[key], strict=True):
                # 1e-4: recency follows the wall clock (a fact remembered seconds before moves
                # by ~1e-6 in the ~20 s a damaged test takes), ranking changes are larger
                assert a == pytest.approx(b, abs=1e-4), key
        else:
            assert after[key] == before[key], key


# PostgreSQL's lexical and vector indexes are indexes of memories and memory_vectors (the
# tsvector column is generated from the row): dropped as SQLite's index tables are.
PG_INDEXES = ("memories_fts", "memories_trgm", "memory_vectors_hnsw")


def _damage(path, *, episodes: bool = True) -> None:
    """Drop or empty every derived table (and index), and every memory cut from an event."""
    db = Database(path)
    try:
        with db.transaction():
            for table in (*db.backend.lexical_tables, *db.backend.vector_tables,
                          "memory_sparse"):
                db.execute(f"DROP TABLE IF EXISTS {table}")
            if is_pg(path):
                for index in PG_INDEXES:
                    db.execute(f"DROP INDEX IF EXISTS {index}")
            for table in (*(t for t in db.backend.sparse_tables if t != "memory_sparse"),
                          "sparse_df", "memory_vectors", "memory_entities",
                          "entity_aliases", "entities", "relations"):
                db.execute(f"DELETE FROM {table}")
            if episodes:
                db.execute("DELETE FROM memories WHERE event_id IS NOT NULL")
    finally:
        db.close()


def _rebuild(cli, *args: str) -> dict:
    result = cli("rebuild", "--format", "json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _lexical_tables(path) -> set[str]:
    db = Database(path)
    try:
        return set(db.backend.lexical_tables)
    finally:
        db.close()


def test_rebuild_after_dropping_everything_derived(cli, db_path, built):
    before = _results(cli)
    rows_before = _dump(db_path, skip=LAYOUT)
    indexes = index_names(db_path)
    edges = _edges(db_path)
    assert sorted(e[2] for e in edges) == ["related", "supersedes"]
    _damage(db_path)
    report = _rebuild(cli)
    assert report["relations_restored"] == 2
    assert report["episodes"]["restored"] == report["episodes"]["expected"]
    assert report["episodes"]["new"] == 0  # every id came back
    assert set(report["tables_recreated"]) >= _lexical_tables(db_path) | {"memory_sparse"}
    assert index_names(db_path) == indexes  # every index is back
    _same(before, _results(cli))
    # The forgotten memory is still forgotten, the pinned one pinned.
    db = Database(db_path)
    try:
        state, pinned = db.execute("SELECT state, pinned FROM memories WHERE id = ?",
                                   (built["forgotten"],)).fetchone()
        assert state == "soft_deleted"
        assert db.scalar("SELECT pinned FROM memories WHERE id = ?", (built["pinned"],)) == 1
        assert db.scalar("SELECT state FROM memories WHERE id = ?", (built["fact"],)) == \
            "superseded"
    finally:
        db.close()
    hits = _json(cli("query", "Green tea or coffee", "--user", "bob", "--format", "json"))
    assert built["forgotten"] not in [h["id"] for h in hits]
    # Rows the queries above do not show: the same (access counts aside, which the
    # queries themselves change, and episode state columns the event does not hold).
    after = _dump(db_path, skip=LAYOUT)
    assert _edges(db_path) == edges  # from history (created_at: the history row's time)
    for table in ("events", "artifacts", "history", "decisions", "sessions",
                  "sparse_postings", "sparse_df", "memory_sparse", "memory_vectors",
                  "memory_entities", "entity_aliases"):
        if table in rows_before or table in after:  # (sparse_postings: SQLite's only)
            assert after[table] == rows_before[table], table


def test_rebuild_of_an_intact_database_changes_nothing_twice(cli, db_path, built):
    before = _results(cli)
    rows = _dump(db_path, skip=LAYOUT)
    first = _rebuild(cli)
    assert first["episodes"]["restored"] == first["episodes"]["new"] == 0
    assert first["cannot_rebuild"] == []
    assert _dump(db_path, skip=LAYOUT) == rows
    again = _dump(db_path)
    _rebuild(cli)
    assert _dump(db_path) == again  # every table, index layouts included
    _same(before, _results(cli))


def test_rebuild_twice_after_damage_changes_nothing(cli, db_path, built):
    _damage(db_path)
    _rebuild(cli)
    once = _dump(db_path, skip=("vec_memories",))
    second = _rebuild(cli)
    assert second["episodes"]["restored"] == second["episodes"]["new"] == 0
    assert _dump(db_path, skip=("vec_memories",)) == once


def test_dry_run_writes_nothing(cli, db_path, built):
    _damage(db_path)
    rows = _dump(db_path)
    plan = _rebuild(cli, "--dry-run")
    assert plan["dry_run"] is True
    assert plan["episodes"]["restored"] == plan["episodes"]["expected"] > 0
    for table in _lexical_tables(db_path) | {"memory_sparse"}:
        assert plan["derived_rows_now"][table] is None  # dropped, and still dropped
    assert _dump(db_path) == rows


def test_corrupted_text_is_rewritten_from_its_event(cli, db_path, built):
    before = _results(cli)
    db = Database(db_path)
    try:
        with db.transaction():
            db.execute("UPDATE memories SET content = 'garbage' WHERE id = ?",
                       (built["pinned"],))
    finally:
        db.close()
    report = _rebuild(cli)
    assert report["episodes"]["rewritten"] == 1
    _same(before, _results(cli))


def test_a_purged_memory_is_not_brought_back(cli, db_path, built):
    """Decay purges a soft-deleted episode for good (its event stays, as ground truth):
    history records the purge, and a rebuild never cuts it from the event again."""
    from memcli.store.decay_sql import purge_memories

    db = Database(db_path)
    try:
        with db.transaction():
            purge_memories(db, [built["forgotten"]], "2026-01-01T00:00:00Z")
    finally:
        db.close()
    _damage(db_path)
    report = _rebuild(cli)
    assert built["forgotten"] in report["episodes"]["not_restored_purged"]
    db = Database(db_path)
    try:
        assert db.scalar("SELECT count(*) FROM memories WHERE event_id = 's3-2'") == 0
    finally:
        db.close()


def test_an_id_history_never_recorded_is_reported(cli, db_path, built):
    db = Database(db_path)
    try:
        with db.transaction():
            db.execute("DELETE FROM history WHERE event_id = 's2-0'")
    finally:
        db.close()
    _damage(db_path)
    report = _rebuild(cli)
    assert report["episodes"]["new"] == 1
    new = report["episodes"]["new_ids"]
    assert [(n["event_id"], n["chunk_index"]) for n in new] == [("s2-0", 0)]
    assert "no ADD history row" in new[0]["why"]


def test_a_lost_fact_comes_back_from_its_event(cli, db_path, built):
    """`remember` and `correct` record their event first: a fact whose row is lost comes back
    with its id, text and state (superseded, or current)."""
    db = Database(db_path)
    try:
        rows = {mid: tuple(r) for mid, *r in db.execute(
            "SELECT id, content, state, valid_to, updated_at FROM memories WHERE id IN (?, ?)",
            (built["fact"], built["corrected"]))}
        with db.transaction():
            db.execute("DELETE FROM memories WHERE id IN (?, ?)",
                       (built["fact"], built["corrected"]))
    finally:
        db.close()
    report = _rebuild(cli)
    assert sorted(report["commands"]["restored_memories"]) == sorted(rows)
    assert [c for c in report["cannot_rebuild"] if "no event wrote" in c["what"]] == []
    db = Database(db_path)
    try:
        assert {mid: tuple(r) for mid, *r in db.execute(
            "SELECT id, content, state, valid_to, updated_at FROM memories WHERE id IN (?, ?)",
            (built["fact"], built["corrected"]))} == rows
    finally:
        db.close()


def test_a_lost_summary_is_reported_not_invented(cli, db_path, built):
    """A memory no event wrote (a model's summary): its text existed only in its row."""
    from memcli.derived import writer as derive
    from memcli.operations.memory import Memory
    from memcli.providers.embedders import HashEmbedder

    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory, memory.db.transaction():
        summary = derive.write_memory(memory, content="Alice and Bob plan a Paris trip.",
                                      kind="summary", source_ids=[], user_id="alice")
    db = Database(db_path)
    try:
        with db.transaction():
            db.execute("DELETE FROM memories WHERE id = ?", (summary,))
    finally:
        db.close()
    result = cli("rebuild", "--format", "json")
    assert result.exit_code == 0
    lost = json.loads(result.stdout)["cannot_rebuild"]
    assert [c["ids"] for c in lost if "no event wrote" in c["what"]] == [
        [{"id": summary, "kind": "summary"}]]
    assert "cannot rebuild: memories no event wrote" in result.stderr


def test_a_busy_database_exits_75(cli, db_path, built, monkeypatch):
    monkeypatch.setenv("MEMCLI_BUSY_TIMEOUT", "0.2")
    _damage(db_path)
    rows = _dump(db_path)
    with writer_lock_held(db_path):
        result = cli("rebuild")
    assert result.exit_code == 75
    assert _dump(db_path) == rows


def test_without_the_key_a_high_database_is_refused(cli, db_path, built, monkeypatch,
                                                    tmp_path):
    monkeypatch.delenv("MEMCLI_KEY")
    monkeypatch.setenv("MEMCLI_KEY_FILE", str(tmp_path / "no-such-key"))
    rows = _dump(db_path)
    result = cli("rebuild")
    assert result.exit_code == 2
    assert "encryption key" in result.stderr
    assert _dump(db_path) == rows


def _doctor(cli) -> tuple[int, dict]:
    result = cli("doctor", "--format", "json")
    return result.exit_code, {c["check"]: c for c in json.loads(result.stdout)["checks"]}


def test_doctor_points_to_rebuild(cli, db_path, built):
    _damage(db_path)
    code, checks = _doctor(cli)
    assert code == 1
    assert checks["missing:tables"]["fix"] == "memcli rebuild"
    _rebuild(cli)
    code, checks = _doctor(cli)
    assert code == 0, checks
    db = Database(db_path)
    try:
        with db.transaction():
            db.execute("DELETE FROM memories WHERE event_id = 's1-1'")
    finally:
        db.close()
    code, checks = _doctor(cli)
    assert code == 1
    assert checks["missing:episodes"]["fix"] == "memcli rebuild"
    assert checks["missing:episodes"]["ids"] == [built["pinned"]]


def test_a_dropped_memories_table(cli, db_path, built):
    """The worst case: the memories table itself is dropped (its foreign keys take every
    derived row with it; PostgreSQL: emptied with every table naming it). Episodes come back
    with their ids and state, the fact, its correction and the decision from their events."""
    before = _results(cli)
    db = Database(db_path)
    try:
        with db.transaction():
            if is_pg(db_path):
                # PostgreSQL refuses to drop a table other tables' foreign keys name; TRUNCATE
                # CASCADE empties it and them, as SQLite's DROP does through ON DELETE CASCADE.
                db.execute("TRUNCATE memories CASCADE")
            else:
                db.execute("DROP TABLE memories")
    finally:
        db.close()
    rows = _dump(db_path)
    plan = _rebuild(cli, "--dry-run")
    assert plan["tables_to_recreate"] == ([] if is_pg(db_path) else ["memories"])
    assert _dump(db_path) == rows
    report = _rebuild(cli)
    assert report["episodes"]["new"] == 0
    assert [c for c in report["cannot_rebuild"] if "no event wrote" in c["what"]] == []
    assert {built["fact"], built["corrected"]} <= set(report["commands"]["restored_memories"])
    assert len(report["ledger"]["restored_decisions"]) == 1
    after = _results(cli)
    for key in (k for k in before if k.startswith("q:")):
        assert [i for i, _ in after[key]] == [i for i, _ in before[key]], key
    db = Database(db_path)
    try:
        assert db.scalar("SELECT state FROM memories WHERE id = ?", (built["forgotten"],)) == \
            "soft_deleted"
    finally:
        db.close()


def test_dropped_indexes_are_reported_and_made_again(cli, db_path, built):
    """An index dropped (a scope index; on PostgreSQL also the lexical GINs and the HNSW
    index, its lexical and dense indexes): every query still answers, by scanning. Doctor
    names them and sends to rebuild, which makes them again."""
    before, indexes = _results(cli), index_names(db_path)
    dropped = ("memories_scope", *(PG_INDEXES if is_pg(db_path) else ()))
    db = Database(db_path)
    try:
        with db.transaction():
            for index in dropped:
                db.execute(f"DROP INDEX {index}")
    finally:
        db.close()
    code, checks = _doctor(cli)
    assert code == 1
    assert checks["missing:indexes"]["fix"] == "memcli rebuild"
    assert checks["missing:indexes"]["indexes"] == sorted(dropped)
    _rebuild(cli)
    assert index_names(db_path) == indexes
    assert _doctor(cli)[0] == 0
    _same(before, _results(cli))
