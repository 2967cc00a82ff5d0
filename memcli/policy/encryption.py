"""Encryption at rest for `high` sensitivity text: AES-256-GCM from `cryptography`, one key.

A stored value is `enc:v1:<key id>:<base64(nonce + ciphertext + tag)>`: the version says how
to read it, the key id which key made it (so a wrong key is reported as such instead of
failing as a damaged value), and the 96-bit nonce is random per value. The associated data is
the format tag and the key id; it does not bind a value to its row (see memcli/store/sealing.py
for why). The key is 32 random bytes, kept as base64 in an environment variable or in a 0600
key file (memcli/config.py says which); this module only reads and writes the file it is given.

`cryptography` (~30 ms to import) loads on the first encryption or decryption, not at start-up.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memcli.core import private
from memcli.errors import MemcliError, UsageError

PREFIX = "enc:v1:"
KEY_BYTES = 32
NONCE_BYTES = 12


class EncryptionError(MemcliError):
    """The encryption key is missing, unreadable, wrong for this database, or a value is
    damaged: exit 1 with a one-line reason."""


def key_id(key: bytes) -> str:
    """A short public fingerprint of a key (never the key): 12 hex digits of a labelled hash."""
    return hashlib.sha256(b"memcli key id\0" + key).hexdigest()[:12]


def is_encrypted(value: Any) -> bool:
    return type(value) is str and value.startswith(PREFIX)


def envelope_key_id(value: str) -> str:
    return value[len(PREFIX):].split(":", 1)[0]


def parse_key(text: str, where: str) -> bytes:
    """32 bytes from base64 text; a one-line error naming `where` otherwise."""
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise UsageError(f"the encryption key in {where} is not base64 of 32 bytes",
                         "generate one with: head -c 32 /dev/urandom | base64")
    return key


@dataclass(frozen=True)
class Key:
    """A loaded key and where it came from (for `memcli key status` and error messages)."""

    raw: bytes
    source: str  # "env MEMCLI_KEY" or the key file's path

    @functools.cached_property
    def id(self) -> str:
        return key_id(self.raw)

    @functools.cached_property
    def _aead(self):
        # ~30 ms of import, paid on the first sealed value
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: PLC0415

        return AESGCM(self.raw)

    def encrypt(self, text: str) -> str:
        nonce = os.urandom(NONCE_BYTES)
        kid = self.id
        sealed = self._aead.encrypt(nonce, text.encode("utf-8"), _aad(kid))
        return f"{PREFIX}{kid}:{base64.b64encode(nonce + sealed).decode('ascii')}"

    def decrypt(self, value: str) -> str:
        kid, _, body = value[len(PREFIX):].partition(":")
        if kid != self.id:
            raise EncryptionError(
                f"a stored value was encrypted with key {kid}, not with the key in "
                f"{self.source} ({self.id})",
                "set MEMCLI_KEY or MEMCLI_KEY_FILE to the key this database uses")
        from cryptography.exceptions import InvalidTag  # noqa: PLC0415 - only on a wrong key

        try:
            raw = base64.b64decode(body, validate=True)
            plain = self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(kid))
        except (binascii.Error, ValueError, InvalidTag) as exc:
            raise EncryptionError("an encrypted value does not decrypt (damaged file?)",
                            "run memcli key status") from exc
        return plain.decode("utf-8")


def _aad(kid: str) -> bytes:
    return f"memcli enc v1 {kid}".encode("ascii")


def read_key_file(path: Path) -> bytes | None:
    """The key in `path`, or None when there is no such file."""
    try:
        text = path.read_text(encoding="ascii")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise EncryptionError(f"cannot read the key file {path}: {exc}",
                        "check its permissions, or set MEMCLI_KEY") from exc
    return parse_key(text, str(path))


def write_key_file(path: Path, key: bytes, *, replace: bool = False) -> None:
    """Write a key file with mode 0600 (its folder 0700 if created). Without `replace` the
    file must not exist (O_EXCL: two processes creating it at once cannot both win); with
    `replace`, a temporary file is renamed over it atomically."""
    try:
        if not path.parent.is_dir():
            private.make_dirs(path.parent)
        target = path.with_name(path.name + ".tmp") if replace else path
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        if replace and target.exists():
            target.unlink()
        fd = os.open(target, flags, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(base64.b64encode(key).decode("ascii") + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(target, path)
    except FileExistsError:
        if path.parent.is_dir():
            raise  # the key file itself: another process created it first
        raise EncryptionError(f"cannot create the key file {path}: a parent is not a folder",
                              "set MEMCLI_KEY_FILE to a writable place, or MEMCLI_KEY") from None
    except OSError as exc:
        raise EncryptionError(f"cannot create the key file {path}: {exc.strerror or exc}",
                        "set MEMCLI_KEY_FILE to a writable place, or MEMCLI_KEY") from exc


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)  # the OS CSPRNG, as `secrets.token_bytes` uses
