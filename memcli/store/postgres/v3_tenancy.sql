-- Schema 3 on PostgreSQL (the twin of SQLite's migration 3, plus what only PostgreSQL has):
-- 1. entities get a tenant (a tenant's names are its data; "alice" of two tenants is two rows);
-- 2. tenant-bound login roles: `tenant_roles(role, tenant_id)` and `memcli_tenant()`;
-- 3. row-level security on every table holding a tenant's data;
-- 4. what a bound role may do to the shared tables (statistics, sequences, meta).
-- Applied by memcli/store/postgres/migrations.py in one transaction, as the schema owner.
-- Design: docs/design/postgresql.md, "Tenant roles (row-level security)".

-- 1. Entities by tenant. An entity keeps its id for the tenant of its oldest linked memory;
-- each other tenant mentioning it gets a row of its own and its links move there. Aliases
-- cannot be told apart by tenant: each copy gets the entity's aliases.
ALTER TABLE entities ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
UPDATE entities e SET tenant_id = o.tenant_id
    FROM (SELECT DISTINCT ON (me.entity_id) me.entity_id, m.tenant_id
          FROM memory_entities me JOIN memories m ON m.id = me.memory_id
          ORDER BY me.entity_id, me.memory_id) o
    WHERE o.entity_id = e.id;
ALTER TABLE entities DROP CONSTRAINT entities_kind_norm_key;
ALTER TABLE entities ADD CONSTRAINT entities_tenant_id_kind_norm_key
    UNIQUE (tenant_id, kind, norm);
INSERT INTO entities (tenant_id, kind, norm, display, created_at)
    SELECT DISTINCT m.tenant_id, e.kind, e.norm, e.display, e.created_at
    FROM memory_entities me JOIN memories m ON m.id = me.memory_id
    JOIN entities e ON e.id = me.entity_id
    WHERE m.tenant_id <> e.tenant_id;
INSERT INTO entity_aliases (alias, entity_id)
    SELECT a.alias, c.id FROM entity_aliases a JOIN entities o ON o.id = a.entity_id
    JOIN entities c ON c.kind = o.kind AND c.norm = o.norm AND c.id <> o.id
    ON CONFLICT DO NOTHING;
UPDATE memory_entities me SET entity_id = c.id
    FROM memories m, entities o, entities c
    WHERE m.id = me.memory_id AND o.id = me.entity_id AND c.tenant_id = m.tenant_id
      AND c.kind = o.kind AND c.norm = o.norm AND c.id <> o.id;

-- 2. Tenant-bound login roles. A DBA binds a login role to one tenant (`memcli pg
-- grant-tenant ROLE TENANT`, memcli/store/postgres/tenants.py). memcli_tenant() is that
-- tenant for the session's login role (`session_user`: neither `SET ROLE` nor
-- `SET memcli.tenant` changes it), NULL for any other role. SECURITY DEFINER, so a tenant role
-- needs no right on tenant_roles; its search_path is pinned (a definer function must not
-- resolve names through the caller's path).
CREATE TABLE tenant_roles (
    role      text PRIMARY KEY,
    tenant_id text NOT NULL
);
DO $$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION memcli_tenant() RETURNS text LANGUAGE sql STABLE SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS 'SELECT tenant_id FROM %I.tenant_roles WHERE role = session_user'$f$,
        current_schema());
END $$;
REVOKE ALL ON tenant_roles FROM PUBLIC;

-- 3. Row-level security. ENABLE without FORCE: the table owner (the role that ran the
-- migrations: the daemon, an admin, `memcli` as it has always run) is not bound and pays
-- nothing; every other role sees and writes only the rows of memcli_tenant(), i.e. nothing
-- unless tenant_roles binds it (fail closed). A superuser or a BYPASSRLS role is not bound.
-- `(SELECT memcli_tenant())` is an InitPlan: evaluated once per statement, and the comparison
-- with tenant_id stays an index condition.
DO $$
DECLARE
    t text;
BEGIN
    -- Tables with a tenant_id column.
    FOREACH t IN ARRAY ARRAY['events', 'memories', 'memory_vectors', 'entities', 'sessions',
                             'history', 'request_metrics', 'decisions', 'tasks', 'checkpoints',
                             'session_consolidation', 'llm_usage', 'proposals',
                             'lifecycle_runs']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_rows ON %I'
                       ' USING (tenant_id = (SELECT memcli_tenant()))'
                       ' WITH CHECK (tenant_id = (SELECT memcli_tenant()))', t);
    END LOOP;
    -- Tables keyed by a memory: a row is the tenant's when its memory is (the subquery reads
    -- memories under memories' own policy).
    FOREACH t IN ARRAY ARRAY['memory_sparse', 'memory_entities']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_rows ON %I'
                       ' USING (EXISTS (SELECT 1 FROM memories m WHERE m.id = %I.memory_id))'
                       ' WITH CHECK (EXISTS (SELECT 1 FROM memories m'
                       ' WHERE m.id = %I.memory_id))', t, t, t);
    END LOOP;
    -- Threads and their change log and read marks: the key starts with the tenant
    -- (store/memories.thread_key: tenant/user/session).
    FOREACH t IN ARRAY ARRAY['threads', 'change_log', 'acb_seen']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_rows ON %I'
                       ' USING (split_part(thread_key, ''/'', 1) = (SELECT memcli_tenant()))'
                       ' WITH CHECK (split_part(thread_key, ''/'', 1) = (SELECT memcli_tenant()))',
                       t);
    END LOOP;
