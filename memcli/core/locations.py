"""Where a database lives: a file path (SQLite), a `postgresql://` / `postgres://` URL or a libpq
keyword connection string (PostgreSQL); any other URL is refused (see memcli/store/opener.py,
which opens them). Here, apart from the store, because config.py checks a location it resolves
and config imports nothing of the store."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from memcli.errors import UsageError

# `scheme:/` rather than `scheme://`: a --db value arrives as a Path, which folds `//` into `/`.
# Two letters at least, so a Windows drive (`C:/data`) stays a path. `file:` is SQLite's own URI
# form (memcli opens paths literally, so it would also become a folder named `file:`).
_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]+:/|file:)", re.IGNORECASE)
_POSTGRES = re.compile(r"^postgres(?:ql)?:/", re.IGNORECASE)
_FOLDED = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")
_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:/+[^/@:]*):[^/@]*@")
_POSTGRES_FOLDED = re.compile(r"^(postgres(?:ql)?):/(?!/)", re.IGNORECASE)


# A libpq keyword/value connection string (`host=127.0.0.1 dbname=memory user=agent`): nothing
# but `key=value` words, one of them a libpq connection keyword.
_DSN = re.compile(r"^\s*(?:[A-Za-z_]+\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']+)\s*)+$")
_DSN_KEY = re.compile(r"(?:^|\s)(?:host|hostaddr|port|dbname|user|password|passfile|service|"
                      r"sslmode|connect_timeout|application_name)\s*=", re.IGNORECASE)
_DSN_PASSWORD = re.compile(r"(password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def is_url(location: str | Path) -> bool:
    return bool(_URL.match(str(location)))


def is_dsn(location: str | Path) -> bool:
    text = str(location)
    return bool(_DSN.match(text) and _DSN_KEY.search(text))


def _shown(location: str) -> str:
    """The URL as the user typed it (the `//` a Path folded restored), its password masked."""
    if not location.lower().startswith("file:"):
        location = _FOLDED.sub(r"\1://", location)
    return _PASSWORD.sub(r"\1:***@", location)


def shown(location: str | os.PathLike[str]) -> str:
    """A location as messages and reports show it: a URL's or libpq string's password masked
    (a file path as it is)."""
    text = os.fspath(location)
    if is_url(text):
        return _shown(text)
    return _DSN_PASSWORD.sub(r"\1***", text.strip()) if is_dsn(text) else text


def is_postgres(location: str | Path) -> bool:
    """A PostgreSQL location: a postgresql:// or postgres:// URL (its `//` maybe folded by a
    Path) or a libpq keyword connection string."""
    text = str(location)
    return bool(_POSTGRES.match(text)) or is_dsn(text)


def server_location(location: str) -> str:
    """A PostgreSQL location as libpq takes it: as given (`refuse_url` refused a folded one)."""
    refuse_url(location, "database")
    return location


def refuse_url(location: str | Path, source: str = "--db", *, postgres: bool = True) -> None:
    """A usage error (exit 2) when `location` is a URL memcli cannot open (`postgres`: whether
    a PostgreSQL location is one it can); `source` says where it came from."""
    if postgres and is_postgres(location):
        folded = _POSTGRES_FOLDED.match(str(location))
        if folded:
            shown = _PASSWORD.sub(r"\1:***@", str(location))
            raise UsageError(
                f"{source} {shown} has lost the `//` after "
                f"`{folded.group(1)}:` (a Path folds it), so its host cannot be told from its "
                "database", "give the URL as a string: postgresql://host/db, or "
                "postgresql:///db for the local socket")
        return
    if is_url(location):
        raise UsageError(f"{source} {_shown(str(location))} is a URL memcli cannot open",
                         "give a file path (SQLite) or a postgresql:// URL (PostgreSQL)")
    if is_dsn(location):
        shown = _DSN_PASSWORD.sub(r"\1***", str(location).strip())
        raise UsageError(f"{source} {shown!r} is a PostgreSQL connection string, not a file",
                         "open it through memcli.store.opener.open_database")


# `password=...` as one word of a libpq keyword string, with the space before it.
_DSN_PASSWORD_WORD = re.compile(r"(?:^|\s+)password\s*=\s*(?:'(?:[^'\\]|\\.)*'|\S+)",
                                re.IGNORECASE)


def without_password(location: str) -> str | None:
    """A PostgreSQL location with the password it carries taken out, or None when it carries
    none: the password of a URL's user part or its `password` parameter, or a keyword
    string's `password=`. For where a location is written down for others to read (a client's
    config file); libpq then finds the password itself (~/.pgpass, PGPASSFILE, a service
    file)."""
    if is_dsn(location):
        if not _DSN_PASSWORD_WORD.search(location):
            return None
        return _DSN_PASSWORD_WORD.sub("", location).strip()
    if not is_postgres(location):
        return None
    parts = urlsplit(location)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    pieces = [p for p in parts.query.split("&") if p]
    kept = [p for p in pieces if unquote(p.partition("=")[0]) != "password"]
    if not (at and password) and len(kept) == len(pieces):
        return None
    # Put back together by hand: urlunsplit drops the `//` of an empty host (`postgresql:///db`).
    netloc = f"{user}@{hosts}" if user else hosts
    query = "?" + "&".join(kept) if kept else ""
    fragment = "#" + parts.fragment if parts.fragment else ""
    return f"{parts.scheme}://{netloc}{parts.path}{query}{fragment}"
