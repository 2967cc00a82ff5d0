"""A fresh, empty PostgreSQL database per test, on the session's server (tests/support/pg.py).

`pg_db` yields the URL of a database made for the test (`CREATE DATABASE ... TEMPLATE
template0`: empty, no extensions) and drops it afterwards (`WITH (FORCE)`: a connection the
test left open does not keep it alive). Use: `from tests.support.pg_db import pg_db  # noqa: F401`
(it brings `pg_server` and `pg_cluster` along).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.pg import pg_cluster, pg_server  # noqa: F401


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



@contextlib.contextmanager
def loaded_database(server: str, load: Callable[[Any], None]) -> Iterator[Any]:
    """memcli's store on a scratch database of `server`, filled by `load(db)`; closed and
    dropped afterwards (a module's fixture: `with loaded_database(pg_server, _load) as db`)."""
    from memcli.store.opener import open_database

    with scratch_database(server) as name:
        database = open_database(with_database(server, name))
        try:
            load(database)
            yield database
        finally:
            database.close()
@pytest.fixture
def pg_db(pg_server: str) -> Iterator[str]:  # noqa: F811
    with scratch_database(pg_server) as name:
        yield with_database(pg_server, name)


# Everything a test could change in a database besides its rows, as one md5: the objects of its
# non-system schemas (by oid, so a dropped-and-recreated object differs), their definitions and
# privileges, columns with their types, sequences and their current values, extensions, text
# search configurations, comments, settings, large objects. TRUNCATE keeps every oid (only the
# storage file changes), so a database put back by `ReusedDatabase.reset` hashes as the copy
# did when it was fresh, and one a test altered does not.
_FINGERPRINT = r"""
WITH ns AS (
  SELECT oid FROM pg_namespace WHERE nspname NOT IN ('pg_catalog', 'information_schema')
     AND nspname NOT LIKE 'pg\_toast%' AND nspname NOT LIKE 'pg\_temp%'),
rel AS (SELECT oid FROM pg_class WHERE relnamespace IN (SELECT oid FROM ns)),
parts AS (
  SELECT concat_ws(' ', 'ns', oid, nspname, nspacl) AS line FROM pg_namespace
   WHERE oid IN (SELECT oid FROM ns)
  UNION ALL SELECT concat_ws(' ', 'rel', oid, relname, relkind, relpersistence, relrowsecurity,
                             relforcerowsecurity, relacl, reloptions, relispartition)
    FROM pg_class WHERE oid IN (SELECT oid FROM rel)
  UNION ALL SELECT concat_ws(' ', 'att', attrelid, attnum, attname, atttypid, atttypmod,
                             attnotnull, attisdropped, atthasdef, attgenerated, attidentity,
                             attcollation, attacl, attoptions)
    FROM pg_attribute WHERE attrelid IN (SELECT oid FROM rel) AND attnum > 0
  UNION ALL SELECT concat_ws(' ', 'def', oid, pg_get_expr(adbin, adrelid)) FROM pg_attrdef
   WHERE adrelid IN (SELECT oid FROM rel)
  -- by table and name: PostgreSQL 18 remakes a NOT NULL constraint (a new oid) when
  -- ALTER COLUMN ... TYPE rewrites its column, as the undo of the vector dimension does
  UNION ALL SELECT concat_ws(' ', 'con', conrelid, contypid, conname, pg_get_constraintdef(oid),
                             convalidated)
    FROM pg_constraint WHERE connamespace IN (SELECT oid FROM ns)
  UNION ALL SELECT concat_ws(' ', 'idx', indexrelid, pg_get_indexdef(indexrelid), indisvalid)
    FROM pg_index WHERE indrelid IN (SELECT oid FROM rel)
  UNION ALL SELECT concat_ws(' ', 'trg', oid, pg_get_triggerdef(oid), tgenabled) FROM pg_trigger
   WHERE tgrelid IN (SELECT oid FROM rel)
  UNION ALL SELECT concat_ws(' ', 'pol', oid, polname, polcmd, polpermissive, polroles,
                             pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid))
    FROM pg_policy
  UNION ALL SELECT concat_ws(' ', 'proc', oid, proname, md5(prosrc), proconfig, proacl,
                             prosecdef) FROM pg_proc WHERE pronamespace IN (SELECT oid FROM ns)
  UNION ALL SELECT concat_ws(' ', 'type', oid, typname, typacl) FROM pg_type
   WHERE typnamespace IN (SELECT oid FROM ns)
  UNION ALL SELECT concat_ws(' ', 'enum', oid, enumlabel) FROM pg_enum
  UNION ALL SELECT concat_ws(' ', 'ext', oid, extname, extversion, extconfig) FROM pg_extension
  UNION ALL SELECT concat_ws(' ', 'ts', oid, cfgname) FROM pg_ts_config WHERE oid >= 16384
  UNION ALL SELECT concat_ws(' ', 'tsmap', mapcfg, maptokentype, mapseqno, mapdict)
    FROM pg_ts_config_map WHERE mapcfg >= 16384
  UNION ALL SELECT concat_ws(' ', 'tsdict', oid, dictname, dictinitoption) FROM pg_ts_dict
   WHERE oid >= 16384
  UNION ALL SELECT concat_ws(' ', 'seq', seqrelid, seqstart, seqincrement, seqmin, seqmax,
                             seqcycle) FROM pg_sequence
  UNION ALL SELECT concat_ws(' ', 'seqval', schemaname, sequencename, last_value)
    FROM pg_sequences
  UNION ALL SELECT concat_ws(' ', 'desc', classoid, objoid, objsubid, description)
    FROM pg_description WHERE objoid >= 16384
  UNION ALL SELECT concat_ws(' ', 'set', setrole, setconfig) FROM pg_db_role_setting
   WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL SELECT concat_ws(' ', 'db', datacl, datallowconn, datconnlimit) FROM pg_database
   WHERE datname = current_database()
  UNION ALL SELECT concat_ws(' ', 'lo', oid) FROM pg_largeobject_metadata
  UNION ALL SELECT concat_ws(' ', 'defacl', oid, defaclacl) FROM pg_default_acl
  UNION ALL SELECT concat_ws(' ', 'rule', oid, rulename) FROM pg_rewrite WHERE oid >= 16384
  UNION ALL SELECT concat_ws(' ', 'stx', oid, stxname) FROM pg_statistic_ext
  UNION ALL SELECT concat_ws(' ', 'evt', oid, evtname) FROM pg_event_trigger
  UNION ALL SELECT concat_ws(' ', 'op', oid, oprname) FROM pg_operator WHERE oid >= 16384
  UNION ALL SELECT concat_ws(' ', 'cast', oid) FROM pg_cast WHERE oid >= 16384
  UNION ALL SELECT concat_ws(' ', 'coll', oid) FROM pg_collation WHERE oid >= 16384
  UNION ALL SELECT concat_ws(' ', 'pub', oid) FROM pg_publication)
SELECT md5(string_agg(line, E'\n' ORDER BY line)) FROM parts
"""


def _identifier(*parts: str) -> str:
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


# Every table's bytes on disk: heap, indexes, TOAST, free-space and visibility maps. A table a
# test never wrote keeps the size of a fresh copy's; a row written, even deleted again, leaves
# a page behind (and a VACUUM that gives the heap's pages back leaves index pages and the
# visibility map), so an unchanged size is a table with nothing of the test's in it.
_SIZES = """
SELECT schemaname, tablename,
       pg_total_relation_size(format('%I.%I', schemaname, tablename)::regclass)
  FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
"""


class ReusedDatabase:
    """One copy of `template` on `server` that serves test after test (a session's, or an xdist
    worker's): `reset()` after each test puts it back to the state of a fresh copy, which
    costs a fraction of CREATE DATABASE ... TEMPLATE (~1 s on this machine) and DROP.

    Put back means: the connections the test left are ended (their advisory locks, temp tables
    and prepared statements go with them), every table the test wrote (its size on disk is not
    a fresh copy's, _SIZES) is emptied (TRUNCATE ... RESTART IDENTITY: new, empty files, as a
    fresh copy's) and the tables that had rows in the fresh copy are refilled with them; a
    table the test left alone is not touched (emptying all ~30 tables of memcli's schema was
    most of the time a reset took). Every sequence restarts, the
    planner statistics and activity counters are cleared, `undo` reverses the in-place schema
    changes the code under test makes as a matter of course (memcli's vector dimension), and
    then the catalogue fingerprint (_FINGERPRINT) must equal the fresh copy's. When it does not
    (a test created, dropped or altered something), the database is dropped and a new copy
    made: a test never sees what another left."""

    def __init__(self, server: str, template: str, undo=None, prefix: str = "memcli_r_") -> None:
        self.server, self.template, self.undo, self.prefix = server, template, undo, prefix
        self.recreated = 0  # copies made after the first (a test changed the schema)
        self.name = self._copy()
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            self.fingerprint = conn.execute(_FINGERPRINT).fetchone()[0]
            self.tables = self._tables(conn)
            # The fresh copy's rows (memcli's `meta`), restored after each TRUNCATE.
            self.rows: dict[str, bytes] = {}
            for schema, table in self.tables:
                target = _identifier(schema, table)
                if conn.execute(f"SELECT EXISTS (SELECT 1 FROM {target})").fetchone()[0]:
                    with conn.cursor().copy(f"COPY {target} TO STDOUT") as copy:
                        self.rows[target] = b"".join(bytes(b) for b in copy)
        # Every table emptied once, so each is in the state a TRUNCATE leaves (empty files;
        # the migrations that made the template may have left pages behind), and its size in
        # that state is the one a table the test did not write still has.
        self.sizes: dict[tuple[str, str], int] = {}
        if not self._put_back(every=True):
            raise RuntimeError(f"a fresh copy of {template} does not fingerprint as itself")
        with psycopg.connect(self.url, autocommit=True) as conn:
            self.sizes = self._sizes(conn)

    @property
    def url(self) -> str:
        return with_database(self.server, self.name)

    def _copy(self) -> str:
        import psycopg

        name = f"{self.prefix}{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.server, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        return name

    def _drop(self) -> None:
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    @staticmethod
    def _tables(conn) -> list[tuple[str, str]]:
        return [tuple(r) for r in conn.execute(
            "SELECT schemaname, tablename FROM pg_tables WHERE schemaname NOT IN"
            " ('pg_catalog', 'information_schema') ORDER BY 1, 2")]

    @staticmethod
    def _sizes(conn) -> dict[tuple[str, str], int]:
        return {(schema, table): size for schema, table, size in conn.execute(_SIZES)}

    def _put_back(self, every: bool = False) -> bool:
        """Empty and refill the database (`every` table, or those the test wrote); whether it
        now fingerprints as a fresh copy."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
                         " WHERE datname = current_database() AND pid <> pg_backend_pid()")
            with conn.transaction():
                tables = self._tables(conn)
                if tables != self.tables:
                    return False
                sizes = self._sizes(conn)
                written = [t for t in tables if every or sizes[t] != self.sizes[t]
                           or _identifier(*t) in self.rows]
                if written:
                    conn.execute("TRUNCATE " + ", ".join(_identifier(*t) for t in written)
                                 + " RESTART IDENTITY CASCADE")
                for target, data in self.rows.items():
                    with conn.cursor().copy(f"COPY {target} FROM STDIN") as copy:
                        copy.write(data)
                # Sequences no column owns (RESTART IDENTITY resets the owned ones).
                conn.execute("SELECT setval(format('%I.%I', schemaname, sequencename),"
                             " start_value, false) FROM pg_sequences")
                if self.undo is not None:
                    self.undo(conn)
                conn.execute("DELETE FROM pg_statistic WHERE starelid >= 16384")
                conn.execute("DELETE FROM pg_statistic_ext_data")
            conn.execute("SELECT pg_stat_reset()")
            return conn.execute(_FINGERPRINT).fetchone()[0] == self.fingerprint

    def reset(self) -> None:
        """Back to a fresh copy's state (a new copy when the old one cannot be put back)."""
        try:
            if self._put_back():
                return
        except Exception:  # noqa: BLE001 - whatever went wrong, a new copy is the answer
            pass
        self._drop()
        self.name = self._copy()
        self.recreated += 1

    def close(self) -> None:
        self._drop()
