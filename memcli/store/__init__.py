"""SQLite storage: the connection, migrations and the SQL for each table group.

All SQL of memcli lives in this package, behind functions named for what they do.
"""
