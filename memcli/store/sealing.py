"""Encryption at rest, the SQL side: seal `high` values on write, open them on read.

Writes: the store functions that write text of a `high` item (event content/tags/refs and its
artifact, memory content, history meta, change-log summaries, ledger rows, checkpoints, session
summaries) pass it through `seal`. The first sealed value creates the key (file) if needed and
records the key id in `meta` (`enc_key_id`); from then on every connection to the file installs
one row tracer (apsw's, through `db.backend.install_decryption`).

Reads: that row tracer is the one choke point. Every row any query returns goes through it;
a row holding an `enc:v1:` value is decrypted there, so no reader (query, acb, history, export,
lifecycle...) can forget to. Without a key such a row is skipped (apsw drops a row its tracer
maps to None): `high` items are left out of every result and a one-line notice goes out once.
A key that is not this database's key is an error, never garbage.

Because decryption is generic (the tracer does not know which table or row a value came from),
the associated data binds a value to the format and key, not to its row: someone able to write
the file could swap two ciphertexts between rows. Confidentiality is what this protects; the
same writer could delete rows anyway. It also lets SQL copy sealed values (INSERT ... SELECT).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memcli.config import encryption_key_source
from memcli.errors import UsageError
from memcli.policy.encryption import (
    PREFIX,
    EncryptionError,
    Key,
    is_encrypted,
    key_id,
    new_key,
    parse_key,
    read_key_file,
    write_key_file,
)
from memcli.store.batching import chunks, marks

if TYPE_CHECKING:
    from pathlib import Path

    from memcli.store.connection import Database

META_KEY_ID = "enc_key_id"
NO_KEY_NOTICE = ("`high` sensitivity items are left out: no encryption key "
                 "(set MEMCLI_KEY or MEMCLI_KEY_FILE; memcli key status)")


def load_key(create: bool = False) -> Key | None:
    """The configured key (env first, then the key file); with `create`, a missing key file
    is created (0600) with a new random key."""
    env, path = encryption_key_source()
    if env:
        return Key(parse_key(env, "MEMCLI_KEY"), "MEMCLI_KEY")
    raw = read_key_file(path)
    if raw is None and create:
        try:
            write_key_file(path, new_key())
        except FileExistsError:
            pass  # another process created it first: use theirs
        raw = read_key_file(path)
        if raw is None:
            raise EncryptionError(f"cannot create the key file {path}",
                                  "set MEMCLI_KEY_FILE to a writable place, or MEMCLI_KEY")
    return Key(raw, str(path)) if raw is not None else None


def key_file_path() -> Path:
    return encryption_key_source()[1]


class Sealer:
    """Per connection: the key (loaded on first need), the row tracer, the no-key notice."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._key: Key | None = None
        self._loaded = False
        self.skipped = 0
        self.notice: Callable[[str], None] | None = None  # the CLI sets its stderr warning
        # A file without memcli's tables (doctor reads one to say so) has no key id either.
        self._installed = False
        self._data_version: int | None = None
        has_meta = "meta" in db.backend.table_names(db)
        if has_meta and db.get_meta(META_KEY_ID) is not None:
            self.install()
        elif has_meta:
            self._data_version = db.backend.data_version(db)

    def install(self) -> None:
        self.db.backend.install_decryption(self.db, self._trace)
        self._installed = True

    def refresh(self) -> None:
        """For a connection kept open across requests (a server's): install the tracer once
        another connection has made the database's first `high` write, which it could not
        see when it opened (it would read `enc:v1:` strings). Cheap: `data_version` changes
        only when another connection commits."""
        if self._installed or self._data_version is None:
            return
        version = self.db.backend.data_version(self.db)
        if version != self._data_version:
            self._data_version = version
            if self.db.get_meta(META_KEY_ID) is not None:
                self.install()

    def key(self, create: bool = False) -> Key | None:
        if not self._loaded or (self._key is None and create):
            self._key = load_key(create)
            self._loaded = True
            if self._key is not None:
                self.check(self._key)
        return self._key

    def use(self, key: Key) -> None:
        """Read and write with `key` from now on (after a rotation)."""
        self._key, self._loaded = key, True

    def check(self, key: Key) -> None:
        """A one-line error when `key` is not the key this database was sealed with."""
        stored = self.db.get_meta(META_KEY_ID)
        if stored is not None and stored != key.id:
            _pending_rotation(stored)
            raise EncryptionError(
                f"the encryption key from {key.source} (id {key.id}) is not this database's "
                f"key (id {stored})",
                "set MEMCLI_KEY or MEMCLI_KEY_FILE to the right key; memcli key status")

    def seal(self, text: str) -> str:
        """`text` encrypted under the database's key (created on first use)."""
        key = self.key(create=True)
        if key is None:  # pragma: no cover - load_key(create=True) raises instead
            raise EncryptionError("no encryption key", "set MEMCLI_KEY or MEMCLI_KEY_FILE")
        if self.db.get_meta(META_KEY_ID) is None:
            # Inside the writer's transaction: if it rolls back, so does this.
            self.db.set_meta(META_KEY_ID, key.id)
            self.install()
        return key.encrypt(text)

    def _trace(self, row: tuple) -> tuple | None:
        for value in row:
            if value.__class__ is str and value.startswith(PREFIX):
                break
        else:
            return row
        key = self.key()
        if key is None:
            self.skipped += 1
            if self.skipped == 1 and self.notice is not None:
                self.notice(NO_KEY_NOTICE)
            return None
        return tuple(key.decrypt(v) if is_encrypted(v) else v for v in row)


