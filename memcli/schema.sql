-- memcli schema: the whole database in one readable file.
--
-- Ground truth is `events` (append-only). Everything else is derived from it and can be
-- rebuilt: memories, their full-text and vector indexes, entities, relations and history.
-- The vector table `vec_memories` is created on open because its dimension comes from the
-- embedder (see memcli/store/connection.py); `meta` records which model made the vectors.
--
-- Schema versions live in PRAGMA user_version; memcli/store/migrations.py upgrades older files.

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- Ground truth: one row per recorded event, never updated, deleted only by `purge`.
CREATE TABLE IF NOT EXISTS events (
    seq          INTEGER PRIMARY KEY,            -- insertion order, stable
    event_id     TEXT NOT NULL UNIQUE,
    ts           TEXT NOT NULL,                  -- when it happened (ISO 8601, UTC)
    recorded_at  TEXT NOT NULL,                  -- when memcli stored it
    tenant_id    TEXT NOT NULL DEFAULT 'default',
    user_id      TEXT,
    agent_id     TEXT,
    session_id   TEXT,
    app_id       TEXT,
    run_id       TEXT,
    channel      TEXT NOT NULL DEFAULT 'private'
                 CHECK (channel IN ('private', 'public', 'team', 'agent')),
    actor_type   TEXT NOT NULL DEFAULT 'human',
    actor_id     TEXT,
    kind         TEXT NOT NULL DEFAULT 'message'
                 CHECK (kind IN ('message', 'tool_call', 'tool_result', 'decision',
                                 'task_update', 'artifact', 'command')),
    sensitivity  TEXT NOT NULL DEFAULT 'none'
                 CHECK (sensitivity IN ('none', 'low', 'high', 'secret')),
    tags         TEXT NOT NULL DEFAULT '[]',     -- JSON array
    content      TEXT NOT NULL DEFAULT '{}',     -- JSON object, secrets already redacted
    refs         TEXT NOT NULL DEFAULT '[]',     -- JSON array
    content_hash TEXT NOT NULL,                  -- sha256 of scope + kind + actor + content (+ ts)
    redactions   TEXT NOT NULL DEFAULT '[]'      -- JSON: what the secret detector removed (kinds only)
);
CREATE INDEX IF NOT EXISTS events_scope ON events (tenant_id, user_id, session_id, ts);
CREATE INDEX IF NOT EXISTS events_session ON events (session_id, seq);
CREATE INDEX IF NOT EXISTS events_app ON events (app_id) WHERE app_id IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS events_content_hash ON events (content_hash);

-- Append-only: UPDATE is always refused, DELETE only while `purge` holds its guard row.
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
WHEN (SELECT value FROM meta WHERE key = 'purge_guard') IS NULL
BEGIN
    SELECT RAISE(ABORT, 'events are append-only (use memcli purge)');
END;

