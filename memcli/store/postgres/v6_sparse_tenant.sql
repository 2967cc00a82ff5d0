-- Schema 6 on PostgreSQL: each stored SPLADE vector carries its memory's tenant, and the sparse
-- leg's term index (schema 5's, over term ids) becomes one over (tenant, term ids), so a
-- tenant-wide leg finds only its own tenant's memories holding a query term; schema 5's index
-- found every tenant's, scored before the join to `memories` dropped the others (8 tenants:
-- ~8x the rows it needs).
-- Applied by memcli/store/postgres/migrations.py in one transaction, as the owner.
-- Design: docs/design/postgresql.md, "The sparse leg's term index".

-- The backfill rewrites every row once: schema 5's index goes first (no index work per row),
-- and the df trigger is off meanwhile (the vectors do not change; it would parse every old
-- and new vector only to find no count moved).
DROP INDEX IF EXISTS memory_sparse_terms;  -- (a dropped one awaited `memcli rebuild`)
ALTER TABLE memory_sparse ADD COLUMN tenant_id text;
ALTER TABLE memory_sparse DISABLE TRIGGER memory_sparse_df_update;
UPDATE memory_sparse s SET tenant_id = m.tenant_id FROM memories m WHERE m.id = s.memory_id;
ALTER TABLE memory_sparse ENABLE TRIGGER memory_sparse_df_update;
ALTER TABLE memory_sparse ALTER COLUMN tenant_id SET NOT NULL;

-- The tenant is always the memory's, whatever the writer gives: a BEFORE trigger sets it from
-- `memories` on every insert and on any update naming the key or the tenant (ingest's upsert
-- sets `vec` only, and the row keeps its tenant). As the owner, with a pinned search_path (as
-- every trigger function of memcli's, v3_tenancy.sql part 4): it reads the memory whatever the
-- writer may see, and the row-level policy (the memory must be the writer's tenant's) then
-- refuses a bound role's row for another tenant's memory. A memory id with no memory leaves
-- the tenant NULL, refused as the missing key was (an integrity error either way).
CREATE FUNCTION memcli_sparse_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.tenant_id := (SELECT m.tenant_id FROM memories m WHERE m.id = NEW.memory_id);
    RETURN NEW;
END $$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION memcli_sparse_tenant() SECURITY DEFINER'
                   ' SET search_path = pg_catalog, %I, pg_temp', current_schema());
END $$;
CREATE TRIGGER memory_sparse_tenant BEFORE INSERT OR UPDATE OF memory_id, tenant_id
    ON memory_sparse FOR EACH ROW EXECUTE FUNCTION memcli_sparse_tenant();

-- btree_gin (schema.sql creates it, for memories_fts) gives `text` a GIN opclass: one index
-- over both columns, whose scan intersects the tenant's posting list with the query terms'.
-- A leg across all tenants asks the terms alone, which the same index answers.
CREATE INDEX memory_sparse_tenant_terms ON memory_sparse
    USING gin (tenant_id, memcli_sparse_term_array(vec));
ANALYZE memory_sparse;
