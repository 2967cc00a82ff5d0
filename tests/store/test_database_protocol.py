"""`memcli.store.connection.Database` is the surface both engines' Database classes share:
every store module is typed against it, so an open database of either engine
must offer each of its members (mypy checks the signatures; this checks them at run time)."""

from __future__ import annotations

import inspect

from memcli.store import connection
from memcli.store.opener import open_database


def _members() -> set[str]:
    names = set(connection.Database.__annotations__)
    names |= {n for n, v in vars(connection.Database).items()
              if not n.startswith("_") and (inspect.isfunction(v) or isinstance(v, property))}
    return names


def test_both_engines_offer_the_protocol(tmp_path, pg_memcli_db: str) -> None:
    members = _members()
    assert {"execute", "query", "stream", "scalar", "insert", "change_count", "transaction",
            "savepoint", "get_meta", "set_meta", "backend", "dialect", "crypto",
            "in_transaction", "close"} <= members
    for location in (str(tmp_path / "m.db"), pg_memcli_db):
        db = open_database(location)
        try:
            missing = sorted(n for n in members if not hasattr(db, n))
            assert missing == [], (db.backend.name, missing)
            assert "conn" not in members  # an engine's own connection stays in its package
            for name in ("execute", "query", "transaction"):
                shared = inspect.signature(getattr(connection.Database, name))
                own = inspect.signature(getattr(type(db), name))
                assert list(own.parameters) == list(shared.parameters), (db.backend.name, name)
        finally:
            db.close()
