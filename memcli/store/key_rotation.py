"""`memcli key status` and `memcli key rotate`: the encryption key of `high` content.

Rotation: a new key is written beside the key file first (`key.new`, 0600), every sealed value
is re-encrypted under it and the database's key id replaced in one transaction, then the old
key file is renamed to `key.old-<id>` (a backup the user deletes once they trust the new key)
and `key.new` renamed over `key`. A crash before the commit leaves the database on the old key
(and a stray `key.new`); a crash after it leaves the new key in `key.new`, which `key status`
points at.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from memcli.errors import UsageError
from memcli.policy.encryption import Key, new_key, write_key_file
from memcli.store import sealing
from memcli.store.postgres.tenant_roles import refuse_bound

if TYPE_CHECKING:
    from memcli.store.connection import Database


def status(db: Database) -> dict[str, Any]:
    """Where the key comes from, its id, how many values are encrypted and whether they all
    decrypt with it."""
    path = sealing.key_file_path()
    key = sealing.load_key(create=False)
    out: dict[str, Any] = {
        "source": key.source if key is not None else None,
        "key_file": str(path),
        "key_file_exists": path.exists(),
        "key_id": key.id if key is not None else None,
    }
    out.update(sealing.status(db, key))
    out["key_matches"] = (None if key is None or out["database_key_id"] is None
                          else key.id == out["database_key_id"])
    pending = path.with_name(path.name + ".new")
    if pending.exists():
        out["pending_key_file"] = str(pending)
    return out


def rotate(db: Database) -> dict[str, Any]:
    refuse_bound(db, "key rotate")
    old = sealing.load_key(create=False)
    if old is None:
        raise UsageError("there is no encryption key to rotate",
                         "a key is created when the first `high` item is stored")
    if old.source == "MEMCLI_KEY":
        raise UsageError("the key comes from MEMCLI_KEY: rotation replaces a key file",
                         "put the key in a file and point MEMCLI_KEY_FILE at it, or unset "
                         "MEMCLI_KEY")
    stored = db.get_meta(sealing.META_KEY_ID)
    if stored is not None and stored != old.id:
        db.crypto.check(old)  # the one-line wrong-key error
    path = sealing.key_file_path()
    pending = path.with_name(path.name + ".new")
    new = Key(new_key(), str(path))
    write_key_file(pending, new.raw, replace=True)
    try:
        with db.transaction():
            count = sealing.reseal_all(db, old, new)
    except BaseException:
        pending.unlink(missing_ok=True)
        raise
    backup = path.with_name(f"{path.name}.old-{old.id}")
    os.replace(path, backup)
    os.replace(pending, path)
    db.crypto.use(new)
    return {"old_key_id": old.id, "new_key_id": new.id, "reencrypted": count,
            "key_file": str(path), "backup": str(backup)}