END $$;
ALTER TABLE artifacts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON artifacts
    USING (EXISTS (SELECT 1 FROM events e WHERE e.event_id = artifacts.event_id))
    WITH CHECK (EXISTS (SELECT 1 FROM events e WHERE e.event_id = artifacts.event_id));
ALTER TABLE entity_aliases ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON entity_aliases
    USING (EXISTS (SELECT 1 FROM entities e WHERE e.id = entity_aliases.entity_id))
    WITH CHECK (EXISTS (SELECT 1 FROM entities e WHERE e.id = entity_aliases.entity_id));
ALTER TABLE relations ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON relations
    USING (EXISTS (SELECT 1 FROM memories m WHERE m.id = relations.src_id))
    WITH CHECK (EXISTS (SELECT 1 FROM memories m WHERE m.id = relations.src_id)
                AND EXISTS (SELECT 1 FROM memories m WHERE m.id = relations.dst_id));

-- 4. Shared tables (no tenant in them). A bound role must not be able to change another
-- tenant's scores or the schema's bookkeeping through raw SQL; what it needs of each:
-- - lexeme_df, lexical_stats (BM25's corpus statistics): read only. Its writes keep them
--   through the statement triggers on memories, which run as the owner (below): a role's
--   memories count as they should, and a role cannot set a df or the mean length itself.
-- - sequences: USAGE (nextval) only, no UPDATE (setval): memcli_follow_identity moves them,
--   as the owner, and refuses a bound role's explicit id past the sequence (schema.sql).
-- - meta: read; insert only the first-use keys memcli writes when they are still missing
--   (models, sealing key id), update only decay's last run and the time of a purge that
--   awaits the owner's VACUUM, insert and delete only purge's transient guard row. schema_version, a model or the key id once set: the owner's.
-- - sparse_df, pair_checks, run_locks stay writable (tenants.py says why).
-- The grants themselves are tenants.py's (`memcli pg grant-tenant`).
DO $$
DECLARE
    f regprocedure;
BEGIN
    -- Every trigger function of memcli's: as its owner, with a pinned search_path (a definer
    -- function must not resolve names through the caller's path).
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.pronamespace = current_schema()::regnamespace
               AND p.prorettype = 'trigger'::regtype LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER'
                       ' SET search_path = pg_catalog, %I, pg_temp', f, current_schema());
    END LOOP;
END $$;
ALTER TABLE meta ENABLE ROW LEVEL SECURITY;
CREATE POLICY meta_read ON meta FOR SELECT USING (true);
CREATE POLICY meta_first_use ON meta FOR INSERT
    WITH CHECK (key IN ('embedder_model', 'embedder_dimension', 'sparse_model', 'sparse_vocab',
                        'enc_key_id', 'decay_last_run', 'purge_guard',
                        'purge_vacuum_pending'));
CREATE POLICY meta_last_runs ON meta FOR UPDATE
    USING (key IN ('decay_last_run', 'purge_vacuum_pending'))
    WITH CHECK (key IN ('decay_last_run', 'purge_vacuum_pending'));
CREATE POLICY meta_purge_guard ON meta FOR DELETE USING (key = 'purge_guard');
-- Not under a policy (no tenant text in them): sparse_df (document counts per SPLADE term id,
-- over all tenants), pair_checks (hashes and verdicts), run_locks (lock names and holders).
