"""PostgreSQL's SPLADE storage: one pgvector `sparsevec` per memory (`memory_sparse.vec`).

memcli.store.sparse keeps what both engines share (scaling, frequent-term pruning); this
module stores and scores the vectors behind `Backend.write_sparse` and the other sparse
methods. SQLite keeps postings instead (memcli.store.sqlite.sparse).

Document frequencies (`sparse_df`): nothing here writes them on ingest, delete or reset. The
statement triggers on memory_sparse (v4_sparse_df.sql, SECURITY DEFINER) count each written,
replaced or deleted vector's terms, so a tenant-bound role's writes count while the role can
only read the table; a role able to write it could push a term's df past `max_df` and prune it
from every tenant's sparse leg. Only the owner's recount (rebuild, doctor --fix) writes it.

Why not the postings here (bench/results/pg-scale.md, 54k memories): a posting row costs
PostgreSQL ~24 bytes of tuple header plus its primary key entry, 659 MB against 45 MB for the
same weights as one sparsevec per memory, and the leg was 16x slower for one user.

Values: the stored weights are SQLite's integers, round(weight * SCALE), kept as they are in the
vector (float4 holds every integer below 2^24 exactly). The score is `inner_product(vec, query)
/ SCALE`: the postings' `sum(query weight * stored weight) / SCALE`, except that pgvector sums in
float4 (relative error ~1e-7 per term, against float8 in the postings). Identical vectors get
identical scores (the same products summed in the same term order), so equal scores are exact
ties, broken by id, where the postings' float8 sum could differ in its last bit by the order the
join fed the rows. Only memories sharing a term with the query score above 0 (weights > 0), as
only they had postings to join.

Plans: the filters on `memories` (its scope index), each passing memory's vector by primary
key, scored, sorted, cut at the limit, zeros dropped after the cut (they sort last). For a big
scope (`small_scope` false, the caller's estimate as on SQLite) the statement asks
`s.tenant_id = tenant AND memcli_sparse_term_array(vec) && query terms`, which the GIN index
`memory_sparse_tenant_terms` over (tenant_id, term ids) answers (schema 6, v6_sparse_tenant.sql;
schema 5's index had the term ids alone): only the tenant's memories holding a query term are
scored, the only ones that can score above 0, so the result is the same. A leg across all
tenants asks the terms alone (the same index). bench/results/pg-sparse-tenant.md, 100k memories in 8
tenants: the same top 10 on every query; tenant-wide p50 45 ms scanning, 35 ms with schema 5's
index, 10 ms with schema 6's. These are scored from `memory_sparse` alone and then checked
against the filters best first, until `limit` pass (legs.walk_best): at 250k memories a
tenant's query shares a term with 2-6k of its memories, and checking each one's row before
the sort took half the leg (13 -> 7 ms p50, bench/results/pg-tenant-1m.md). A small scope keeps
the plain plan: calling the function on its few rows costs more than it saves. Exact, unlike
pgvector's HNSW on sparsevec.

`tenant_id` is the memory's, set by a BEFORE trigger from `memories` on every insert (and on
an update naming the key or the tenant): nothing here writes it, and a tenant-bound role cannot
store another tenant's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from memcli.store.batching import chunks, marks
from memcli.store.postgres.legs import walk_best
from memcli.store.sparse import SCALE

if TYPE_CHECKING:
    from collections.abc import Mapping

    from memcli.store.filters import Filters
    from memcli.store.postgres.connection import PgDatabase

TABLES = ("memory_sparse",)
# The vectors' dimension: term ids are below 2^16 (SQLite packs them as uint16); schema.sql
# declares `sparsevec(65536)`, and an inner product needs equal dimensions.
DIM = 65536
BATCH_ROWS = 200  # memories per multi-row INSERT


def literal(weights: Mapping[int, float]) -> str:
    """pgvector's sparsevec text form (1-based indices) of {term id: weight}. Python's repr of
    a float parses back to the same value; integers are written as such."""
    body = ",".join(f"{t + 1}:{w!r}" for t, w in sorted(weights.items()))
    return f"{{{body}}}/{DIM}"


_INDEX = re.compile(r"(\d+):")


def term_ids(text: str) -> list[int]:
    """The term ids of a sparsevec's text form (0-based, ascending)."""
    return [int(i) - 1 for i in _INDEX.findall(text.split("}", 1)[0])]


