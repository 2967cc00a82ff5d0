"""SQL of the retrieval legs on PostgreSQL: full text, trigram, dense and the large-scope plan of
the entity leg.

Each leg returns [(memory id, score)] best first, ties by id, filtered inside its SQL by the
same `Filters.sql()` as SQLite's legs (memcli/store/search_sql.py); ranking stays above the store.
Tables and indexes: schema.sql (`memories.fts`, a generated tsvector of
the turn at weight A and its context at weight B; the `(tenant_id, fts)` GIN; the partial
trigram GIN; `memory_vectors` with tenant/user columns and HNSW indexes). `db` is memcli's
Database surface with `?` placeholders (the PostgreSQL connection rewrites them).

What each choice measured (bench/results/pg-legs.md, LoCoMo, 1,982 questions, the same rows on both
engines; bench/results/pg-legs.md). End to end, memcli's fusion and stages over these legs give
R@1/5/10/25 within 0.1 point of SQLite's (the issue's bound is 1 point).
- lexical: BM25 in SQL with FTS5's formula (k1 1.2, b 0.75, idf floor 1e-6, term frequency =
  turn hits + `context_weight` x context hits, length in tokens). The corpus statistics are
  kept by the writers as FTS5 keeps them in its index (schema.sql: `lexeme_df`, the memory
  count and token total in `lexical_stats`, each memory's `fts_tokens`, all kept by statement
  triggers on memories) and read by key. Measured before they were kept (df counted per
  lexeme through the GIN, corpus size = highest id, mean length over the newest
  AVGDL_SAMPLE rows): leg R@10 71.8 vs FTS5 71.7, top-10 overlap 97 %; p50 29 ms vs FTS5's
  2 ms, of which the df counts ~5 ms and the length sample ~4 ms. With kept statistics, on
  54k memories of 1,000 users (bench/results/pg-scale.md): one user's lexical leg 48 -> 8 ms
  p50, tenant-wide 131 -> 69 ms, the same top 10 (scores within 5e-4: the exact count and
  mean length replace the estimates). What remains is unnesting each match's tsvector for
  the query lexemes' tf. ts_rank_cd (no idf: an OR of question words
  ranks "go" like a name) lost 14.4 points R@10 on the leg and 4.1 end to end; ts_rank 6.6 and
  2.0. BM25 over the `english` configuration (stopwords dropped, no unaccent): same recall
  (+0.2 end to end), overlap 91 %; `memcli` (unaccent + snowball english, no stopwords, as
  FTS5's porter tokenizer keeps every word) is kept for parity. Length in distinct lexemes
  (`length(fts)`, no unnest) is as good end to end, overlap 92 %. BM25 in Python over every
  GIN match: same ranking, slower. Over a tenant (no user in the filters) the store runs
  lexical.py's MaxScore instead: the same answer, scoring only the matches that can reach
  the top `limit` (bench/results/pg-lexical-maxscore-250k.md); one user's scope runs this
  statement as it is.
- trigram: the CJK grams as ILIKE substrings (the partial `memories_trgm` GIN answers grams of
  3+ characters; a 1-2 character query still finds its rows by scanning the filtered ones,
  where FTS5's trigram MATCH finds nothing), scored by the distinct grams found plus how much of
  the text their occurrences cover (a short text that is mostly the query first, as FTS5's BM25
  ranks it). Same order as FTS5 on every query of the CJK check that FTS5 answers;
  `similarity`/`word_similarity` scores differ on 2-character queries (similarity of a short
  query is ~0 by construction).
- dense: an exact `<=>` over the filtered rows up to EXACT_SCAN_MAX (LoCoMo's scopes: the same
  ids as SQLite's exact scan, p50 2.8 ms); above it `knn_sql`, an HNSW walk within the tenant
  with pgvector's iterative scan, reranked exactly (forced on LoCoMo: recall equal; without the
  iterative scan -2.1 R@10; the bit-quantized index -0.7 R@25).
- sparse: not here. memcli/store/postgres/sparse.py scores one pgvector `sparsevec` per memory
  (`inner_product`, exact over the filtered rows) behind memcli/store/sparse.py's shared
  pruning; it replaced the postings table SQLite keeps (10x smaller at 54k memories, the same
  top 10 as an exact dot product; bench/results/pg-scale.md). `best_in_scope` below is still
  the entity leg's large-scope plan: SQLite's `CROSS JOIN` keeps the score order, a plain
  PostgreSQL JOIN returned rows in id order (5 of 100 LoCoMo queries wrong before the fix).

`high` rows: their `fts` is empty by construction; the trigram predicate repeats
`sensitivity <> 'high'` (ciphertext must never match a gram, and the partial index needs it).

Filters (errata 8): `Filters.sql()` writes `m.user_id = ?`, which the planner uses as an index
condition on `memories_scope` (tenant, user); `IS NOT DISTINCT FROM ?` (other store queries)
reaches the server as `col IS NULL` or `col = ? AND col IS NOT NULL` by the value
(placeholders.py), an index condition too. Also `Filters.sql()`'s
`"0"` (an empty category allowlist) is an integer, not a boolean, on PostgreSQL: `1 = 0`.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memcli.store.filters import Filters

# FTS5's bm25() constants (sqlite/ext/fts5/fts5_aux.c), so the two engines rank alike.
BM25_K1 = 1.2
BM25_B = 0.75
IDF_FLOOR = 1e-6
AVGDL_SAMPLE = 200  # newest memories whose mean length stands for the corpus's
TEXT_CONFIG = "memcli"
# Above this many candidate rows the dense leg walks the HNSW index instead of scoring every
# row (an exact `<=>` over a few thousand vectors costs a few ms, as on SQLite).
EXACT_SCAN_MAX = 4000
EF_SEARCH = 100
PREFILTER_FACTOR = 2  # the HNSW walk shortlists this many times `limit` for the exact rerank


def tsquery_sql(count: int, config: str = TEXT_CONFIG) -> str:
    """An OR of `count` terms as one tsquery expression (one `?` per term). Each term goes
    through plainto_tsquery, so no user text is ever tsquery syntax (FTS5's quoting)."""
    return "(" + " || ".join([f"plainto_tsquery('{config}', ?)"] * count) + ")"


def lexical(db: Any, terms: list[str], filters: Filters, limit: int,
            context_weight: float = 0.5) -> list[tuple[int, float]]:
    """BM25 of the OR of `terms` over the turn (weight 1) and its context (`context_weight`):
    FTS5's bm25() formula, computed over the GIN's matches in the filters' scope."""
    if not terms:
        return []
    where, params = filters.sql()
    rows = db.execute(bm25_sql(len(terms), where),
                      [*terms, " ".join(terms), context_weight, *params, limit])
    return [(int(i), float(s)) for i, s in rows]


# A document's length in tokens: the positions of all its lexemes (FTS5 counts tokens too).
# The stored column `fts_tokens` holds it for `fts` (schema.sql's memcli_tokens).
_TOKENS = "(SELECT sum(coalesce(array_length(u.positions, 1), 1)) FROM unnest({fts}) u)"

# Corpus statistics, two ways. `kept` (the leg's): what the writers keep beside the rows
# (schema.sql: lexeme_df, lexical_stats, memories.fts_tokens), read by key. `counted` (for
# bench variants over other columns or configurations): df counted per lexeme through the
# GIN, the corpus size the highest id, the mean length that of the newest AVGDL_SAMPLE rows.
_KEPT = """lex AS (SELECT l AS lexeme, coalesce(d.df, 0) AS df
            FROM unnest(tsvector_to_array(to_tsvector('{config}', ?))) AS l
            LEFT JOIN lexeme_df d ON d.lexeme = l),
    corpus AS (SELECT docs::float8 AS n,
                      greatest(tokens::float8 / greatest(docs, 1), 1)::float8 AS avgdl
               FROM lexical_stats)"""
_COUNTED = """lex AS (SELECT l AS lexeme,
                   (SELECT count(*) FROM memories d
                    WHERE d.{column} @@ quote_literal(l)::tsquery) AS df
            FROM unnest(tsvector_to_array(to_tsvector('{config}', ?))) AS l),
    corpus AS (SELECT (SELECT coalesce(max(id), 0) FROM memories)::float8 AS n,
                      greatest(avg({length}), 1)::float8 AS avgdl
               FROM (SELECT {column} FROM memories ORDER BY id DESC LIMIT {sample}) r)"""


# A match's tsvector cut down to the query's lexemes (`ql.a`), in C: the lexemes that are not
# the query's are those left after deleting the query's, and deleting them leaves the query's
# with their positions and weights. Unnesting the whole tsvector (~50 lexemes a chat turn) and
# joining every lexeme to the query's took two thirds of a tenant-wide leg (250k memories,
# 20k matches: 224 -> 120 ms; bench/results/pg-tenant-profile-*.md). The lengths and counts are
# cast to float8 before the arithmetic (an integer times a decimal constant is `numeric`, done
# in software per row): the same values, the leg ~5 % faster.
# A lexeme's idf from the CTEs `lex` (its df) and `corpus` (n), FTS5's formula with its floor:
# the leg's and lexical.py's bounds are the same expression.
IDF = f"greatest(ln((corpus.n - lex.df + 0.5) / (lex.df::float8 + 0.5)), {IDF_FLOOR})"
_QUERY_LEXEMES = "ts_delete({fts}, tsvector_to_array(ts_delete({fts}, ql.a)))"


# The OR of the lexemes of a text array parameter as a tsquery, each lexeme quoted so that
# tsquery input reads it verbatim (a quote doubled, a backslash escaped; quote_literal would
# write E'...' around a backslash, which tsquery input does not read).
LEXEMES_OR = ("(SELECT string_agg('''' || replace(replace(l, '\\', '\\\\'), '''', '''''')"
              " || '''', ' | ')::tsquery FROM unnest(?::text[]) l)")


def bm25_sql(count: int, where: str, config: str = TEXT_CONFIG, column: str = "fts",
             doc_length: str = "tokens", essential: bool = False,
             exclude: bool = False) -> str:
    """The BM25 statement; parameters: the terms, the terms joined by spaces, the context
    weight, (`essential`: the lexemes whose matches are scored, a text array; `exclude`: the
    lexemes whose matches are not, a text array), the filters' parameters, the limit.

    `essential`: only the matches holding one of the given lexemes are scored (the index
    answers their OR; each is still checked against the OR of the terms, after the index, and
    scored on all the query's lexemes), and with `exclude` only those holding none of the
    excluded lexemes: lexical.py's pruned statements.

    Corpus statistics as FTS5 keeps them: on the leg's own column (`fts`, the `memcli`
    configuration, lengths in tokens) the writers' df table, memory count and token total,
    and each memory's stored length (`fts_tokens`): a few key lookups, no scan. Any other
    column, configuration or `doc_length` ("lexemes": `length(fts)`, distinct lexemes) has no
    kept statistics: they are counted per query (see _COUNTED), for the variants measured in
    bench/results/pg-legs.md. The terms' tf still comes from each match's tsvector (the
    positions of the query's lexemes at weight A, plus `context_weight` times those at
    weight B)."""
    tsq = tsquery_sql(count, config)
    kept = column == "fts" and config == TEXT_CONFIG and doc_length == "tokens"
    if kept:
        stats = _KEPT.format(config=config)
        dl = "m.fts_tokens"
    else:
        length = (_TOKENS if doc_length == "tokens" else "length({fts})")
        stats = _COUNTED.format(config=config, column=column, sample=AVGDL_SAMPLE,
                                length=length.format(fts="r." + column))
        dl = length.format(fts="m." + column)
    # The pruned statement: the index answers the essential lexemes' OR (quoted lexemes: no
    # normalisation again); the OR of the terms is checked on each match's cut tsvector (the
    # query's lexemes with their positions answer it as the whole tsvector does), so the
    # common lexemes' postings are never read.
    essential_cte, match_from, match, tf_from, tf_where = "", "q", "q", "", ""
    if essential:
        essential_cte = f"e AS (SELECT {LEXEMES_OR} AS q),"
        match_from, match, tf_from, tf_where = "e", "e", "q, ", " WHERE c.fts @@ q.q"
    if essential and exclude:
        essential_cte += f"""
    x AS (SELECT {LEXEMES_OR} AS q),"""
        match_from = "e, x"
        where = f"NOT (m.{column} @@ x.q) AND {where}"
    return f"""
    WITH q AS (SELECT {tsq} AS q),
    {stats},
    ql AS (SELECT array_agg(lexeme) AS a FROM lex),
    cw AS (SELECT ?::float8 AS v),
    idf AS (SELECT lex.lexeme, {IDF} AS idf FROM lex, corpus),
{essential_cte}
    cand AS MATERIALIZED (SELECT m.id, {_QUERY_LEXEMES.format(fts="m." + column)} AS fts,
                                 {dl} AS dl
             FROM memories m, {match_from}, ql WHERE m.{column} @@ {match}.q AND {where}),
    tf AS (SELECT c.id, c.dl, u.lexeme,
                  cardinality(array_positions(u.weights, 'A'))
                  + cw.v * cardinality(array_positions(u.weights, 'B')) AS tf
           FROM cand c, cw, {tf_from}unnest(c.fts) u{tf_where})
    SELECT tf.id, sum(idf.idf * tf.tf * {BM25_K1 + 1}
                      / (tf.tf + {BM25_K1} * (1 - {BM25_B}
                                              + {BM25_B} * tf.dl::float8 / corpus.avgdl))) AS s
    FROM tf JOIN idf ON idf.lexeme = tf.lexeme, corpus
    GROUP BY tf.id ORDER BY s DESC, tf.id LIMIT ?"""


def recount_lexical(db: Any) -> None:
    """The kept statistics again from the rows (schema.sql's triggers keep them; this is
    their repair: rebuild and reset of the lexical index). Rows at df 0 are dropped."""
    db.execute("DELETE FROM lexeme_df")
    db.execute("INSERT INTO lexeme_df (lexeme, df) SELECT l, count(*)"
               " FROM memories m, unnest(tsvector_to_array(m.fts)) l GROUP BY l ORDER BY l")
    db.execute("INSERT INTO lexical_stats (one, docs, tokens)"
               " SELECT true, count(*), coalesce(sum(fts_tokens), 0) FROM memories"
               " ON CONFLICT (one) DO UPDATE SET docs = excluded.docs, tokens = excluded.tokens")


def like_pattern(gram: str) -> str:
    r"""`%gram%` with LIKE's own characters escaped (`\` is ILIKE's default escape)."""
    escaped = gram.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def trigram(db: Any, grams: list[str], filters: Filters, limit: int) -> list[tuple[int, float]]:
    """Memories containing any of `grams` (CJK substrings; 3 characters use the trigram GIN,
    shorter ones still match), by distinct grams found, then by how much of the text their
    occurrences cover (in [0, 1))."""
    if not grams:
        return []
    where, params = filters.sql()
    patterns = [like_pattern(g) for g in grams]
    any_gram = " OR ".join(["m.content ILIKE ?"] * len(grams))
    found = " + ".join(["(m.content ILIKE ?)::int"] * len(grams))
    # Coverage: characters of the text the grams' occurrences cover, over its length (a short
    # text that is mostly the query outranks a long one that mentions it, as BM25's length
    # normalisation does in FTS5); lower() on both sides, as ILIKE.
    covered = " + ".join(
        ["(length(m.content) - length(replace(lower(m.content), lower(?), '')))"] * len(grams))
    coverage = f"(({covered})::float8 / greatest(length(m.content), 1))"
    rows = db.execute(
        f"SELECT m.id, ({found}) + {coverage} / (1 + {coverage}) AS s FROM memories m"
        f" WHERE m.sensitivity <> 'high' AND ({any_gram}) AND {where}"
        f" ORDER BY s DESC, m.id LIMIT ?",
        [*patterns, *grams, *grams, *patterns, *params, limit],
    )
    return [(int(i), float(s)) for i, s in rows]


def vector_literal(blob: bytes) -> str:
    """pgvector's text form of a float32 little-endian blob (SQLite's storage format). Python's
    repr of each float32 (as a double) parses back to the same float32."""
    values = struct.unpack(f"<{len(blob) // 4}f", blob)
    return "[" + ",".join(repr(v) for v in values) + "]"


def knn_sql(where: str, filters: Filters, dim: int, *, bits: bool = False
            ) -> tuple[str, list, list]:
    """The large-scope dense statement and its parameters before the vector ones: a KNN walk of
    an HNSW index over `memory_vectors`, within the filters' tenant (and user) through the
    table's own denormalised columns (pgvector's iterative scan keeps walking until enough
    rows pass them, as vec0's partition key does on SQLite), shortlisting `PREFILTER_FACTOR *
    limit` rows; then the whole filters and an exact `<=>` rerank.
    Returns the SQL, the inner filters' parameters and the outer ones; the statement's
    parameters are: inner, vector, shortlist size, vector, outer, limit.
    `bits`: walk the binary-quantized index (Hamming) instead of the float one."""
    inner, params = [], []
    for column in ("tenant_id", "user_id"):
        value = getattr(filters, column)
        if value is not None:
            inner.append(f"v.{column} = ?")
            params.append(value)
    order = (f"binary_quantize(v.embedding)::bit({dim}) <~> binary_quantize(?::vector)::bit({dim})"
             if bits else "v.embedding <=> ?::vector")
    _, where_params = filters.sql()
    sql_text = f"""WITH short AS MATERIALIZED (
            SELECT v.memory_id, v.embedding FROM memory_vectors v
            WHERE {" AND ".join(inner) or "true"} ORDER BY {order} LIMIT ?)
        SELECT m.id, 1.0 - (short.embedding <=> ?::vector) AS s
        FROM short JOIN memories m ON m.id = short.memory_id WHERE {where}
        ORDER BY s DESC, m.id LIMIT ?"""
    return sql_text, params, where_params


def dense(db: Any, vector: bytes, filters: Filters, limit: int,
          scope_rows: int | None = None) -> list[tuple[int, float]]:
    """Cosine similarity (1 - distance), exact on small scopes; on large ones a KNN walk of the
    HNSW index (`knn_sql`) reranked exactly. `scope_rows`: an upper bound of the memories
    passing the filters, if the caller has one (small enough means no count here)."""
    where, params = filters.sql()
    literal = vector_literal(vector)
    if scope_rows is None or scope_rows > EXACT_SCAN_MAX:
        scope_rows = int(db.scalar(
            f"SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {where} LIMIT ?) s",
            [*params, EXACT_SCAN_MAX + 1]))
    if scope_rows > EXACT_SCAN_MAX:
        # Session settings (not LOCAL: a pooled connection in autocommit has no transaction to
        # hold them); only this leg walks the HNSW index.
        db.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false),"
                   " set_config('hnsw.ef_search', ?, false)", [str(EF_SEARCH)])
        sql_text, knn_params, where_params = knn_sql(where, filters, len(vector) // 4)
        # The statement's order: inner filters, vector, shortlist size, vector, outer filters.
        rows = db.execute(sql_text, [*knn_params, literal, PREFILTER_FACTOR * limit, literal,
                                     *where_params, limit])
    else:
        rows = db.execute(
            f"SELECT m.id, 1.0 - (v.embedding <=> ?::vector) AS s FROM memories m"
            f" JOIN memory_vectors v ON v.memory_id = m.id WHERE {where}"
            f" ORDER BY s DESC, m.id LIMIT ?",
            [literal, *params, limit])
    return [(int(i), float(s)) for i, s in rows]


def best_in_scope(db: Any, ctes: str, scored: str, params: list, filters: Filters,
                  limit: int, small_scope: bool, ties: str = "ASC") -> list[tuple[int, float]]:
    """memcli/store/search_sql.py `best_in_scope` for PostgreSQL: the same two plans, same result.

    The large-scope plan differs: SQLite's `CROSS JOIN` keeps the sorted scores as the outer
    loop, so rows leave the join in score order and the LIMIT stops the walk early. PostgreSQL
    has no such hint (`CROSS JOIN ... ON` is a syntax error) and its planner may join in any
    order: with a plain JOIN the rows came out in memory id order and the LIMIT kept the
    lowest ids, not the best scores (measured on LoCoMo: 5 of 100 sparse queries wrong). Here
    the order is an explicit ORDER BY, and `walk_best` fences the subqueries so that the walk
    over the sorted scores is the plan (as SQLite's join order makes it there)."""
    where, filter_params = filters.sql()
    if small_scope:
        body = scored.format(in_scope=f"id IN (SELECT m.id FROM memories m WHERE {where})")
        sql_text = f"WITH {ctes} {body} ORDER BY score DESC, id {ties} LIMIT ?"
    else:
        sql_text = f"""WITH {ctes}, scored AS MATERIALIZED ({scored.format(in_scope="true")})
            {walk_best("true", where, ties)}"""
    rows = db.execute(sql_text, [*params, *filter_params, limit])
    return [(int(i), float(sc)) for i, sc in rows]


def walk_best(keep: str, where: str, ties: str = "ASC") -> str:
    """The end of a large-scope plan: the rows of the CTE `scored` (id, score) that pass `keep`,
    best first, each checked against the filters (`where` on `memories m`) until `limit` (the
    last parameter) pass. Both subqueries are fenced (OFFSET 0) so that the planner keeps this
    shape, a nested loop over the sorted scores, one primary key lookup per row, stopped by the
    LIMIT: left to itself it joined every scored row (a hash join over the tenant's memories,
    or a lookup per row) before sorting. Measured on 250k memories in 8 tenants
    (bench/results/pg-tenant-1m.md), tenant-wide: the sparse leg 13 -> 7 ms p50, the entity leg
    49 -> 5 ms (its plan had read every memory of the tenant to keep a few dozen)."""
    return f"""SELECT best.id, best.score
            FROM (SELECT id, score FROM scored WHERE {keep}
                  ORDER BY score DESC, id {ties} OFFSET 0) best,
                 LATERAL (SELECT 1 FROM memories m WHERE m.id = best.id AND {where}
                          OFFSET 0) passes
            ORDER BY best.score DESC, best.id {ties} LIMIT ?"""
