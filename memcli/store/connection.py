"""The `Database` every store module is written against, and the waits it uses.

A `Database` (today SQLite's, memcli.store.sqlite.connection) offers execute/query/scalar/
insert/change_count/stream, transaction/savepoint, get_meta/set_meta, and carries `backend`
(memcli.store.backend) and `dialect` (memcli.store.dialect). Opened by
memcli.store.location.open_database; this module keeps the long-standing import path.
"""

from __future__ import annotations

from memcli.store.location import BUSY_TIMEOUT, HINT_WAIT
from memcli.store.sqlite.connection import Database

__all__ = ["BUSY_TIMEOUT", "HINT_WAIT", "Database"]