-- Full output of tool results whose excerpt was truncated in the event.
CREATE TABLE IF NOT EXISTS artifacts (
    artifact_id TEXT PRIMARY KEY,
    event_id    TEXT NOT NULL REFERENCES events (event_id) ON DELETE CASCADE,
    mime        TEXT NOT NULL DEFAULT 'text/plain',
    bytes       INTEGER NOT NULL,
    sha256      TEXT NOT NULL,
    body        BLOB NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS artifacts_event ON artifacts (event_id);

-- Derived memories: episodes cut from events, and facts, summaries, insights made from them.
CREATE TABLE IF NOT EXISTS memories (
    id            INTEGER PRIMARY KEY,
    kind          TEXT NOT NULL DEFAULT 'episode'
                  CHECK (kind IN ('episode', 'fact', 'summary', 'insight', 'reflection',
                                  'procedural', 'decision', 'task')),
    category      TEXT,
    content       TEXT NOT NULL,
    tenant_id     TEXT NOT NULL DEFAULT 'default',
    user_id       TEXT,
    agent_id      TEXT,
    session_id    TEXT,
    app_id        TEXT,
    run_id        TEXT,
    channel       TEXT NOT NULL DEFAULT 'private',
    sensitivity   TEXT NOT NULL DEFAULT 'none',
    actor_type    TEXT,
    actor_id      TEXT,
    event_id      TEXT,                          -- the event an episode was cut from
    event_seq     INTEGER,                       -- that event's order, for neighbouring turns
    chunk_index   INTEGER NOT NULL DEFAULT 0,
    token_count   INTEGER NOT NULL DEFAULT 0,
    importance    REAL NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    pinned        INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1)),
    confidence    REAL NOT NULL DEFAULT 1.0,
    decay_rate    REAL NOT NULL DEFAULT 0.01,
    access_count  INTEGER NOT NULL DEFAULT 0,
    last_accessed TEXT,
    event_time    TEXT NOT NULL,                 -- when the remembered thing happened
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    valid_from    TEXT,
    valid_to      TEXT,
    state         TEXT NOT NULL DEFAULT 'active'
                  CHECK (state IN ('active', 'soft_deleted', 'superseded')),
    purge_at      TEXT,
    source_ids    TEXT NOT NULL DEFAULT '[]',    -- JSON: event ids / memory ids it cites
    attributes    TEXT NOT NULL DEFAULT '{}'     -- JSON: tags, redactions, artifact refs ...
);
CREATE INDEX IF NOT EXISTS memories_scope ON memories (tenant_id, user_id, session_id, state);
CREATE INDEX IF NOT EXISTS memories_session_order ON memories (session_id, event_seq, chunk_index);
CREATE INDEX IF NOT EXISTS memories_event ON memories (event_id);
CREATE INDEX IF NOT EXISTS memories_app ON memories (app_id) WHERE app_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS memories_updated ON memories (updated_at);

