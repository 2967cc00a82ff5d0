"""The PostgreSQL schema against SQLite's: the same tables, columns (kind of type, NOT NULL,
primary key) and indexes, so a SQLite migration without its PostgreSQL twin fails here; the
events guard; the text search configuration; `ensure_vectors`."""

from __future__ import annotations

import pytest

from memcli.errors import EmbedderMismatchError

pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not installed")

from memcli.store.postgres import connect  # noqa: E402
from memcli.store.postgres.migrations import ensure_vectors  # noqa: E402

# What differs on purpose, each with where the SQLite thing went on PostgreSQL.
SQLITE_ONLY_TABLES = {
    "memories_fts": "FTS5: the generated memories.fts tsvector + GIN index memories_fts",
    "memories_trigram": "FTS5 trigram: GIN index memories_trgm (pg_trgm) on memories.content",
}
SQLITE_ONLY_PLAIN_TABLES = {
    "sparse_postings": "SPLADE postings: one pgvector sparsevec per memory, memory_sparse.vec",
}
SQLITE_ONLY_COLUMNS = {
    ("memory_sparse", "terms"): "the packed term ids: the sparsevec holds them (its indices)",
}
PG_ONLY_COLUMNS = {
    ("memories", "context"): "the previous turn, which FTS5 keeps only inside its index",
    ("memories", "fts"): "the lexical index (tsvector, generated from content and context)",
    ("memories", "fts_tokens"): "BM25's document length (FTS5 keeps it inside its index)",
    ("memory_vectors", "tenant_id"): "denormalised: the dense leg filters inside the KNN scan",
    ("memory_vectors", "user_id"): "idem",
    ("memory_sparse", "vec"): "the SPLADE weights as a sparsevec (SQLite: sparse_postings)",
    ("memory_sparse", "tenant_id"): "denormalised (schema 6): the first column of its term index",
}
PG_ONLY_TABLES = {
    "lexeme_df": "BM25's df per lexeme (FTS5 keeps it inside its index), kept by triggers",
    "lexical_stats": "BM25's memory count and token total (idem)",
    "tenant_roles": "login roles bound to one tenant (row-level security, schema 3)",
}
# memory_sparse_tenant_terms: the sparse leg's GIN index over (tenant, term ids) (schema 6, in
# place of schema 5's over term ids; SQLite has postings).
PG_ONLY_INDEXES = {"memories_fts", "memories_trgm", "memory_vectors_scope",
                   "memory_sparse_tenant_terms"}
# SQLite's two triggers are one plpgsql trigger function on PostgreSQL.
TRIGGERS = {"events_no_update": "events_append_only", "events_no_delete": "events_append_only"}
# The statement triggers keeping lexeme_df and lexical_stats (FTS5 keeps its own), and
# sparse_df (SQLite's sparse write path counts in the writer's statements).
PG_ONLY_TRIGGERS = {"memories_lexical_insert", "memories_lexical_update",
                    "memories_lexical_delete", "memory_sparse_df_insert",
                    "memory_sparse_df_update", "memory_sparse_df_delete",
                    "memory_sparse_df_truncate", "memory_sparse_tenant"}
# SQLite declared type -> the PostgreSQL types it may become.
TYPES = {
    "INTEGER": {"bigint", "integer", "smallint"},
    "TEXT": {"text"},
    "REAL": {"double precision"},
    "BLOB": {"bytea", "USER-DEFINED"},  # USER-DEFINED: pgvector's vector
}


