"""The retrieval legs. Every leg applies the same Filters inside its own query.

The entity leg and the plans it shares with the sparse leg (`best_in_scope`) are portable SQL;
the lexical, trigram and dense legs are the engine's (`db.backend`, memcli.store.backend),
and so is the large-scope plan of `best_in_scope` (an ordered join on SQLite, an explicit
ORDER BY on PostgreSQL, whose planner keeps no join order)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcli.store.batching import marks
from memcli.store.filters import Filters

if TYPE_CHECKING:
    from memcli.store.backend import LexicalQuery
    from memcli.store.connection import Database

# run_legs counts the memories passing the filters up to this cap, once per query. Up to
# SMALL_SCOPE of them, the entity and sparse legs score only in-scope rows; above it, they
# score everything and walk it best first (see `entity` and memcli.store.sparse.search).
SMALL_SCOPE = 8000
SCOPE_COUNT_CAP = SMALL_SCOPE


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


def lexical(db: Database, query: LexicalQuery, filters: Filters, limit: int,
            context_weight: float = 0.5) -> list[tuple[int, float]]:
    """Full text over the turn (weight 1) and its context column; higher score is better."""
    if not query.terms:
        return []
    return db.backend.lexical(db, query, filters, limit, context_weight)


def trigram(db: Database, query: LexicalQuery, filters: Filters,
            limit: int) -> list[tuple[int, float]]:
    """Substring matches of the query's CJK 3-grams."""
    if not query.grams:
        return []
    return db.backend.trigram(db, query, filters, limit)


def best_in_scope(db: Database, ctes: str, scored: str, params: list, filters: Filters,
                  limit: int, small_scope: bool, ties: str = "ASC") -> list[tuple[int, float]]:
    """The `limit` best (id, score) rows of an aggregate that pass the filters (the entity and
    sparse legs), by the engine's plans (`Backend.best_in_scope`): SQLite's are
    `joined_best_in_scope`, PostgreSQL's memcli.store.postgres.legs.best_in_scope."""
    return db.backend.best_in_scope(db, ctes, scored, params, filters, limit, small_scope, ties)


def joined_best_in_scope(db: Database, ctes: str, scored: str, params: list,
                         filters: Filters, limit: int, small_scope: bool,
                         ties: str = "ASC") -> list[tuple[int, float]]:
    """`best_in_scope` by one of two plans with the same result (tests check they agree):

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
    in_list = marks(keys)
    join = db.dialect.ORDERED_JOIN
    ctes = f"""hit AS (
                SELECT DISTINCT e.id AS eid FROM entities e WHERE e.norm IN ({in_list})
                UNION SELECT entity_id FROM entity_aliases WHERE alias IN ({in_list})),
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
    """Cosine similarity (1 - distance) to a float32 vector. `scope_rows`: an upper bound of
    the memories passing the filters, if the caller has one (picks exact scan vs index)."""
    if not db.vec_enabled:
        return []
    return db.backend.dense(db, query_blob, filters, limit, scope_rows)


def session_neighbours(db: Database, ids: list[int], filters: Filters
                       ) -> dict[int, tuple[int | None, int | None]]:
    """For each memory, the previous and next memory of its session that pass the filters."""
    if not ids:
        return {}
    where_p, params_p = filters.sql("p")
    order = "(p.event_seq, p.chunk_index) {op} (m.event_seq, m.chunk_index)"
    rows = db.execute(
        f"""SELECT m.id,
              (SELECT p.id FROM memories p WHERE p.session_id = m.session_id
                 AND p.tenant_id = m.tenant_id AND {order.format(op='<')} AND {where_p}
                 ORDER BY p.event_seq DESC, p.chunk_index DESC LIMIT 1),
              (SELECT p.id FROM memories p WHERE p.session_id = m.session_id
                 AND p.tenant_id = m.tenant_id AND {order.format(op='>')} AND {where_p}
                 ORDER BY p.event_seq, p.chunk_index LIMIT 1)
            FROM memories m WHERE m.id IN ({marks(ids)}) AND m.session_id IS NOT NULL""",
        [*params_p, *params_p, *ids],
    )
    return {int(mid): (prev, nxt) for mid, prev, nxt in rows}


def recent(db: Database, filters: Filters, limit: int) -> list[int]:
    """The newest memories passing the filters (by event time), for the recency fallback."""
    where, params = filters.sql()
    rows = db.execute(
        f"SELECT m.id FROM memories m WHERE {where} ORDER BY m.event_time DESC, m.id DESC"
        f" LIMIT ?", [*params, limit])
    return [int(i) for (i,) in rows]
