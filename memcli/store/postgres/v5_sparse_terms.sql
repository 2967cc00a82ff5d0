-- Schema 5 on PostgreSQL: a GIN index over each stored SPLADE vector's term ids, so that a big
-- scope's sparse leg scores only the memories sharing a term with the query (the only ones
-- that can score above 0) instead of every vector in the scope. Applied by
-- memcli/store/postgres/migrations.py in one transaction, as the owner.
-- Design: docs/design/postgresql.md, "The sparse leg's term index".

-- A sparsevec's term ids (0-based) as an array, what memcli_sparse_term_ids (v4) returns as
-- rows: GIN's array_ops index an integer[] and `&&` (overlap) asks for any of the query's
-- terms. An expression index, not a stored column: nothing more in the heap, and no write
-- path to keep two copies of the terms equal. Every name is qualified: since PostgreSQL 17,
-- ANALYZE, VACUUM and REINDEX evaluate index expressions with search_path = pg_catalog.
-- Default COST: at COST 5000 (it prints and parses ~100 terms, ~12 us a row) the planner
-- chose worse plans for queries with many candidates at 100k memories (bench/results/
-- pg-sparse-gin.md: tenant-wide p95 110 -> 510 ms).
CREATE FUNCTION memcli_sparse_term_array(v sparsevec) RETURNS integer[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    AS $$ SELECT pg_catalog.array_agg(pg_catalog.split_part(e, ':', 1)::integer - 1)
          FROM pg_catalog.unnest(pg_catalog.string_to_array(
              pg_catalog.substr(pg_catalog.split_part(v::text, '}', 1), 2), ',')) e $$;

CREATE INDEX memory_sparse_terms ON memory_sparse
    USING gin (memcli_sparse_term_array(vec));
ANALYZE memory_sparse;
