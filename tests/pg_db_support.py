"""A fresh, empty PostgreSQL database per test, on the session's server (tests/pg_support.py).

`pg_db` yields the URL of a database made for the test (`CREATE DATABASE ... TEMPLATE
template0`: empty, no extensions) and drops it afterwards (`WITH (FORCE)`: a connection the
test left open does not keep it alive). Use: `from pg_db_support import pg_db  # noqa: F401`
(it brings `pg_server` and `pg_cluster` along).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest
from pg_support import pg_cluster, pg_server  # noqa: F401


def with_database(dsn: str, name: str) -> str:
    """The server URL `dsn` pointed at database `name`."""
    return dsn.rsplit("/", 1)[0] + "/" + name


@contextlib.contextmanager
def scratch_database(server: str, template: str = "template0",
                     prefix: str = "memcli_t_") -> Iterator[str]:
    """A new database on `server` copied from `template`, dropped afterwards; yields its name."""
    psycopg = pytest.importorskip("psycopg")
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield name
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_db(pg_server: str) -> Iterator[str]:  # noqa: F811
    with scratch_database(pg_server) as name:
        yield with_database(pg_server, name)
