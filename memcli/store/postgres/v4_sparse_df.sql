-- Schema 4 on PostgreSQL: `sparse_df` (memories holding each SPLADE term, over every tenant)
-- is kept by statement triggers on `memory_sparse`, as `lexeme_df` is by those on `memories`,
-- and a tenant-bound role may only read it. Until now the sparse write path added the counts
-- from Python (memcli/store/sparse.py), so a bound role needed write rights on the table and
-- could set any term's count: a df pushed past `max_df` prunes that term from every tenant's
-- sparse leg. Applied by memcli/store/postgres/migrations.py in one transaction, as the owner.
-- Design: docs/design/postgresql.md, "sparse_df kept by a trigger".

-- A sparsevec's term ids (0-based) from its text form `{i:w,...}/dim` (1-based indices): no
-- pgvector function lists a sparsevec's indices, and a cast to `vector` would make 65,536
-- floats per memory. string_to_array measured 6x faster than the recount's former
-- regexp_matches (20k vectors of 93 terms: 0.66 against 3.8 s). Not STRICT, so the planner
-- can inline it into the calling query.
CREATE FUNCTION memcli_sparse_term_ids(v text) RETURNS SETOF integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT pg_catalog.split_part(e, ':', 1)::integer - 1
          FROM pg_catalog.unnest(pg_catalog.string_to_array(
              pg_catalog.substr(pg_catalog.split_part(v, '}', 1), 2), ',')) e $$;

-- One upsert per statement of the terms' count changes, in term order (two writers lock the
-- same rows in the same order); a term no memory holds any more is deleted (a purged memory's
-- words leave no row behind). An UPDATE (ingest's ON CONFLICT replacing a memory's vector)
-- moves the counts from the old vector's terms to the new one's. TRUNCATE empties the counts.
CREATE FUNCTION memcli_sparse_df_upkeep() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    terms integer[];
    deltas integer[];
    gone integer[];
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM sparse_df;
        RETURN NULL;
    ELSIF TG_OP = 'INSERT' THEN
        SELECT array_agg(t ORDER BY t), array_agg(n ORDER BY t) INTO terms, deltas
        FROM (SELECT t, count(*)::integer AS n
              FROM new_rows r, memcli_sparse_term_ids(r.vec::text) t GROUP BY t) c;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(t ORDER BY t), array_agg(n ORDER BY t) INTO terms, deltas
        FROM (SELECT t, -count(*)::integer AS n
              FROM old_rows r, memcli_sparse_term_ids(r.vec::text) t GROUP BY t) c;
    ELSE
        SELECT array_agg(t ORDER BY t), array_agg(n ORDER BY t) INTO terms, deltas
        FROM (SELECT t, sum(d)::integer AS n FROM (
                  SELECT t, 1 AS d FROM new_rows r, memcli_sparse_term_ids(r.vec::text) t
                  UNION ALL
                  SELECT t, -1 FROM old_rows r, memcli_sparse_term_ids(r.vec::text) t) e
              GROUP BY t HAVING sum(d) <> 0) c;
    END IF;
    IF terms IS NOT NULL THEN
        WITH kept AS (
            INSERT INTO sparse_df (term_id, df)
                SELECT t, n FROM unnest(terms, deltas) AS c(t, n) ORDER BY t
                ON CONFLICT (term_id) DO UPDATE SET df = sparse_df.df + excluded.df
                RETURNING term_id, df)
        SELECT array_agg(term_id) INTO gone FROM kept WHERE df <= 0;
        IF gone IS NOT NULL THEN
            DELETE FROM sparse_df WHERE term_id = ANY (gone);
        END IF;
    END IF;
    RETURN NULL;
END $$;
-- As its owner, with a pinned search_path (v3_tenancy.sql part 4 did the same for every
-- trigger function then present): a bound role's writes count, and it has no write right of
-- its own on sparse_df.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION memcli_sparse_df_upkeep() SECURITY DEFINER'
                   ' SET search_path = pg_catalog, %I, pg_temp', current_schema());
END $$;
CREATE TRIGGER memory_sparse_df_insert AFTER INSERT ON memory_sparse
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memcli_sparse_df_upkeep();
CREATE TRIGGER memory_sparse_df_update AFTER UPDATE ON memory_sparse
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memcli_sparse_df_upkeep();
CREATE TRIGGER memory_sparse_df_delete AFTER DELETE ON memory_sparse
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memcli_sparse_df_upkeep();
CREATE TRIGGER memory_sparse_df_truncate AFTER TRUNCATE ON memory_sparse
    FOR EACH STATEMENT EXECUTE FUNCTION memcli_sparse_df_upkeep();

-- Existing counts were written by Python and by any role: count them again, exactly.
DELETE FROM sparse_df;
INSERT INTO sparse_df (term_id, df)
    SELECT t, count(*) FROM memory_sparse s, memcli_sparse_term_ids(s.vec::text) t
    GROUP BY t ORDER BY t;

-- Bound roles keep SELECT only (memcli pg grant-tenant gives new bindings the same:
-- tenants.py `_READ_ONLY`). A role dropped since its binding has no rights to take back.
DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT t.role FROM tenant_roles t JOIN pg_roles p ON p.rolname = t.role LOOP
        EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON sparse_df FROM %I', r);
    END LOOP;
END $$;
