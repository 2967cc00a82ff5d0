"""Open memory.db: WAL, busy_timeout, foreign keys, sqlite-vec, migrations on open."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import apsw

from memcli.errors import DatabaseBusyError, MemcliError, SchemaError
from memcli.store import migrations, vectors

BUSY_TIMEOUT_MS = 5000


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

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        flags = apsw.SQLITE_OPEN_READONLY if readonly else (
            apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        )
        try:
            self.conn = apsw.Connection(self.path, flags=flags)
        except apsw.Error as exc:
            raise MemcliError(f"cannot open database {self.path}: {exc}") from exc
        self.conn.setbusytimeout(BUSY_TIMEOUT_MS)
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
            raise DatabaseBusyError("database is busy", "another memcli holds the lock") from exc
        except apsw.NotADBError as exc:
            raise SchemaError(f"{self.path} is not a SQLite database") from exc
        from memcli.store.crypto import Sealer  # `high` values: seal on write, open on read

        self.crypto = Sealer(self)
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
            raise DatabaseBusyError("database is busy", "retry later; exit code 75") from exc

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
    def transaction(self) -> Iterator[None]:
        """One atomic unit of work (IMMEDIATE, so writers queue on busy_timeout, not mid-way)."""
        if self.conn.in_transaction:
            # Nested use joins the outer transaction through a savepoint.
            with self.conn:
                yield
            return
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except apsw.BusyError as exc:
            raise DatabaseBusyError("database is busy", "retry later; exit code 75") from exc
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

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

