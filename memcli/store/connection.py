"""Open memory.db: WAL, busy_timeout, foreign keys, sqlite-vec, migrations on open."""

from __future__ import annotations

import contextlib
import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path

import apsw

from memcli.errors import DatabaseBusyError, MemcliError, SchemaError
from memcli.store import migrations, vectors

# How long a writer waits for the write lock before the command gives up with exit 75
# (`MEMCLI_BUSY_TIMEOUT`, seconds). Write transactions are short (models and embeddings run
# before the lock is taken), so a wait this long means something holds the lock abnormally.
BUSY_TIMEOUT = 30.0
_RETRY_PAUSE = 0.05  # between attempts when SQLite returns busy without waiting
# Read commands record access counts and metrics in passing: hints, dropped after this wait
# rather than holding up the answer behind a long write.
HINT_WAIT = 1.0


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


class Database:
    """One apsw connection to a memcli database, migrated and ready."""

    busy_timeout: float = BUSY_TIMEOUT

    def __init__(self, path: str | Path, *, readonly: bool = False,
                 busy_timeout: float = BUSY_TIMEOUT) -> None:
        self.path = str(path)
        self.busy_timeout = busy_timeout
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        flags = apsw.SQLITE_OPEN_READONLY if readonly else (
            apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        )
        try:
            self.conn = apsw.Connection(self.path, flags=flags)
        except apsw.Error as exc:
            raise MemcliError(f"cannot open database {self.path}: {exc}") from exc
        self.conn.setbusytimeout(int(busy_timeout * 1000))
        self.vec_enabled = self._load_vec()
        self.vec_warning: str | None = None
        try:
            self.execute("PRAGMA foreign_keys = ON")
            # Zero deleted and moved cells inside the pages being written anyway (no extra I/O):
            # otherwise copies of rows that `purge` removes linger in free space of the file.
            self.execute("PRAGMA secure_delete = FAST")
            if not readonly and self.path != ":memory:":
                self.execute("PRAGMA journal_mode = WAL")
                self.execute("PRAGMA synchronous = NORMAL")
            if not readonly:
                migrations.migrate(self)
                if self.vec_enabled and self.get_meta(vectors.VEC_STALE):
                    vectors.sync_vec_index(self)
            else:
                migrations.check_version(self)
        except apsw.BusyError as exc:
            raise self._busy() from exc
        except apsw.NotADBError as exc:
            raise SchemaError(f"{self.path} is not a SQLite database") from exc
        if not self.vec_enabled:
            self.vec_warning = (
                "sqlite-vec could not be loaded: vector search is disabled "
                "(full-text and entity search still work)"
            )

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
    def execute(self, sql: str, params: tuple | dict | None = None) -> apsw.Cursor:
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

    def query(self, sql: str, params: tuple | dict | None = None) -> list[dict]:
        """Rows as dicts (column name -> value)."""
        cur = self.execute(sql, params)
        try:
            names = [d[0] for d in cur.getdescription()]
        except apsw.ExecutionCompleteError:
            return []
        return [dict(zip(names, row, strict=True)) for row in cur]

    def scalar(self, sql: str, params: tuple | dict | None = None):
        row = self.execute(sql, params).fetchone()
        return None if row is None else row[0]

    @contextlib.contextmanager
    def transaction(self, *, wait: float | None = None) -> Iterator[None]:
        """One atomic unit of work (IMMEDIATE, so writers queue for the lock, not mid-way).
        `wait`: seconds to wait for the write lock instead of `busy_timeout` (HINT_WAIT for
        writes a read command makes in passing, which give up rather than stall the read)."""
        if self.conn.in_transaction:
            # Nested use joins the outer transaction through a savepoint.
            with self.conn:
                yield
            return
        self._begin_immediate(self.busy_timeout if wait is None else wait)
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

    def _begin_immediate(self, wait: float) -> None:
        """Take the write lock, waiting up to `wait` seconds in all.

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
                        raise self._busy(wait) from exc
                    time.sleep(_RETRY_PAUSE)
        finally:
            if wait != self.busy_timeout:
                self.conn.setbusytimeout(int(self.busy_timeout * 1000))

    def get_meta(self, key: str) -> str | None:
        return self.scalar("SELECT value FROM meta WHERE key = ?", (key,))

    def set_meta(self, key: str, value: str) -> None:
        self.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def size_bytes(self) -> int:
        if self.path == ":memory:":
            return int(self.scalar("PRAGMA page_count") * self.scalar("PRAGMA page_size"))
        total = 0
        for suffix in ("", "-wal"):
            p = Path(self.path + suffix)
            if p.exists():
                total += p.stat().st_size
        return total

    def close(self) -> None:
        self.conn.close()

