"""Storage: all SQL of memcli, behind functions named for what they do.

Most modules here are portable SQL written against the `Database` surface
(memcli.store.connection). What differs between engines sits behind the store seam:
`db.backend` (memcli.store.backend: retrieval legs, index maintenance, schema, physical
operations) and `db.dialect` (memcli.store.dialect: SQL fragments). The SQLite engine lives in
memcli.store.sqlite; memcli.store.opener.open_database picks the engine for a location.
"""
