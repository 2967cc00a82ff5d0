"""PostgreSQL: the engine on a real server (tests/support/pg.py).

Without the `pg` extra (psycopg) every module here skips with one line rather than failing to
import: importing a module of this folder imports this package first, and the skip below is a
module-level skip of that module. With MEMCLI_REQUIRE_PG=1 (.ci/run) a missing psycopg fails,
as a missing server does.
"""

import os

import pytest

from tests.support.pg import REQUIRE_ENV

if os.environ.get(REQUIRE_ENV) != "1":
    pytest.importorskip(
        "psycopg", reason="the PostgreSQL tests need psycopg: pip install -e '.[pg]'"
    )
