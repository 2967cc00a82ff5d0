"""The SQLite engine of the store: everything that differs from PostgreSQL's.

apsw connection and error mapping, FTS5 and vec0 (the retrieval legs and their index
maintenance), migrations by `PRAGMA user_version`, the row tracer that opens `high` values,
and the physical side (secure_delete, VACUUM, WAL checkpoints, integrity checks). The rest of
memcli.store is portable SQL and reaches this package through `db.backend` and `db.dialect`
(memcli.store.backend, memcli.store.dialect).
"""
