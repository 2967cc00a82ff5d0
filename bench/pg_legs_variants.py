"""The leg variants bench/pg_legs.py compares on PostgreSQL.

Each variant is a function (db, query, filters, limit, settings) -> [(id, score)] best first,
ties by id, like memcli's legs. `query` is a `Query` (terms, CJK grams and runs, the dense vector
blob, the sparse vector). The chosen ones are memcli/store/postgres/legs.py's functions; the
others are written here only to be measured against them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memcli.retrieval import text as qtext
from memcli.store import sparse as sparse_sql
from memcli.store.postgres import legs

Leg = Callable[..., list[tuple[int, float]]]

# What the variants need beyond memcli's own schema (tests/support/pg_legs.apply_schema), added
# on top of it: the binary-quantized HNSW index (`bits`). (The sparsevec variant measured here
# first is memcli's own leg now: memory_sparse.vec.)
VARIANT_DDL = """
CREATE INDEX memory_vectors_bits ON memory_vectors
    USING hnsw ((binary_quantize(embedding)::bit({dim})) bit_hamming_ops);
"""


def apply_variants(conn: Any, dim: int) -> None:
    """VARIANT_DDL on a database that has memcli's schema (one transaction)."""
    with conn.transaction():
        conn.execute(VARIANT_DDL.replace("{dim}", str(int(dim))))


@dataclass
class Query:
    text: str
    terms: list[str]  # the lexical leg's terms (as memcli's lexical_query picks them)
    grams: list[str]  # CJK 3-grams (as lexical_query), plus whole runs shorter than 3
    vector: bytes  # float32 little-endian, as SQLite stores it
    sparse: dict[int, float]


def lexical_terms(text: str) -> list[str]:
    """The terms memcli's lexical leg ORs (`lexical_query`: stopwords dropped unless nothing
    else is left)."""
    return list(qtext.lexical_query(text).terms)


def cjk_grams(text: str) -> list[str]:
    """`lexical_query`'s grams, and CJK runs of 1-2 characters as they are (FTS5's trigram
    MATCH cannot search those; an ILIKE can, so the PostgreSQL leg is given them)."""
    grams = dict.fromkeys(qtext.lexical_query(text).grams)
    for run in qtext._CJK.findall(text):
        if len(run) < 3 and len(grams) < qtext.MAX_QUERY_TERMS:
            grams.setdefault(run, None)
    return list(grams)


# --------------------------------------------------------------------------- lexical

def ts_rank_leg(function: str, column: str = "fts", config: str = legs.TEXT_CONFIG) -> Leg:
    """ts_rank / ts_rank_cd with per-weight factors {D, C, B = context_weight, A = 1}."""

    def leg(db: Any, q: Query, filters: Any, limit: int, settings: Any) -> list:
        if not q.terms:
            return []
        where, params = filters.sql()
        tsq = legs.tsquery_sql(len(q.terms), config)
        rows = db.execute(
            f"WITH q AS (SELECT {tsq} AS q)"
            f" SELECT m.id, {function}(?::float4[], m.{column}, q.q) AS s FROM memories m, q"
            f" WHERE m.{column} @@ q.q AND {where} ORDER BY s DESC, m.id LIMIT ?",
            [*q.terms, [0.0, 0.0, settings.context_weight, 1.0], *params, limit])
        return [(int(i), float(s)) for i, s in rows]

    return leg


def bm25_sql_leg(db: Any, q: Query, filters: Any, limit: int, settings: Any) -> list:
    return legs.lexical(db, q.terms, filters, limit, settings.context_weight)


def bm25_variant(column: str = "fts", config: str = legs.TEXT_CONFIG,
                 doc_length: str = "tokens") -> Leg:
    """legs.py's BM25 statement on another column/configuration or length measure."""

    def leg(db: Any, q: Query, filters: Any, limit: int, settings: Any) -> list:
        if not q.terms:
            return []
        where, params = filters.sql()
        rows = db.execute(legs.bm25_sql(len(q.terms), where, config, column, doc_length),
                          [*q.terms, " ".join(q.terms), settings.context_weight, *params, limit])
        return [(int(i), float(s)) for i, s in rows]

    return leg


_TSV_ITEM = re.compile(r"'((?:[^']|'')*)'(?::([0-9A-D,]+))?")


def parse_tsvector(text: str) -> dict[str, tuple[int, int]]:
    """lexeme -> (positions of weight A, of weight B) from a tsvector's text form."""
    out = {}
    for lexeme, positions in _TSV_ITEM.findall(text):
        a = b = 0
        for p in (positions or "").split(","):
            if not p:
                continue
            if p.endswith("B"):
                b += 1
            elif p.endswith(("C", "D")):
                continue
            else:
                a += 1  # A is written explicitly; a bare position is D, which this schema never has
        out[lexeme.replace("''", "'")] = (a, b)
    return out


