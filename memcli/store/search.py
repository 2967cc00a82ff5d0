"""SQL for each retrieval leg. Every leg applies the same Filters inside its own query."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from memcli.store.filters import Filters

if TYPE_CHECKING:
    from memcli.store.connection import Database

# Above this many candidate rows the dense leg uses the bit-quantized prefilter instead of an
# exact scan (an exact cosine over a few thousand float vectors costs a couple of ms).
EXACT_SCAN_MAX = 4000
# Within one user's vec0 partition the bit KNN is cheap (~2 ms), so it takes over sooner.
PARTITION_EXACT_MAX = 1000
PREFILTER_FACTOR = 2  # the bit KNN shortlists this many times `limit` for the exact rerank
# run_legs counts the memories passing the filters up to this cap, once per query. Up to
# SMALL_SCOPE of them, the entity and sparse legs score only in-scope rows; above it, they
# score everything and walk it best first (see `entity` and memcli.store.sparse.search).
SMALL_SCOPE = 8000
SCOPE_COUNT_CAP = SMALL_SCOPE


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


def estimate_scope(db: Database, filters: Filters, cap: int) -> int:
    """An upper bound of the memories passing the filters: `count_candidates` on their scope
    columns alone (tenant, user, session, state), which the `memories_scope` index answers
    without reading table rows. Enough to pick a query plan whose result does not depend on
    the choice."""
    scope_only = Filters(tenant_id=filters.tenant_id, user_id=filters.user_id,
                         session_id=filters.session_id, states=filters.states, sensitivities=())
    return count_candidates(db, scope_only, cap=cap)


def count_candidates(db: Database, filters: Filters, cap: int | None = None) -> int:
    """Memories passing the filters; with `cap`, counting stops there (all the caller needs)."""
    where, params = filters.sql()
    if cap is None:
        return int(db.scalar(f"SELECT count(*) FROM memories m WHERE {where}", params))
    return int(db.scalar(
        f"SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {where} LIMIT ?)",
        [*params, cap + 1]))


def lexical(db: Database, match: str, filters: Filters, limit: int,
            context_weight: float = 0.5) -> list[tuple[int, float]]:
    """BM25 over the turn (weight 1) and its context column; higher score is better."""
    where, params = filters.sql()
    rows = db.execute(
        f"SELECT m.id, -bm25(memories_fts, 1.0, ?, 0.0) AS s FROM memories_fts"
        f" JOIN memories m ON m.id = memories_fts.rowid"
        f" WHERE memories_fts MATCH ? AND {where} ORDER BY s DESC, m.id LIMIT ?",
        [context_weight, scoped_match(match, filters), *params, limit],
    )
    return [(int(i), float(s)) for i, s in rows]


def trigram(db: Database, match: str, filters: Filters, limit: int) -> list[tuple[int, float]]:
    where, params = filters.sql()
    rows = db.execute(
        f"SELECT m.id, -bm25(memories_trigram) AS s FROM memories_trigram"
        f" JOIN memories m ON m.id = memories_trigram.rowid"
        f" WHERE memories_trigram MATCH ? AND {where} ORDER BY s DESC, m.id LIMIT ?",
        [match, *params, limit],
    )
    return [(int(i), float(s)) for i, s in rows]


def best_in_scope(db: Database, ctes: str, scored: str, params: list, filters: Filters,
                  limit: int, small_scope: bool, ties: str = "ASC") -> list[tuple[int, float]]:
    """The `limit` best (id, score) rows of an aggregate that pass the filters, by one of two
    plans with the same result (tests check they agree):

    - `small_scope`: only rows of memories passing the filters are aggregated (cheap when few
      do): `scored` gets the condition through its `{in_scope}` placeholder.
    - otherwise everything is aggregated and sorted, and memories are checked best first until
      `limit` pass (cheap when many do): the CROSS JOIN keeps the sorted scores as the outer
      loop, so rows come out in score order and the LIMIT stops the walk early.

    `ctes`: WITH-clause definitions (their parameters are `params`); `scored`: a SELECT of
    `id` and `score` over them, grouped by id, with `WHERE {in_scope}`; `ties`: the id order
    among equal scores.
    """
    where, filter_params = filters.sql()
    join = db.dialect.ORDERED_JOIN
    if small_scope:
        body = scored.format(in_scope=f"id IN (SELECT m.id FROM memories m WHERE {where})")
        sql_text = f"WITH {ctes} {body} ORDER BY score DESC, id {ties} LIMIT ?"
    else:
        sql_text = f"""WITH {ctes}, scored AS MATERIALIZED (
                {scored.format(in_scope="1 = 1")} ORDER BY score DESC, id {ties})
            SELECT m.id, scored.score FROM scored {join} memories m ON m.id = scored.id
            WHERE {where} LIMIT ?"""
    rows = db.execute(sql_text, [*params, *filter_params, limit])
    return [(int(i), float(sc)) for i, sc in rows]


def entity(db: Database, keys: list[str], filters: Filters, limit: int,
           small_scope: bool = True) -> list[tuple[int, float]]:
    """Memories linked to entities the query names; rarer entities count more (idf-like).
    `small_scope` picks the plan (see `best_in_scope`)."""
    if not keys:
        return []
    marks = ",".join("?" * len(keys))
    join = db.dialect.ORDERED_JOIN
    ctes = f"""hit AS (
                SELECT DISTINCT e.id AS eid FROM entities e WHERE e.norm IN ({marks})
                UNION SELECT entity_id FROM entity_aliases WHERE alias IN ({marks})),
            df AS MATERIALIZED (
                SELECT me.entity_id AS eid, 1.0 / (1.0 + ln(count(*))) AS w
                FROM memory_entities me WHERE me.entity_id IN (SELECT eid FROM hit)
                GROUP BY me.entity_id),
            links AS (SELECT me.memory_id AS id, df.w AS w
                      FROM df {join} memory_entities me ON me.entity_id = df.eid)"""
    scored = "SELECT id, sum(w) AS score FROM links WHERE {in_scope} GROUP BY id"
    return best_in_scope(db, ctes, scored, [*keys, *keys], filters, limit, small_scope,
                         ties="DESC")


def dense(db: Database, query_blob: bytes, filters: Filters, limit: int,
          scope_rows: int | None = None) -> list[tuple[int, float]]:
    """Cosine similarity (1 - distance): an exact scan on small scopes; on large ones a KNN over
    the bit vectors (within the user's partition, or the tenant's rows) shortlists
    `PREFILTER_FACTOR * limit` memories for the exact rerank.

    `scope_rows`: an upper bound of the memories passing the filters, if the caller has one
    (small enough means an exact scan without counting again)."""
    from memcli.store.vectors import user_key

    where, params = filters.sql()
    if not db.vec_enabled:
        return []
    in_partition = filters.user_id is not None and filters.tenant_id is not None
    exact_max = PARTITION_EXACT_MAX if in_partition else EXACT_SCAN_MAX
    if scope_rows is None or scope_rows > exact_max:
        # `scope_rows` may be an upper bound (estimate_scope): the prefilter is only worth it,
        # and only safe for recall, when many memories really pass every filter.
        scope_rows = count_candidates(db, filters, cap=exact_max)
    if scope_rows > exact_max and db.scalar(
            "SELECT 1 FROM sqlite_schema WHERE name = 'vec_memories'"):
        knn = "embedding MATCH vec_quantize_binary(?) AND k = ?"
        knn_params: list = [query_blob, PREFILTER_FACTOR * limit]
        if in_partition:
            knn += " AND user_key = ?"
            knn_params.append(user_key(filters.tenant_id, filters.user_id))
        elif filters.tenant_id is not None:
            knn += " AND tenant_key = ?"
            knn_params.append(filters.tenant_id)
        rows = db.execute(
            f"""WITH short AS (SELECT memory_id FROM vec_memories WHERE {knn})
                SELECT m.id, 1.0 - vec_distance_cosine(v.embedding, ?) AS s
                FROM short JOIN memories m ON m.id = short.memory_id
                JOIN memory_vectors v ON v.memory_id = m.id
                WHERE {where} ORDER BY s DESC, m.id LIMIT ?""",
            [*knn_params, query_blob, *params, limit],
        )
    else:
        rows = db.execute(
            f"SELECT m.id, 1.0 - vec_distance_cosine(v.embedding, ?) AS s FROM memories m"
            f" JOIN memory_vectors v ON v.memory_id = m.id WHERE {where}"
            f" ORDER BY s DESC, m.id LIMIT ?",
            [query_blob, *params, limit],
        )
    return [(int(i), float(s)) for i, s in rows]


def session_neighbours(db: Database, ids: list[int], filters: Filters
                       ) -> dict[int, tuple[int | None, int | None]]:
    """For each memory, the previous and next memory of its session that pass the filters."""
    if not ids:
        return {}
    where_p, params_p = filters.sql("p")
    marks = ",".join("?" * len(ids))
    order = "(p.event_seq, p.chunk_index) {op} (m.event_seq, m.chunk_index)"
    rows = db.execute(
        f"""SELECT m.id,
              (SELECT p.id FROM memories p WHERE p.session_id = m.session_id
                 AND p.tenant_id = m.tenant_id AND {order.format(op='<')} AND {where_p}
                 ORDER BY p.event_seq DESC, p.chunk_index DESC LIMIT 1),
              (SELECT p.id FROM memories p WHERE p.session_id = m.session_id
                 AND p.tenant_id = m.tenant_id AND {order.format(op='>')} AND {where_p}
                 ORDER BY p.event_seq, p.chunk_index LIMIT 1)
            FROM memories m WHERE m.id IN ({marks}) AND m.session_id IS NOT NULL""",
        [*params_p, *params_p, *ids],
    )
    return {int(mid): (prev, nxt) for mid, prev, nxt in rows}
