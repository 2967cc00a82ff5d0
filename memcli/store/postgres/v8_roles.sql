-- Schema 8: one role vocabulary (memcli/core/roles.py). Imports, the agent hooks and MCP stored
-- the chat spelling (user, assistant), the CLI and HTTP the PRD's (human, agent), so a `role`
-- filter missed one or the other; the rows take the PRD's words, as SQLite's migration 8 does.
-- Events are append-only: their guard is switched off for this one statement, inside the
-- migration's transaction (its advisory lock held), and on again before it commits.
ALTER TABLE events DISABLE TRIGGER events_append_only;
UPDATE events SET actor_type = CASE actor_type WHEN 'user' THEN 'human' ELSE 'agent' END
    WHERE actor_type IN ('user', 'assistant');
ALTER TABLE events ENABLE TRIGGER events_append_only;
UPDATE memories SET actor_type = CASE actor_type WHEN 'user' THEN 'human' ELSE 'agent' END
    WHERE actor_type IN ('user', 'assistant');