class PythonBm25:
    """BM25 in Python over every GIN match in scope: the same formula, df through the GIN,
    corpus size and mean length read once (as a writer-kept stats row would give them)."""

    def __init__(self) -> None:
        self.corpus: tuple[float, float] | None = None

    def __call__(self, db: Any, q: Query, filters: Any, limit: int, settings: Any) -> list:
        if not q.terms:
            return []
        if self.corpus is None:
            n, avgdl = db.execute(
                "SELECT count(*), avg((SELECT count(*) FROM unnest(fts) u, unnest(u.positions) p))"
                " FROM memories")[0]
            self.corpus = (float(n), float(avgdl))
        n, avgdl = self.corpus
        where, params = filters.sql()
        lex = db.execute(
            "SELECT l, (SELECT count(*) FROM memories d WHERE d.fts @@ quote_literal(l)::tsquery)"
            f" FROM unnest(tsvector_to_array(to_tsvector('{legs.TEXT_CONFIG}', ?))) AS l",
            [" ".join(q.terms)])
        idf = {lexeme: max(math.log((n - df + 0.5) / (df + 0.5)), legs.IDF_FLOOR)
               for lexeme, df in lex}
        tsq = legs.tsquery_sql(len(q.terms))
        rows = db.execute(
            f"WITH q AS (SELECT {tsq} AS q) SELECT m.id, m.fts::text FROM memories m, q"
            f" WHERE m.fts @@ q.q AND {where}", [*q.terms, *params])
        k1, b, cw = legs.BM25_K1, legs.BM25_B, settings.context_weight
        scored = []
        for mid, tsv in rows:
            parsed = parse_tsvector(tsv)
            dl = sum(a + bb for a, bb in parsed.values())
            s = 0.0
            for lexeme, w in idf.items():
                if lexeme in parsed:
                    a, bb = parsed[lexeme]
                    tf = a + cw * bb
                    s += w * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
            scored.append((int(mid), s))
        scored.sort(key=lambda r: (-r[1], r[0]))
        return scored[:limit]


# --------------------------------------------------------------------------- trigram

def trigram_chosen(db: Any, q: Query, filters: Any, limit: int, settings: Any) -> list:
    return legs.trigram(db, q.grams, filters, limit)


def trigram_similarity(function: str) -> Leg:
    """ILIKE filter (as the chosen leg), scored by pg_trgm's similarity of the CJK runs."""

    def leg(db: Any, q: Query, filters: Any, limit: int, settings: Any) -> list:
        if not q.grams:
            return []
        where, params = filters.sql()
        runs = " ".join(qtext._CJK.findall(q.text))
        any_gram = " OR ".join(["m.content ILIKE ?"] * len(q.grams))
        rows = db.execute(
            f"SELECT m.id, {function}(?, m.content) AS s FROM memories m"
            f" WHERE m.sensitivity <> 'high' AND ({any_gram}) AND {where}"
            f" ORDER BY s DESC, m.id LIMIT ?",
            [runs, *[legs.like_pattern(g) for g in q.grams], *params, limit])
        return [(int(i), float(s)) for i, s in rows]

    return leg


# --------------------------------------------------------------------------- dense

def dense_exact(db: Any, q: Query, filters: Any, limit: int, settings: Any) -> list:
    return legs.dense(db, q.vector, filters, limit, scope_rows=0)


def dense_knn(ef_search: int, iterative: bool, bits: bool = False) -> Leg:
    """legs.py's large-scope plan (`knn_sql`: an HNSW walk within the tenant, reranked
    exactly), forced on LoCoMo's small scopes: with `enable_sort` off the planner has no other
    way to order rows than the index (it would rightly sort a tenant's few hundred rows)."""

    def leg(db: Any, q: Query, filters: Any, limit: int, settings: Any) -> list:
        where, _ = filters.sql()
        literal = legs.vector_literal(q.vector)
        db.execute("SELECT set_config('hnsw.iterative_scan', ?, false),"
                   " set_config('hnsw.ef_search', ?, false),"
                   " set_config('enable_sort', 'off', false)",
                   ["relaxed_order" if iterative else "off", str(ef_search)])
        try:
            sql_text, inner, outer = legs.knn_sql(where, filters, len(q.vector) // 4, bits=bits)
            rows = db.execute(sql_text, [*inner, literal, legs.PREFILTER_FACTOR * limit,
                                         literal, *outer, limit])
        finally:
            db.execute("SELECT set_config('enable_sort', 'on', false)")
        return [(int(i), float(s)) for i, s in rows]

    return leg


# --------------------------------------------------------------------------- sparse

def max_df(db: Any, settings: Any) -> int:
    total = int(db.scalar("SELECT coalesce(max(id), 0) FROM memories"))
    return max(settings.sparse_max_df, int(settings.sparse_max_df_ratio * total))


def sparse_vectors(db: Any, q: Query, filters: Any, limit: int, settings: Any) -> list:
    """memcli's sparse leg on PostgreSQL (memcli/store/sparse.py over one sparsevec per
    memory; its frequent-term pruning as on SQLite)."""
    return sparse_sql.search(db, q.sparse, filters, limit, max_df(db, settings), small_scope=True)


def overlap(a: list[int], b: list[int], k: int) -> float | None:
    """|top-k(a) & top-k(b)| / max(len) of the two top-k lists (None when both are empty)."""
    sa, sb = set(a[:k]), set(b[:k])
    size = max(len(sa), len(sb))
    return len(sa & sb) / size if size else None
