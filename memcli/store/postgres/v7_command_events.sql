-- Schema 7 on PostgreSQL: events gain the kind `command`, the event memcli's own writes record
-- (remember, correct, decision add, task update, checkpoint save, forget ...) before deriving
-- their rows from it, so `memcli rebuild` derives them again (memcli/ledger/commands.py).
-- Applied by memcli/store/postgres/migrations.py in one transaction, as the owner. Widening a
-- CHECK reads every row once to validate it (ACCESS EXCLUSIVE meanwhile); no row changes.
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check
    CHECK (kind IN ('message', 'tool_call', 'tool_result', 'decision', 'task_update',
                    'artifact', 'command'));
