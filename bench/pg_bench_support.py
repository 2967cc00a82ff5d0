"""The one way bench/ scripts make a scratch PostgreSQL database.

A bench starts a throw-away cluster with the tests' `running_server()` (tests/support/pg.py)
and makes its databases here: copied from template0 (so nothing left in template1 comes along,
and the locale is the cluster's), named with quotes, addressed by a URL on the same server.
The tests make theirs with tests/support/pg_db.py (a pytest helper that skips without
psycopg; bench scripts fail instead).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.support.pg import PgServer, PgUnavailable, running_server

REPO_ROOT = Path(__file__).resolve().parents[1]

__all__ = ["PgServer", "PgUnavailable", "create_database", "database_url", "running_server",
           "scratch_database"]


def database_url(dsn: str, name: str) -> str:
    """The URL of database `name` on the server `dsn` points at (same user, host, port)."""
    return dsn.rsplit("/", 1)[0] + "/" + name


def create_database(dsn: str, name: str, *, replace: bool = False) -> str:
    """A new, empty database `name` on the server `dsn` (a superuser's URL); its URL.
    `replace`: drop a database of that name first (connections to it are ended)."""
    import psycopg

    assert name.isidentifier(), name  # bench code names its databases; quoted anyway
    with psycopg.connect(dsn, autocommit=True) as admin:
        if replace:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    return database_url(dsn, name)


@contextlib.contextmanager
def scratch_database(name: str) -> Iterator[tuple[PgServer, str]]:
    """(server, URL of a fresh database `name`) on a throw-away cluster, stopped and removed
    on the way out. PgUnavailable (one line) when PostgreSQL cannot run here."""
    with running_server() as server:
        yield server, create_database(server.dsn, name)