def _pending_rotation(stored: str) -> None:
    """A rotation that committed but stopped before swapping the key files leaves the
    database's new key in `key.new`: say so instead of a bare mismatch."""
    pending = key_file_path().with_name(key_file_path().name + ".new")
    try:
        raw = read_key_file(pending)
    except (EncryptionError, UsageError):
        return
    if raw is not None and key_id(raw) == stored:
        raise EncryptionError(f"a key rotation stopped half-way: {pending} holds this "
                              f"database's key (id {stored})",
                              f"move it to {key_file_path()}")


# -- write helpers the store modules call ------------------------------------------------------
def seal_if(db: Database, high: bool, text: str) -> str:
    return db.crypto.seal(text) if high else text


def seal_json_if(db: Database, high: bool, value: Any) -> str:
    return seal_if(db, high, json.dumps(value, ensure_ascii=False))


def high_memory_ids(db: Database, ids: list[int | None] | list[int]) -> set[int]:
    """Which of these memories are `high` (their texts elsewhere must be sealed too)."""
    known = [i for i in ids if i is not None]
    found: set[int] = set()
    for part in chunks(known, 1000):  # a whole ingest's ids: below any parameter limit
        found.update(int(r[0]) for r in db.execute(
            f"SELECT id FROM memories WHERE id IN ({marks(part)}) AND sensitivity = 'high'",
            tuple(part)))
    return found


def session_has_high(db: Database, tenant_id: str, session_id: str) -> bool:
    return db.scalar(
        "SELECT 1 FROM memories WHERE tenant_id = ? AND session_id = ? AND sensitivity = 'high'"
        " LIMIT 1", (tenant_id, session_id)) is not None


# -- key status and rotation ---------------------------------------------------------------------
def sealed_values(db: Database) -> dict[str, list[str]]:
    """`table.column` -> its stored `enc:v1:` values (as stored: not the tracer's view), the
    same columns on both engines (a `high` artifact body included: text in SQLite's BLOB
    column, UTF-8 in PostgreSQL's bytea)."""
    return db.backend.sealed_values(db, PREFIX)


def status(db: Database, key: Key | None) -> dict[str, Any]:
    values = sealed_values(db)
    total = sum(len(v) for v in values.values())
    failed = 0
    if key is not None:
        for items in values.values():
            for value in items:
                try:
                    key.decrypt(value)
                except EncryptionError:
                    failed += 1
    return {
        "database_key_id": db.get_meta(META_KEY_ID),
        "encrypted_values": total,
        "by_column": {k: len(v) for k, v in sorted(values.items())},
        "decrypt_failures": failed if key is not None else None,
        "all_decrypt": (failed == 0) if key is not None else None,
    }


def reseal_all(db: Database, old: Key, new: Key) -> int:
    """Re-encrypt every sealed value from `old` to `new` and record the new key id, in the
    caller's transaction. The events table refuses UPDATE (append-only): its trigger is
    dropped and re-created inside the same transaction."""
    done = 0

    def reseal(*values: Any) -> Any:
        nonlocal done
        value = values[0]
        if not is_encrypted(value):
            return value
        done += 1
        return new.encrypt(old.decrypt(value))

    db.backend.reseal(db, reseal, PREFIX)
    db.set_meta(META_KEY_ID, new.id)
    return done
