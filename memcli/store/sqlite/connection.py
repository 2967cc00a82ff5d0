"""The SQLite `Database`: one apsw connection to memory.db (WAL, busy_timeout, foreign keys,
sqlite-vec, migrations on open), with the surface every store module uses (execute, query,
scalar, insert, transaction, savepoint, meta) and the mapping of apsw errors to memcli's."""

from __future__ import annotations

import contextlib
import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import apsw

from memcli.core import private
from memcli.core.locations import refuse_url
from memcli.errors import (
    DatabaseBusyError,
    MemcliError,
    NoDatabaseError,
    SchemaError,
    StorageError,
)
from memcli.store.connection import BUSY_TIMEOUT
from memcli.store.meta import MetaRows
from memcli.store.sealing import Sealer  # `high` values: seal on write, open on read
from memcli.store.sqlite import migrations, vec
from memcli.store.sqlite.backend import BACKEND
from memcli.store.sqlite.dialect import DIALECT
from memcli.store.sqlite.error_map import _plain, environment_error
from memcli.store.sqlite.writers import writer_lock

if TYPE_CHECKING:
    from memcli.store.connection import Params

_RETRY_PAUSE = 0.05  # between attempts when SQLite returns busy without waiting


def _vec_extension_path() -> str | None:
    """Locate sqlite-vec's loadable file without `import sqlite_vec` (that pulls numpy: ~130 ms)."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for candidate in sorted(Path(folder).glob("vec0.*")):
            if candidate.suffix in {".so", ".dylib", ".dll"}:
                return str(candidate.with_suffix(""))
    return None


class Database(MetaRows):
    """One apsw connection to a memcli database, migrated and ready."""

    busy_timeout: float = BUSY_TIMEOUT
    # The tenant a PostgreSQL login role is bound to (row-level security); a file has none.
    bound_tenant: str | None = None

    def __init__(self, path: str | Path, *, readonly: bool = False,
                 must_exist: bool = False, busy_timeout: float = BUSY_TIMEOUT) -> None:
        """`readonly`: a second connection for reading only. `must_exist`: a read command's
        open: no database at `path` is an error, and nothing is created there. `busy_timeout`:
        seconds a writer waits for the write lock before exit 75."""
        refuse_url(path, "database", postgres=False)  # before anything is created from it
        self.path = str(path)
        self.backend = BACKEND  # the engine's operations (memcli.store.backend)
        self.dialect = DIALECT  # SQL fragments in SQLite's spelling (memcli.store.dialect)
        self.busy_timeout = busy_timeout
        # True when the file cannot be written (permissions): read commands still answer.
        self.read_only = readonly
        if self.path != ":memory:":
            _check_path(Path(self.path), create=not (readonly or must_exist))
        flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE
        if not (readonly or must_exist):
            flags |= apsw.SQLITE_OPEN_CREATE
        try:
            self.conn = apsw.Connection(self.path, flags=flags)
        except apsw.Error as exc:
            raise environment_error(exc, self.path) or MemcliError(
                f"cannot open database {self.path}: {_plain(exc)}") from exc
        self.conn.setbusytimeout(int(busy_timeout * 1000))
        self.vec_enabled = self._load_vec()
        self.vec_warning: str | None = None
        try:
            self._prepare(readonly, must_exist)
        except apsw.BusyError as exc:
            self.conn.close()
            raise self._busy() from exc
        except apsw.NotADBError as exc:
            self.conn.close()
            raise SchemaError(f"{self.path} is not a SQLite database",
                              "choose another --db; memcli leaves this file alone") from exc
        except apsw.Error as exc:
            self.conn.close()
            if not self._open_immutable(exc, readonly or must_exist):
                raise environment_error(exc, self.path) or exc from exc
        except MemcliError:
            self.conn.close()
            raise

        self.crypto = Sealer(self)
        if not self.vec_enabled:
            self.vec_warning = (
                "sqlite-vec could not be loaded: vector search is disabled "
                "(full-text and entity search still work)"
            )

    def _prepare(self, readonly: bool, must_exist: bool) -> None:
        """Pragmas and migrations, after checking the file is memcli's (or new): nothing is
        written to a file that belongs to another program."""
        self.execute("PRAGMA foreign_keys = ON")
        # Zero deleted and moved cells inside the pages being written anyway (no extra I/O):
        # otherwise copies of rows that `purge` removes linger in free space of the file.
        self.execute("PRAGMA secure_delete = FAST")
        if self.path != ":memory:":
            tables = _foreign_check(self)
            if not tables and (readonly or must_exist):
                raise NoDatabaseError(f"no memcli database at {self.path} (the file is empty)",
                                      "check --db or MEMCLI_DB; `memcli ingest` creates one")
        if not readonly and self.conn.readonly("main"):
            self.read_only = True  # the file or its folder is write-protected
            if migrations.check_version(self) < migrations.LATEST:
                raise StorageError(f"database is read-only: {self.path}",
                                   "it needs a schema upgrade; check its permissions")
            return
        if not readonly and self.path != ":memory:":
            self._switch_to_wal()
            self.execute("PRAGMA synchronous = NORMAL")
        if not readonly:
            migrations.migrate(self)
            if self.vec_enabled and self.get_meta(vec.VEC_STALE):
                vec.sync_vec_index(self)
        else:
            migrations.check_version(self)

    def _switch_to_wal(self) -> None:
        """`PRAGMA journal_mode = WAL`, tried again until the busy timeout. Processes opening
        a new file at once each switch it: the switch reads (a shared lock) and then needs the
        exclusive lock, so two at once deadlock, and SQLite answers one of them busy at once,
        without its busy handler; the way out is to let go and try again (the other's switch
        then completes, and this one finds WAL already set). Four processes creating one
        file failed so, at once, in 1 of ~15 rounds."""
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                self.conn.execute("PRAGMA journal_mode = WAL").fetchall()
                return
            except apsw.BusyError as exc:
                if time.monotonic() + _RETRY_PAUSE >= deadline:
                    raise self._busy() from exc  # the one-line busy error, as execute's
                time.sleep(_RETRY_PAUSE)

    def _open_immutable(self, exc: apsw.Error, reading: bool) -> bool:
        """A read in a write-protected folder: SQLite cannot create the -shm file a WAL
        database needs, but with no -wal file beside it the main file holds everything, and
        `immutable` reads it without one. True when that worked."""
        if not (reading and isinstance(exc, apsw.CantOpenError | apsw.ReadOnlyError)):
            return False
        if Path(self.path + "-wal").exists():
            return False
        uri = "file:" + quote(str(Path(self.path).resolve())) + "?immutable=1"
        try:
            self.conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY
                                        | apsw.SQLITE_OPEN_URI)
            self.conn.setbusytimeout(int(self.busy_timeout * 1000))
            self.vec_enabled = self._load_vec()
            self.read_only = True
            _foreign_check(self)
            migrations.check_version(self)
        except apsw.Error:
            self.conn.close()
            return False
        except MemcliError:
            self.conn.close()
            raise
        return True

    def _load_vec(self) -> bool:
        path = _vec_extension_path()
        if path is None:
            return False
        try:
            self.conn.enable_load_extension(True)
            self.conn.load_extension(path)
            self.conn.enable_load_extension(False)
        except apsw.Error:
            return False
        return True

    # -- small helpers every store module uses ------------------------------------------------
    def execute(self, sql: str, params: Params = None) -> apsw.Cursor:
        try:
            return self.conn.execute(sql, params)
        except apsw.BusyError as exc:
            raise self._busy() from exc

    def _busy(self, waited: float | None = None) -> DatabaseBusyError:
        waited = self.busy_timeout if waited is None else waited
        return DatabaseBusyError(
            f"database is busy: another process held its write lock for {waited:g} s",
            "retry later, or wait longer with MEMCLI_BUSY_TIMEOUT=<seconds>",
        )

    def executemany(self, sql: str, seq) -> apsw.Cursor:
        return self.conn.executemany(sql, seq)

    def query(self, sql: str, params: Params = None) -> list[dict]:
        """Rows as dicts (column name -> value)."""
        cur = self.execute(sql, params)
        try:
            names = [d[0] for d in cur.getdescription()]
        except apsw.ExecutionCompleteError:
            return []
        return [dict(zip(names, row, strict=True)) for row in cur]

    def stream(self, sql: str, params: Params = None, *,
               raw: bool = False) -> Iterator[dict]:
        """Rows as dicts, one at a time (a whole table never sits in memory). `raw`: values
        as stored, i.e. a `high` row's ciphertext stays ciphertext (no row tracer)."""
        cursor = self.conn.cursor()
        if raw:
            cursor.row_trace = lambda _c, row: row  # a cursor's tracer replaces the connection's
        try:
            cursor.execute(sql, params)
        except apsw.BusyError as exc:
            raise self._busy() from exc
        try:
            names = [d[0] for d in cursor.getdescription()]
        except apsw.ExecutionCompleteError:
            return
        for row in cursor:
            yield dict(zip(names, row, strict=True))

    def scalar(self, sql: str, params: Params = None):
        row = self.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def insert(self, sql: str, params: Params = None) -> int:
        """Run an `INSERT ... RETURNING id` and return that id (the portable form of
        last_insert_rowid: PostgreSQL has no such call)."""
        rows = self.execute(sql, params).fetchall()  # run to the end: the statement is done
        return int(rows[0][0])

    def change_count(self, sql: str, params: Params = None) -> int:
        """Run an UPDATE/DELETE/INSERT and return how many rows it changed (the portable form
        of SQLite's changes(): a cursor's rowcount on PostgreSQL)."""
        self.execute(sql, params)
        return int(self.conn.changes())

    @property
    def in_transaction(self) -> bool:
        return bool(self.conn.in_transaction)

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """A nested unit inside the current transaction (or a transaction of its own): rolled
        back alone when its body raises. apsw's connection context manager is exactly that."""
        with self.conn:
            yield

    @contextlib.contextmanager
    def transaction(self, *, wait: float | None = None) -> Iterator[None]:
        """One atomic unit of work (IMMEDIATE, so writers queue for the lock, not mid-way).
        `wait`: seconds to wait for the write lock instead of `busy_timeout` (HINT_WAIT for
        writes a read command makes in passing, which give up rather than stall the read)."""
        if self.conn.in_transaction:
            # Nested use joins the outer transaction through a savepoint.
            with self.savepoint():
                yield
            return
        wait = self.busy_timeout if wait is None else wait
        # Threads of this process queue here first (memcli serve), within the same wait.
        lock = writer_lock(self.path)
        deadline = time.monotonic() + wait
        if lock is not None and not lock.acquire(timeout=wait):
            raise self._busy(wait)
        try:
            self._begin_immediate(max(deadline - time.monotonic(), 0.0), wait)
            try:
                yield
            except BaseException:
                # SQLite may have rolled back already (a full disk does): keep the first error.
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            else:
                self.conn.execute("COMMIT")
        finally:
            if lock is not None:
                lock.release()

    def _begin_immediate(self, wait: float, reported: float) -> None:
        """Take the write lock, waiting up to `wait` seconds in all (`reported`: the wait the
        busy error names, which includes any time spent queueing in this process).

        SQLite's busy handler does the waiting in the usual case; in a few cases it returns
        busy at once (e.g. while another connection recovers the WAL index), so the attempt
        is repeated until the deadline rather than failing a writer that only had to wait."""
        deadline = time.monotonic() + wait
        if wait != self.busy_timeout:
            self.conn.setbusytimeout(int(wait * 1000))
        try:
            while True:
                try:
                    self.conn.execute("BEGIN IMMEDIATE")
                    return
                except apsw.BusyError as exc:
                    if time.monotonic() + _RETRY_PAUSE >= deadline:
                        raise self._busy(reported) from exc
                    time.sleep(_RETRY_PAUSE)
        finally:
            if wait != self.busy_timeout:
                self.conn.setbusytimeout(int(self.busy_timeout * 1000))

    def size_bytes(self) -> int:
        return self.backend.size_bytes(self)

    def close(self) -> None:
        self.conn.close()