-- Lexical indexes. Contentless (the text lives in `memories`) with contentless_delete so a
-- purge can remove a row by id. Columns: the turn itself and its context (the previous turn
-- of the same session), so a match on context still returns the turn; and `scope`, hashed
-- tenant/user/session tokens (see memcli/store/search.py) that a query ANDs into its MATCH so
-- BM25 only scores rows of the asker's scope (its weight in bm25() is 0).
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5 (
    content, context, scope,
    content = '',
    contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
-- Trigram index: substring recall and scripts without spaces (Chinese, Japanese).
CREATE VIRTUAL TABLE IF NOT EXISTS memories_trigram USING fts5 (
    content,
    content = '',
    contentless_delete = 1,
    tokenize = 'trigram remove_diacritics 1'
);

-- Float vectors for exact reranking (a plain BLOB copy: reading vectors back out of vec0 is slow).
CREATE TABLE IF NOT EXISTS memory_vectors (
    memory_id INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
    embedding BLOB NOT NULL                      -- float32, L2-normalised
);

-- Learned-sparse (SPLADE) index: an inverted table of (vocabulary term, memory, weight).
-- Weights are stored as integers (x100): SQLite keeps small integers in 1-2 bytes.
CREATE TABLE IF NOT EXISTS sparse_postings (
    term_id   INTEGER NOT NULL,
    memory_id INTEGER NOT NULL,
    weight    INTEGER NOT NULL,
    PRIMARY KEY (term_id, memory_id)
) WITHOUT ROWID;
-- Per memory, its term ids (packed uint16): what to delete from the postings on purge, without
-- a second index over millions of postings.
CREATE TABLE IF NOT EXISTS memory_sparse (
    memory_id INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
    terms     BLOB NOT NULL
);
-- Document frequency per term: query terms in too many memories are pruned (the long posting
-- lists of frequent terms are the whole cost of a sparse query at scale).
CREATE TABLE IF NOT EXISTS sparse_df (
    term_id INTEGER PRIMARY KEY,
    df      INTEGER NOT NULL
);

-- Entities found in memories, with aliases, linked through memory_entities. Each tenant has its
-- own (a tenant's names are its data; schema 3): "alice" of two tenants is two rows.
CREATE TABLE IF NOT EXISTS entities (
    id         INTEGER PRIMARY KEY,
    tenant_id  TEXT NOT NULL DEFAULT 'default',
    kind       TEXT NOT NULL,
    norm       TEXT NOT NULL,
    display    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (tenant_id, kind, norm)
);
CREATE INDEX IF NOT EXISTS entities_norm ON entities (norm);
CREATE TABLE IF NOT EXISTS entity_aliases (
    alias     TEXT NOT NULL,
    entity_id INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    PRIMARY KEY (alias, entity_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memory_entities (
    memory_id INTEGER NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    entity_id INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    PRIMARY KEY (memory_id, entity_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS memory_entities_entity ON memory_entities (entity_id, memory_id);

-- Typed edges between memories (related, supersedes, merged_into ...), one per pair and kind.
CREATE TABLE IF NOT EXISTS relations (
    src_id     INTEGER NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    dst_id     INTEGER NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    kind       TEXT NOT NULL DEFAULT 'related',
    strength   REAL NOT NULL DEFAULT 1.0,
    created_at TEXT NOT NULL,
    PRIMARY KEY (src_id, dst_id, kind)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS relations_dst ON relations (dst_id);

CREATE TABLE IF NOT EXISTS sessions (
    tenant_id        TEXT NOT NULL DEFAULT 'default',
    session_id       TEXT NOT NULL,
    user_id          TEXT,
    started_at       TEXT NOT NULL,
    last_event_at    TEXT NOT NULL,
    event_count      INTEGER NOT NULL DEFAULT 0,
    consolidated_at  TEXT,
    summary          TEXT,                       -- JSON structured summary, when consolidated
    PRIMARY KEY (tenant_id, session_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_user ON sessions (tenant_id, user_id, last_event_at);

-- Audit trail of every change to a memory, newest last.
CREATE TABLE IF NOT EXISTS history (
    id        INTEGER PRIMARY KEY,
    memory_id INTEGER,                           -- kept after purge (no foreign key on purpose)
    event_id  TEXT,
    op        TEXT NOT NULL CHECK (op IN ('ADD', 'UPDATE', 'DELETE', 'MERGE', 'LINK', 'TTL',
                                          'RESTORE', 'PURGE')),
    old_ref   TEXT,
    new_ref   TEXT,
    actor     TEXT NOT NULL DEFAULT 'memcli',
    tenant_id TEXT,
    user_id   TEXT,
    session_id TEXT,
    meta      TEXT NOT NULL DEFAULT '{}',
    ts        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS history_memory ON history (memory_id, id);
CREATE INDEX IF NOT EXISTS history_scope ON history (tenant_id, user_id, session_id, id);

-- Per-thread revision counter and what changed at each revision (for delta headers).
CREATE TABLE IF NOT EXISTS threads (
    thread_key TEXT PRIMARY KEY,                 -- tenant/user/session
    revision   INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS change_log (
    id         INTEGER PRIMARY KEY,
    thread_key TEXT NOT NULL,
    revision   INTEGER NOT NULL,
    op         TEXT NOT NULL,
    memory_id  INTEGER,
    summary    TEXT NOT NULL DEFAULT '',
    ts         TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS change_log_thread ON change_log (thread_key, revision);

-- One row per `query` / `acb build`, for `memcli stats --requests`.
CREATE TABLE IF NOT EXISTS request_metrics (
    id             INTEGER PRIMARY KEY,
    ts             TEXT NOT NULL,
    command        TEXT NOT NULL,                -- query | acb
    tenant_id      TEXT,
    user_id        TEXT,
    session_id     TEXT,
    lexical_hits   INTEGER NOT NULL DEFAULT 0,
    sparse_hits    INTEGER NOT NULL DEFAULT 0,
    vector_hits    INTEGER NOT NULL DEFAULT 0,
    entity_hits    INTEGER NOT NULL DEFAULT 0,
    retrieval_path TEXT NOT NULL DEFAULT '',     -- e.g. session, session>user, none
    fallbacks      INTEGER NOT NULL DEFAULT 0,   -- how many times the scope widened
    items          INTEGER NOT NULL DEFAULT 0,
    tokens_used    INTEGER NOT NULL DEFAULT 0,
    truncated      INTEGER NOT NULL DEFAULT 0,
    latency_ms     REAL NOT NULL DEFAULT 0,
    error_stage    TEXT
);
CREATE INDEX IF NOT EXISTS request_metrics_ts ON request_metrics (ts);

-- Context assembly (acb, decisions, tasks, checkpoints)
-- Decisions and tasks are ledger rows over a derived memory (kind decision / task) that carries
-- their text, scope, sensitivity and index entries: purging the memory removes the row.
CREATE TABLE IF NOT EXISTS decisions (
    id            INTEGER PRIMARY KEY,
    memory_id     INTEGER REFERENCES memories (id) ON DELETE CASCADE,
    tenant_id     TEXT NOT NULL DEFAULT 'default',
    user_id       TEXT,
    session_id    TEXT,
    agent_id      TEXT,
    app_id        TEXT,
    status        TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'superseded')),
    scope         TEXT NOT NULL DEFAULT 'project' CHECK (scope IN ('project', 'user', 'global')),
    decision      TEXT NOT NULL,
    rationale     TEXT NOT NULL DEFAULT '[]',    -- JSON arrays of strings
    constraints   TEXT NOT NULL DEFAULT '[]',
    alternatives  TEXT NOT NULL DEFAULT '[]',
    consequences  TEXT NOT NULL DEFAULT '[]',
    refs          TEXT NOT NULL DEFAULT '[]',    -- evidence: event ids, memory ids
    supersedes    INTEGER REFERENCES decisions (id) ON DELETE SET NULL,
    superseded_by INTEGER REFERENCES decisions (id) ON DELETE SET NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS decisions_scope ON decisions (tenant_id, status, user_id);
CREATE INDEX IF NOT EXISTS decisions_memory ON decisions (memory_id);
CREATE TABLE IF NOT EXISTS tasks (
    id          INTEGER PRIMARY KEY,
    memory_id   INTEGER REFERENCES memories (id) ON DELETE CASCADE,  -- the current version
    tenant_id   TEXT NOT NULL DEFAULT 'default',
    user_id     TEXT,
    session_id  TEXT,
    agent_id    TEXT,
    app_id      TEXT,
    status      TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'doing', 'done')),
    title       TEXT NOT NULL,
    details     TEXT NOT NULL DEFAULT '',
    refs        TEXT NOT NULL DEFAULT '[]',
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_scope ON tasks (tenant_id, status, user_id);
CREATE INDEX IF NOT EXISTS tasks_memory ON tasks (memory_id);
-- An agent's state blob per (user, thread), for resuming work; one row, overwritten on save.
CREATE TABLE IF NOT EXISTS checkpoints (
    tenant_id   TEXT NOT NULL DEFAULT 'default',
    user_id     TEXT NOT NULL,
    thread_id   TEXT NOT NULL,
    data        TEXT NOT NULL,                   -- JSON
    sensitivity TEXT NOT NULL DEFAULT 'none'
                CHECK (sensitivity IN ('none', 'low', 'high')),
    version     INTEGER NOT NULL DEFAULT 1,      -- saves so far
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, user_id, thread_id)
) WITHOUT ROWID;
-- The thread revision each caller (agent) last received in a bundle: the delta header's base.
CREATE TABLE IF NOT EXISTS acb_seen (
    caller     TEXT NOT NULL,
    thread_key TEXT NOT NULL,
    revision   INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (caller, thread_key)
) WITHOUT ROWID;

-- Lifecycle (consolidation, usage, proposals, locks)

-- How far each session has been consolidated: episodes with event_seq above last_seq are new.
-- Goes with its session when `purge` deletes the session row.
CREATE TABLE IF NOT EXISTS session_consolidation (
    tenant_id       TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    last_seq        INTEGER NOT NULL DEFAULT 0,
    method          TEXT CHECK (method IN ('llm', 'extractive')),
    consolidated_at TEXT,
    failures        INTEGER NOT NULL DEFAULT 0,  -- model failures since the last success
    last_error      TEXT,
    PRIMARY KEY (tenant_id, session_id),
    FOREIGN KEY (tenant_id, session_id) REFERENCES sessions (tenant_id, session_id)
        ON DELETE CASCADE
) WITHOUT ROWID;

-- One row per model reply (failed ones included): `memcli stats --usage`, daily token caps.
CREATE TABLE IF NOT EXISTS llm_usage (
    id         INTEGER PRIMARY KEY,
    ts         TEXT NOT NULL,
    day        TEXT NOT NULL,                    -- UTC date, YYYY-MM-DD
    tenant_id  TEXT NOT NULL DEFAULT 'default',
    command    TEXT NOT NULL,                    -- consolidate | reflect | insights
    task       TEXT NOT NULL,                    -- extract | same_fact | compact | reflect | insights
    model      TEXT NOT NULL,
    tokens_in  INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    cost_usd   REAL NOT NULL DEFAULT 0,
    latency_ms REAL NOT NULL DEFAULT 0,
    estimated  INTEGER NOT NULL DEFAULT 0 CHECK (estimated IN (0, 1))  -- chars/4, no server count
);
CREATE INDEX IF NOT EXISTS llm_usage_tenant_day ON llm_usage (tenant_id, day);

-- Same-fact checks already asked of the model: a pair is not asked again for 14 days.
CREATE TABLE IF NOT EXISTS pair_checks (
    fingerprint TEXT PRIMARY KEY,                -- sha256 of both normalised texts + rounded score
    verdict     TEXT NOT NULL CHECK (verdict IN ('same', 'contradicts', 'unrelated')),
    memory_id   INTEGER,                         -- the stored side of the pair
    score       REAL,
    checked_at  TEXT NOT NULL
) WITHOUT ROWID;

-- Changes to sensitive profile fields wait here for consent; pending ones expire after 7 days.
CREATE TABLE IF NOT EXISTS proposals (
    id            INTEGER PRIMARY KEY,
    tenant_id     TEXT NOT NULL DEFAULT 'default',
    user_id       TEXT,
    field         TEXT NOT NULL
                  CHECK (field IN ('preferred_name', 'pronouns', 'city', 'language')),
    value         TEXT NOT NULL,
    text          TEXT NOT NULL,                 -- the fact to write if accepted
    old_memory_id INTEGER,                       -- the profile fact it would replace
    old_text      TEXT,
    session_id    TEXT,
    source_ids    TEXT NOT NULL DEFAULT '[]',
    origin        TEXT NOT NULL DEFAULT 'consolidate',
    status        TEXT NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'accepted', 'rejected', 'expired')),
    created_at    TEXT NOT NULL,
    expires_at    TEXT NOT NULL,
    decided_at    TEXT,
    decided_by    TEXT,
    memory_id     INTEGER,                       -- the fact written on accept
    reason        TEXT
);
CREATE INDEX IF NOT EXISTS proposals_scope ON proposals (tenant_id, user_id, status);

-- Every consolidate / decay / reflect / insights run, for skip rules and the audit.
CREATE TABLE IF NOT EXISTS lifecycle_runs (
    id          INTEGER PRIMARY KEY,
    command     TEXT NOT NULL,
    tenant_id   TEXT,
    user_id     TEXT,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    status      TEXT NOT NULL DEFAULT 'running',  -- running | ok | skipped | failed | stopped
    report      TEXT NOT NULL DEFAULT '{}'        -- JSON counts (never memory text)
);
CREATE INDEX IF NOT EXISTS lifecycle_runs_scope
    ON lifecycle_runs (command, tenant_id, user_id, started_at);

-- One holder per lifecycle command, so two cron runs never overlap (a crashed holder's lock
-- expires, or is taken over when its pid is gone on the same host).
CREATE TABLE IF NOT EXISTS run_locks (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    host        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    acquired_at TEXT NOT NULL,
    expires_at  TEXT NOT NULL
) WITHOUT ROWID;