def write(db: PgDatabase, docs: list[tuple[int, dict[int, int]]]) -> None:
    """Store each memory's scaled weights as its vector (replacing an earlier one), in memory
    id order (two writers lock rows in the same order)."""
    rows = sorted((memory_id, literal(vec)) for memory_id, vec in docs)
    for part in chunks(rows, BATCH_ROWS):
        db.execute("INSERT INTO memory_sparse (memory_id, vec) VALUES "
                   + ",".join(["(?, ?::sparsevec)"] * len(part))
                   + " ON CONFLICT (memory_id) DO UPDATE SET vec = excluded.vec",
                   [v for row in part for v in row])


def terms(db: PgDatabase, ids: list[int]) -> dict[int, list[int]]:
    """The term ids stored for these memories (those with a vector)."""
    found: dict[int, list[int]] = {}
    for part in chunks(ids, 1000):
        for memory_id, text in db.execute(
                f"SELECT memory_id, vec::text FROM memory_sparse"
                f" WHERE memory_id IN ({marks(part)})", part):
            found[int(memory_id)] = term_ids(text)
    return found


def delete(db: PgDatabase, ids: list[int]) -> None:
    """Delete these memories' vectors (the trigger takes their terms out of sparse_df)."""
    for part in chunks(sorted(ids), 1000):
        db.execute(f"DELETE FROM memory_sparse WHERE memory_id IN ({marks(part)})",
                   part)


def reset(db: PgDatabase) -> None:
    """Every vector goes, and with them (the trigger) every sparse_df row. A DELETE, not a
    TRUNCATE: TRUNCATE's exclusive lock would make concurrent queries wait."""
    db.execute("DELETE FROM memory_sparse")


def recount_df(db: PgDatabase) -> None:
    """sparse_df from every stored vector's terms (the owner's: rebuild, doctor --fix; the
    term ids come from memcli_sparse_term_ids, which the trigger uses too)."""
    db.execute("DELETE FROM sparse_df")
    db.execute("INSERT INTO sparse_df (term_id, df) SELECT t, count(*) FROM memory_sparse s,"
               " memcli_sparse_term_ids(s.vec::text) t GROUP BY t ORDER BY t")


def search(db: PgDatabase, query: dict[int, float], filters: Filters, limit: int,
           small_scope: bool = True) -> list[tuple[int, float]]:
    """The `limit` memories passing the filters with the highest dot product with `query`
    (already pruned), best first, ties by id; memories sharing no term are left out.
    `small_scope` false: only the tenant's memories holding a query term are candidates (the
    GIN index memory_sparse_tenant_terms), the same result as scoring every vector of the
    scope; they are scored from `memory_sparse` alone and checked against the filters best
    first until `limit` pass (each check a `memories` primary key lookup, as
    memcli.store.postgres.legs.best_in_scope walks)."""
    where, params = filters.sql()
    if small_scope:
        rows = db.execute(
            f"""SELECT id, score FROM (
                    SELECT m.id, inner_product(s.vec, q.v) / {SCALE}.0 AS score
                    FROM (SELECT ?::sparsevec AS v) q, memories m
                    JOIN memory_sparse s ON s.memory_id = m.id
                    WHERE {where} ORDER BY score DESC, m.id LIMIT ?) best
                WHERE score > 0 ORDER BY score DESC, id""",
            [literal(query), *params, limit])
        return [(int(i), float(sc)) for i, sc in rows]
    tenant, extra = "", []
    if filters.tenant_id is not None:  # (the index's first column; m's is the same)
        tenant, extra = "s.tenant_id = ? AND ", [filters.tenant_id]
    rows = db.execute(
        f"""WITH scored AS MATERIALIZED (
                SELECT s.memory_id AS id, inner_product(s.vec, ?::sparsevec) / {SCALE}.0 AS score
                FROM memory_sparse s
                WHERE {tenant}memcli_sparse_term_array(s.vec) && ?::integer[])
            {walk_best("scored.score > 0", where)}""",
        [literal(query), *extra, sorted(query), *params, limit])
    return [(int(i), float(sc)) for i, sc in rows]
