"""Where a database lives, and `open_database`, the one opener every command and library
caller uses: a file path opens SQLite, a `postgresql://` / `postgres://` URL or a libpq keyword
connection string (`host=... dbname=...`) opens PostgreSQL.

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
import re
from pathlib import Path
from typing import TYPE_CHECKING

from memcli.errors import UsageError

if TYPE_CHECKING:
    from memcli.store.connection import Database

# How long a writer waits for the write lock before the command gives up with exit 75
# (`MEMCLI_BUSY_TIMEOUT`, seconds). Write transactions are short (models and embeddings run
# before the lock is taken), so a wait this long means something holds the lock abnormally.
BUSY_TIMEOUT = 30.0
# Read commands record access counts and metrics in passing: hints, dropped after this wait
# rather than holding up the answer behind a long write.
HINT_WAIT = 1.0

# `scheme:/` rather than `scheme://`: a --db value arrives as a Path, which folds `//` into `/`.
# Two letters at least, so a Windows drive (`C:/data`) stays a path. `file:` is SQLite's own URI
# form (memcli opens paths literally, so it would also become a folder named `file:`).
_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]+:/|file:)", re.IGNORECASE)
_POSTGRES = re.compile(r"^postgres(?:ql)?:/", re.IGNORECASE)
_FOLDED = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")
_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:/+[^/@:]*):[^/@]*@")
_POSTGRES_FOLDED = re.compile(r"^(postgres(?:ql)?):/(?!/)", re.IGNORECASE)


# A libpq keyword/value connection string (`host=127.0.0.1 dbname=memory user=agent`): nothing
# but `key=value` words, one of them a libpq connection keyword.
_DSN = re.compile(r"^\s*(?:[A-Za-z_]+\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']+)\s*)+$")
_DSN_KEY = re.compile(r"(?:^|\s)(?:host|hostaddr|port|dbname|user|password|passfile|service|"
                      r"sslmode|connect_timeout|application_name)\s*=", re.IGNORECASE)
_DSN_PASSWORD = re.compile(r"(password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def is_url(location: str | Path) -> bool:
    return bool(_URL.match(str(location)))


def is_dsn(location: str | Path) -> bool:
    text = str(location)
    return bool(_DSN.match(text) and _DSN_KEY.search(text))


def _shown(location: str) -> str:
    """The URL as the user typed it (the `//` a Path folded restored), its password masked."""
    if not location.lower().startswith("file:"):
        location = _FOLDED.sub(r"\1://", location)
    return _PASSWORD.sub(r"\1:***@", location)


def shown(location: str | os.PathLike[str]) -> str:
    """A location as messages and reports show it: a URL's or libpq string's password masked
    (a file path as it is)."""
    text = os.fspath(location)
    if is_url(text):
        return _shown(text)
    return _DSN_PASSWORD.sub(r"\1***", text.strip()) if is_dsn(text) else text


def is_postgres(location: str | Path) -> bool:
    """A PostgreSQL location: a postgresql:// or postgres:// URL (its `//` maybe folded by a
    Path) or a libpq keyword connection string."""
    text = str(location)
    return bool(_POSTGRES.match(text)) or is_dsn(text)


def server_location(location: str) -> str:
    """A PostgreSQL location as libpq takes it: as given (`refuse_url` refused a folded one)."""
    refuse_url(location, "database")
    return location


def refuse_url(location: str | Path, source: str = "--db", *, postgres: bool = True) -> None:
    """A usage error (exit 2) when `location` is a URL memcli cannot open (`postgres`: whether
    a PostgreSQL location is one it can); `source` says where it came from."""
    if postgres and is_postgres(location):
        folded = _POSTGRES_FOLDED.match(str(location))
        if folded:
            shown = _PASSWORD.sub(r"\1:***@", str(location))
            raise UsageError(
                f"{source} {shown} has lost the `//` after "
                f"`{folded.group(1)}:` (a Path folds it), so its host cannot be told from its "
                "database", "give the URL as a string: postgresql://host/db, or "
                "postgresql:///db for the local socket")
        return
    if is_url(location):
        raise UsageError(f"{source} {_shown(str(location))} is a URL memcli cannot open",
                         "give a file path (SQLite) or a postgresql:// URL (PostgreSQL)")
    if is_dsn(location):
        shown = _DSN_PASSWORD.sub(r"\1***", str(location).strip())
        raise UsageError(f"{source} {shown!r} is a PostgreSQL connection string, not a file",
                         "open it through memcli.store.location.open_database")


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
        from memcli.store.postgres import connect

        return connect(server_location(location), readonly=readonly,
                       must_exist=must_exist, busy_timeout=busy_timeout)
    from memcli.store.sqlite.connection import Database

    return Database(location, readonly=readonly, must_exist=must_exist,
                    busy_timeout=busy_timeout)