def _check_path(path: Path, *, create: bool) -> None:
    """Before SQLite sees the path: a read never creates a file (or its folders), a folder is
    not a database, and a missing folder is made only for a command that writes."""
    if path.is_dir():
        raise StorageError(f"cannot open {path}: it is a folder", "give a file path to --db")
    if path.exists():
        return
    if not create:
        raise NoDatabaseError(f"no memcli database at {path}",
                              "check --db or MEMCLI_DB; `memcli ingest` creates one")
    try:
        private.make_dirs(path.parent)
    except OSError as exc:
        raise StorageError(f"cannot open {path}: cannot create its folder ({exc.strerror})",
                           "check --db and the folder's permissions") from exc
    # Created 0600 before SQLite sees it (SQLite would create it 0644 less the umask), so its
    # WAL and shared-memory files, which SQLite gives the database's mode, are 0600 too.
    with contextlib.suppress(OSError):  # SQLite's own open reports what went wrong
        private.create_file(path)


def _foreign_check(db: Database) -> list[str]:
    """The file's tables; raises SchemaError when they are not memcli's (another program's
    SQLite file is never switched to WAL or migrated). An empty file has none: it is new."""
    tables = [r[0] for r in db.conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    if tables and ("meta" not in tables or "events" not in tables
                   or migrations.current_version(db) == 0):
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise SchemaError(f"{db.path} is a SQLite database of another program "
                          f"(tables: {shown})", "choose another --db; memcli leaves it alone")
    return tables