def _sqlite_schema(tmp_path):
    from memcli.store.sqlite.connection import Database

    db = Database(tmp_path / "fresh.db")
    try:
        tables = {}
        for name, kind in db.execute(
                "SELECT name, type FROM pragma_table_list WHERE schema = 'main'"):
            if kind != "table" or name.startswith("sqlite_"):
                continue  # FTS5 virtual tables and their shadow tables: listed above
            tables[name] = {
                column: (decl.upper(), bool(notnull) or pk > 0, pk > 0)
                for _cid, column, decl, notnull, _default, pk in db.execute(
                    "SELECT * FROM pragma_table_info(?)", (name,))}
        virtual = {r[0] for r in db.execute(
            "SELECT name FROM pragma_table_list WHERE type = 'virtual'")}
        indexes = {r[0] for r in db.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL")}
        triggers = {r[0] for r in db.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'trigger'")}
    finally:
        db.close()
    return tables, virtual, indexes, triggers


def _pg_schema(db):
    tables: dict = {}
    for table, column, data_type, nullable in db.execute(
            "SELECT table_name, column_name, data_type, is_nullable"
            " FROM information_schema.columns WHERE table_schema = current_schema()"
            " ORDER BY table_name, ordinal_position"):
        tables.setdefault(table, {})[column] = (data_type, nullable == "NO")
    keys = {(t, c) for t, c in db.execute(
        "SELECT tc.table_name, k.column_name FROM information_schema.table_constraints tc"
        " JOIN information_schema.key_column_usage k USING (constraint_schema, constraint_name)"
        " WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = current_schema()")}
    indexes = {r[0] for r in db.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
        " AND indexname NOT LIKE '%\\_pkey' AND indexname NOT LIKE '%\\_key'")}
    triggers = {r[0] for r in db.execute(
        "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")}
    return tables, keys, indexes, triggers


def test_postgresql_schema_matches_sqlite(pg_db, tmp_path):  # noqa: F811
    lite, virtual, lite_indexes, lite_triggers = _sqlite_schema(tmp_path)
    assert virtual == set(SQLITE_ONLY_TABLES)
    db = connect(pg_db)
    try:
        pg, keys, pg_indexes, pg_triggers = _pg_schema(db)
    finally:
        db.close()
    assert set(pg) - set(PG_ONLY_TABLES) == set(lite) - set(SQLITE_ONLY_PLAIN_TABLES), \
        "tables differ"
    for table, columns in lite.items():
        if table in SQLITE_ONLY_PLAIN_TABLES:
            continue
        columns = {c: v for c, v in columns.items() if (table, c) not in SQLITE_ONLY_COLUMNS}
        extra = {c for c in pg[table] if (table, c) not in PG_ONLY_COLUMNS}
        assert extra == set(columns), f"columns of {table} differ"
        for column, (decl, notnull, pk) in columns.items():
            pg_type, pg_notnull = pg[table][column]
            assert pg_type in TYPES[decl], (table, column, decl, pg_type)
            assert pg_notnull == notnull, (table, column, "NOT NULL")
            assert ((table, column) in keys) == pk, (table, column, "PRIMARY KEY")
    assert pg_indexes - PG_ONLY_INDEXES == lite_indexes
    # PostgreSQL's identity columns follow explicit ids through one trigger each (SQLite's
    # rowid does by itself): memcli_follow_identity in schema.sql.
    follows = {t for t in pg_triggers if t.endswith("_follows_ids")}
    assert len(follows) >= 10
    assert {TRIGGERS[t] for t in lite_triggers} == pg_triggers - follows - PG_ONLY_TRIGGERS


def test_events_are_append_only_except_under_the_purge_guard(pg_memcli_db):  # noqa: F811
    psycopg = pytest.importorskip("psycopg")
    db = connect(pg_memcli_db)
    try:
        db.execute("INSERT INTO events (event_id, ts, recorded_at, content_hash)"
                   " VALUES ('e1', 't', 't', 'h1')")
        for statement in ("UPDATE events SET ts = 'x'", "DELETE FROM events"):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                with db.transaction():
                    db.execute(statement)
        with db.transaction():  # what store/purge_sql.py does
            db.set_meta("purge_guard", "1")
            assert db.change_count("DELETE FROM events WHERE event_id = 'e1'") == 1
            db.execute("DELETE FROM meta WHERE key = 'purge_guard'")
        assert db.scalar("SELECT count(*) FROM events") == 0
    finally:
        db.close()


def test_text_search_config_stems_keeps_stopwords_and_skips_high(pg_memcli_db):  # noqa: F811
    db = connect(pg_memcli_db)
    try:
        for content, sensitivity in (("Priya was running to the café", "none"),
                                     ("Priya was running too", "high")):
            db.execute("INSERT INTO memories (content, sensitivity, event_time, created_at,"
                       " updated_at) VALUES (?, ?, 't', 't', 't')", (content, sensitivity))
        for words in ("runs", "was", "cafe"):
            found = db.query("SELECT content FROM memories"
                             " WHERE fts @@ plainto_tsquery('memcli', ?)", (words,))
            assert found == [{"content": "Priya was running to the café"}], words
    finally:
        db.close()


def test_ensure_vectors_sets_the_dimension_once(pg_memcli_db):  # noqa: F811
    db = connect(pg_memcli_db)
    try:
        ensure_vectors(db, 4)
        assert db.scalar("SELECT indexdef FROM pg_indexes"
                         " WHERE indexname = 'memory_vectors_hnsw'").endswith(
            "USING hnsw (embedding vector_cosine_ops)")
        ensure_vectors(db, 3)  # still empty: a new model may change it
        mid = db.insert("INSERT INTO memories (content, event_time, created_at, updated_at)"
                        " VALUES ('x', 't', 't', 't') RETURNING id")
        db.execute("INSERT INTO memory_vectors (memory_id, tenant_id, embedding)"
                   " VALUES (?, 'default', '[1,0,0]')", (mid,))
        ensure_vectors(db, 3)  # same dimension: nothing to do
        with pytest.raises(EmbedderMismatchError, match="3 dimensions"):
            ensure_vectors(db, 4)
        assert db.scalar("SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
                         " WHERE attrelid = 'memory_vectors'::regclass"
                         " AND attname = 'embedding'") == "vector(3)"
    finally:
        db.close()


def test_foreign_keys_are_checked_and_can_be_deferred_to_commit(pg_memcli_db):  # noqa: F811
    """SQLite's `PRAGMA defer_foreign_keys` (import) is `SET CONSTRAINTS ALL DEFERRED`, which
    only reaches DEFERRABLE constraints."""
    psycopg = pytest.importorskip("psycopg")
    db = connect(pg_memcli_db)
    link = "INSERT INTO relations (src_id, dst_id, created_at) VALUES (7, 8, 't')"
    try:
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            db.execute(link)
        with db.transaction():
            db.execute("SET CONSTRAINTS ALL DEFERRED")
            db.execute(link)  # before its memories, as an import may write rows
            for mid in (7, 8):
                db.execute("INSERT INTO memories (id, content, event_time, created_at,"
                           " updated_at) VALUES (?, 'x', 't', 't', 't')", (mid,))
        assert db.scalar("SELECT count(*) FROM relations") == 1
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            with db.transaction():
                db.execute("SET CONSTRAINTS ALL DEFERRED")
                db.execute("INSERT INTO memory_entities (memory_id, entity_id) VALUES (7, 99)")
    finally:
        db.close()
