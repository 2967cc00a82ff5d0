"""`open_database`, the one opener every command and library caller uses (what a location is:
memcli/core/locations.py): a file path opens SQLite, a `postgresql://` / `postgres://` URL or a
libpq keyword connection string (`host=... dbname=...`) opens PostgreSQL.

Any other URL (`file:`, `http://`, `mysql://` ...) is refused, never taken as a path:
`scheme://host/db` given as a path would make a folder `scheme:` and a SQLite file inside it,
and every later command would "work" against that file. Checked where the location is resolved
(memcli.config.load_settings, for --db, MEMCLI_DB and the config file) and again where it is
opened (open_database, Database), for library callers. Locations travel as `str`
(`Settings.db`, `--db`, the daemon's and MCP's saved location): a Path would fold `//`, and a
folded PostgreSQL URL cannot be restored (`postgresql:/memory` was `postgresql://memory`, host
`memory`, or `postgresql:///memory`, the database on the local socket), so it is refused
rather than guessed.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from memcli.core.locations import is_postgres, refuse_url, server_location
from memcli.store.connection import BUSY_TIMEOUT

if TYPE_CHECKING:
    from memcli.store.connection import Database

def open_database(location: str | os.PathLike[str], *, readonly: bool = False,
                  must_exist: bool = False, busy_timeout: float = BUSY_TIMEOUT) -> Database:
    """The database at `location`, migrated and ready: a SQLite file for a path, a PostgreSQL
    database for a postgresql:// URL or a libpq connection string.

    `readonly`: a second connection for reading only. `must_exist`: a read command's open: no
    database there is an error, and nothing is created. `busy_timeout`: seconds a writer waits
    for the write lock before exit 75. Engines are imported here, lazily, so that a process
    pays only for the one it opens (psycopg costs 160-250 ms)."""
    location = os.fspath(location)
    refuse_url(location, "database")
    if is_postgres(location):
        from memcli.store.postgres import connect  # noqa: PLC0415 - each engine on first use

        return connect(server_location(location), readonly=readonly,
                       must_exist=must_exist, busy_timeout=busy_timeout)
    from memcli.store.sqlite.connection import Database  # noqa: PLC0415 - apsw, sqlite-vec

    return Database(location, readonly=readonly, must_exist=must_exist,
                    busy_timeout=busy_timeout)
