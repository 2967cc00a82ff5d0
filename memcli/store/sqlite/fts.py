"""FTS5: the lexical and trigram legs, their MATCH strings and their index rows.

`memories_fts` (porter, unicode61, diacritics folded) holds each memory's text, its context
key (an episode's previous turn) and a `scope` column of hashed tenant/user/session tokens;
`memories_trigram` holds the text for substring matching of scripts without spaces. Both are
contentless: rows are written by hand beside the memory (empty for a `high` memory: FTS5
keeps indexed terms in plain text), deleted on purge, and rebuilt from `memories`.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

from memcli.config import bundled_text
from memcli.store.batching import chunks, marks
from memcli.store.orphans import ids_lacking
from memcli.store.search_sql import SMALL_SCOPE, estimate_scope

if TYPE_CHECKING:
    from memcli.store.backend import LexicalQuery
    from memcli.store.filters import Filters
    from memcli.store.sqlite.connection import Database

LEXICAL_TABLES = ("memories_fts", "memories_trigram")


# -- MATCH strings ---------------------------------------------------------------------------------
def quote(term: str) -> str:
    """An FTS5 string literal: double quotes doubled, so nothing inside is syntax."""
    return '"' + term.replace('"', '""') + '"'


def fts_match(query: LexicalQuery) -> str | None:
    """OR of quoted terms (FTS5's default AND finds almost nothing for questions)."""
    return " OR ".join(quote(w) for w in query.terms) or None


def trigram_match(query: LexicalQuery) -> str | None:
    """OR of the quoted 3-character grams."""
    return " OR ".join(quote(g) for g in query.grams) or None


def _scope_token(prefix: str, value: str) -> str:
    digest = hashlib.blake2b(value.encode("utf-8"), digest_size=6).hexdigest()
    return f"{prefix}{digest}"


def scope_terms(tenant_id: str | None, user_id: str | None, session_id: str | None) -> str:
    """The `scope` column of a memory's lexical index row: one token per set scope field.

    A query ANDs the token of its narrowest scope into its MATCH, so FTS5 intersects posting
    lists and BM25 scores only rows of that scope, instead of scoring every match in the file
    and dropping most of them in the join. The tokens are a prefilter only (the exact filter
    still runs in SQL), so a hash collision can cost time, never a wrong result.
    """
    parts = []
    for prefix, value in (("t", tenant_id), ("u", user_id), ("s", session_id)):
        if value is not None:
            parts.append(_scope_token(prefix, value))
    return " ".join(parts)


def register_scope_function(db: Database) -> None:
    """`memcli_scope_terms(tenant, user, session)` in SQL, for rebuilding the lexical index."""
    db.conn.create_scalar_function("memcli_scope_terms", scope_terms, 3, deterministic=True)


def scoped_match(match: str, filters: Filters) -> str:
    """`match` restricted to the turn and context columns, ANDed with the filters' narrowest
    scope token (session, else user, else tenant); unchanged in meaning, faster to run."""
    for prefix, value in (("s", filters.session_id), ("u", filters.user_id),
                          ("t", filters.tenant_id)):
        if value is not None:
            return f'{{content context}} : ({match}) AND scope : "{_scope_token(prefix, value)}"'
    return f"{{content context}} : ({match})"


# -- legs --------------------------------------------------------------------------------------
def lexical(db: Database, query: LexicalQuery, filters: Filters, limit: int,
            context_weight: float = 0.5) -> list[tuple[int, float]]:
    """BM25 over the turn (weight 1) and its context column; higher score is better."""
    match = fts_match(query)
    if match is None:
        return []
    return _bm25(db, "memories_fts", "bm25(memories_fts, 1.0, ?, 0.0)", [context_weight],
                 scoped_match(match, filters), filters, limit)


def trigram(db: Database, query: LexicalQuery, filters: Filters,
            limit: int) -> list[tuple[int, float]]:
    """FTS5 trigram BM25 over the query's 3-grams; a query with a 1-2 character gram, which
    the trigram index cannot match, scans the filtered rows instead (`substring_scan`)."""
    if any(len(g) < 3 for g in query.grams):
        return substring_scan(db, list(query.grams), filters, limit)
    match = trigram_match(query)
    if match is None:
        return []
    return _bm25(db, "memories_trigram", "bm25(memories_trigram)", [], match, filters, limit)


def _bm25(db: Database, table: str, bm25: str, bm25_params: list[float], match: str,
          filters: Filters, limit: int) -> list[tuple[int, float]]:
    """The memories passing `filters` whose row of the FTS5 `table` matches, by the `bm25`
    call (its `?` bound to `bm25_params`) negated: higher is better."""
    where, params = filters.sql()
    rows = db.execute(
        f"SELECT m.id, -{bm25} AS s FROM {table}"
        f" JOIN memories m ON m.id = {table}.rowid"
        f" WHERE {table} MATCH ? AND {where} ORDER BY s DESC, m.id LIMIT ?",
        [*bm25_params, match, *params, limit],
    )
    return [(int(i), float(s)) for i, s in rows]


def substring_scan(db: Database, grams: list[str], filters: Filters,
                   limit: int) -> list[tuple[int, float]]:
    """Memories containing any of `grams` as a substring, scored as PostgreSQL's trigram leg
    scores them (memcli.store.postgres.legs.trigram): the distinct grams found, plus how much
    of the text their occurrences cover, in [0, 1) (a short text that is mostly the query
    first). `instr` over the rows passing the filters. A user's or a session's rows are read
    through their indexes; a tenant-wide read of more than SMALL_SCOPE rows reads the table in
    order instead (`NOT INDEXED`): at 100k memories of 100 users, a 2-character query took
    p50 2 ms in one user's scope, 0.1 ms in a session, and 54-68 ms tenant-wide in table
    order against 550-630 ms through the scope index (its random row lookups); 10k memories:
    10-14 ms tenant-wide. `high` rows never match (their trigram rows are empty too)."""
    if not grams:
        return []
    where, params = filters.sql()
    large = (filters.user_id is None and filters.session_id is None
             and estimate_scope(db, filters, cap=SMALL_SCOPE) > SMALL_SCOPE)
    table = "memories m NOT INDEXED" if large else "memories m"
    any_gram = " OR ".join(["instr(m.content, ?) > 0"] * len(grams))
    found = " + ".join(["(instr(m.content, ?) > 0)"] * len(grams))
    covered = " + ".join(
        ["(length(m.content) - length(replace(m.content, ?, '')))"] * len(grams))
    coverage = f"(({covered}) * 1.0 / max(length(m.content), 1))"
    rows = db.execute(
        f"SELECT m.id, ({found}) + {coverage} / (1 + {coverage}) AS s FROM {table}"
        f" WHERE m.sensitivity <> 'high' AND ({any_gram}) AND {where}"
        f" ORDER BY s DESC, m.id LIMIT ?",
        [*grams, *grams, *grams, *grams, *params, limit],
    )
    return [(int(i), float(sc)) for i, sc in rows]


# -- index rows --------------------------------------------------------------------------------
def index_new_memories(db: Database, entries: list[tuple[int, str, str, tuple[
        str | None, str | None, str | None]]]) -> None:
    """The full-text and trigram rows of new memories: (id, text, context, scope) each (one
    executemany per table: apsw runs one prepared statement for all)."""
    if not entries:
        return
    db.executemany(
        "INSERT INTO memories_fts (rowid, content, context, scope) VALUES (?, ?, ?, ?)",
        [(memory_id, text, context, scope_terms(*scope))
         for memory_id, text, context, scope in entries])
    db.executemany("INSERT INTO memories_trigram (rowid, content) VALUES (?, ?)",
                   [(memory_id, text) for memory_id, text, _, _ in entries])


def index_memories(db: Database, ids: list[int]) -> None:
    """Full-text and trigram rows for these memories, as ingest writes them: a `high` memory's
    rows are empty and it is nobody's context; an episode's context is the previous episode of
    its session (the same rule as `rebuild_lexical`)."""
    if not ids:
        return
    register_scope_function(db)
    db.execute("CREATE TEMP TABLE IF NOT EXISTS portable_ids (id INTEGER PRIMARY KEY)")
    db.execute("DELETE FROM portable_ids")
    db.executemany("INSERT INTO portable_ids (id) VALUES (?)", [(i,) for i in ids])
    _fill_lexical(db, "portable_ids")
    db.execute("DELETE FROM portable_ids")


def unindex_memories(db: Database, ids: list[int]) -> None:
    for part in chunks(ids, 500):
        in_list = marks(part)
        db.execute(f"DELETE FROM memories_fts WHERE rowid IN ({in_list})", part)
        db.execute(f"DELETE FROM memories_trigram WHERE rowid IN ({in_list})", part)


def optimize_lexical(db: Database) -> None:
    # FTS5 keeps a deleted row's terms in its segments (contentless_delete only adds a
    # tombstone) until the segments are merged: rewrite both indexes so the text really goes.
    db.execute("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')")
    db.execute("INSERT INTO memories_trigram (memories_trigram) VALUES ('optimize')")


def rebuild_lexical(db: Database) -> None:
    """Both lexical indexes again from `memories` (the same rows ingest writes: a `high`
    memory's rows are empty, and it is nobody's context, as `memories.insert_memory` does)."""
    register_scope_function(db)
    db.execute("INSERT INTO memories_fts (memories_fts) VALUES ('delete-all')")
    db.execute("INSERT INTO memories_trigram (memories_trigram) VALUES ('delete-all')")
    _fill_lexical(db, None)


def _fill_lexical(db: Database, ids_table: str | None) -> None:
    """Both lexical indexes' rows of the memories whose ids are in `ids_table` (None: every
    memory). An episode's context is the previous episode of its session, so the window
    reads every memory of their sessions, then keeps their own rows."""
    where = ("" if ids_table is None else
             f" WHERE (tenant_id, coalesce(session_id, '')) IN ("
             f"SELECT m.tenant_id, coalesce(m.session_id, '') FROM memories m"
             f" JOIN {ids_table} p ON p.id = m.id)")
    only = "" if ids_table is None else f" WHERE id IN (SELECT id FROM {ids_table})"
    db.execute(f"""
        WITH plain AS (
            SELECT id, kind, session_id, tenant_id, user_id, event_seq, chunk_index,
                   sensitivity = 'high' AS high,
                   CASE WHEN sensitivity = 'high' THEN '' ELSE content END AS text
            FROM memories{where}),
        ctx AS (
            SELECT id, text, tenant_id, user_id, session_id,
                   CASE WHEN kind = 'episode' AND session_id IS NOT NULL AND NOT high
                        THEN coalesce(lag(text) OVER (PARTITION BY tenant_id, session_id,
                                                      kind = 'episode'
                                                      ORDER BY event_seq, chunk_index), '')
                        ELSE '' END AS context
            FROM plain)
        INSERT INTO memories_fts (rowid, content, context, scope)
        SELECT id, text, context, memcli_scope_terms(tenant_id, user_id, session_id)
        FROM ctx{only}""")
    db.execute("INSERT INTO memories_trigram (rowid, content) SELECT id,"
               " CASE WHEN sensitivity = 'high' THEN '' ELSE content END FROM memories"
               + only)


def _create_statement(name: str) -> str:
    match = re.search(rf"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5 \(.*?\);",
                      bundled_text("schema.sql"), re.S)
    assert match is not None, name  # schema.sql defines both lexical tables
    return match.group(0)


def reset_lexical(db: Database) -> None:
    """Drop and re-create both lexical indexes, empty (a damaged FTS5 b-tree cannot always
    be emptied); their DDL is schema.sql's own."""
    for name in LEXICAL_TABLES:
        db.execute(f"DROP TABLE IF EXISTS {name}")
        db.conn.execute(_create_statement(name))


def lexical_orphans(db: Database) -> dict[str, list[int]]:
    return {name: ids_lacking(db, name, (f"{name}.rowid", "memories", "id"))
            for name in LEXICAL_TABLES}


def lexical_missing(db: Database) -> dict[str, list[int]]:
    return {name: ids_lacking(db, "memories", ("memories.id", name, "rowid"))
            for name in LEXICAL_TABLES}
