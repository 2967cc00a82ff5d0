"""Where a database lives. Today only a SQLite file path: a URL is refused, never a path.

`postgresql://user@host/db` given as a path would make a folder `postgresql:` and a SQLite file
inside it, and every later command would "work" against that file. Until a backend reads URLs
(issue #16, PostgreSQL), any location that looks like one stops the command before anything is
created. Checked where the location is resolved (memcli.config.load_settings, for --db,
MEMCLI_DB and the config file) and again where it is opened (Database), for library callers.
"""

from __future__ import annotations

import re
from pathlib import Path

from memcli.errors import UsageError

# `scheme:/` rather than `scheme://`: a --db value arrives as a Path, which folds `//` into `/`.
# Two letters at least, so a Windows drive (`C:/data`) stays a path. `file:` is SQLite's own URI
# form (memcli opens paths literally, so it would also become a folder named `file:`).
_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]+:/|file:)", re.IGNORECASE)
_FOLDED = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")
_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/@:]*):[^/@]*@")


def is_url(location: str | Path) -> bool:
    return bool(_URL.match(str(location)))


def _shown(location: str) -> str:
    """The URL as the user typed it (the `//` a Path folded restored), its password masked."""
    if not location.lower().startswith("file:"):
        location = _FOLDED.sub(r"\1://", location)
    return _PASSWORD.sub(r"\1:***@", location)


def refuse_url(location: str | Path, source: str = "--db") -> None:
    """A usage error (exit 2) when `location` is a URL; `source` says where it came from."""
    if is_url(location):
        raise UsageError(f"{source} {_shown(str(location))} is a URL; the PostgreSQL backend "
                         "is not built yet", "issue #16; give a file path for SQLite")
