"""SQL for `memcli export` / `memcli import` (memcli/portable/): scoped raw reads, natural-key
look-ups, and inserts of rows exactly as they were at rest.

Reads bypass the connection's decrypting row tracer (memcli/store/sealing.py): an export
carries a `high` value as the ciphertext it is at rest, never its plain text. Every read is
filtered in SQL by the export scope (tenant unless all tenants, then user, app, session), so a
row of another tenant never reaches the exporter.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memcli.store.batching import chunks, marks
from memcli.store.orphans import lacking

if TYPE_CHECKING:
    from memcli.store.connection import Database

_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class Scope:
    """What an export covers. `tenant_id` None: every tenant (an explicit --all-tenants)."""

    tenant_id: str | None
    user_id: str | None = None
    app_id: str | None = None
    session_id: str | None = None

    def where(self, alias: str, columns: tuple[str, ...] = ("tenant_id", "user_id", "app_id",
                                                             "session_id")) -> tuple[str, list]:
        parts, params = ["1 = 1"], []
        for column in columns:
            value = getattr(self, column)
            if value is not None:
                parts.append(f"{alias}.{column} = ?")
                params.append(value)
        return " AND ".join(parts), params


def _raw(db: Database, sql: str, params: list | tuple = ()) -> Iterator[dict[str, Any]]:
    """Rows as stored (ciphertext stays ciphertext), as dicts."""
    return db.stream(sql, tuple(params), raw=True)


def _cols(fields: list[str], alias: str) -> str:
    for name in fields:
        if not _NAME.match(name):  # column names come from the format's spec, never from input
            raise ValueError(f"bad column name {name!r}")
    return ", ".join(f"{alias}.{f}" for f in fields)


# -- export reads ---------------------------------------------------------------------------------
@contextlib.contextmanager
def snapshot(db: Database) -> Iterator[None]:
    """One read transaction around the whole export: every query sees the same committed
    state (a writer committing meanwhile cannot leave a memory without its event), and no
    write lock is taken. Inside a caller's transaction, that one is the snapshot."""
    if db.in_transaction:
        yield
        return
    db.execute("BEGIN")
    try:
        yield
    finally:
        db.execute("ROLLBACK")


def has_high(db: Database, scope: Scope) -> bool:
    for table, columns in (("events", None), ("memories", None),
                           ("checkpoints", ("tenant_id", "user_id"))):
        where, params = scope.where("t", columns) if columns else scope.where("t")
        if db.scalar(f"SELECT 1 FROM {table} t WHERE {where} AND t.sensitivity = 'high' LIMIT 1",
                     tuple(params)):
            return True
    return False


def events(db: Database, scope: Scope, fields: list[str]) -> Iterator[dict[str, Any]]:
    where, params = scope.where("e")
    return _raw(db, f"SELECT {_cols(fields, 'e')} FROM events e WHERE {where} ORDER BY e.seq",
                params)


def memories(db: Database, scope: Scope, fields: list[str]) -> Iterator[dict[str, Any]]:
    where, params = scope.where("m")
    return _raw(db, f"SELECT {_cols(fields, 'm')} FROM memories m WHERE {where} ORDER BY m.id",
                params)


def history(db: Database, scope: Scope, fields: list[str]) -> Iterator[dict[str, Any]]:
    """History rows of the memories in scope, by memory then age (rows of purged memories
    have no memory left to attach to, and are not read)."""
    where, params = scope.where("m")
    return _raw(db, f"SELECT h.memory_id AS memory_id_, {_cols(fields, 'h')} FROM history h"
                    f" JOIN memories m ON m.id = h.memory_id WHERE {where}"
                    f" ORDER BY h.memory_id, h.id", params)


def ledger(db: Database, table: str, scope: Scope, fields: list[str]
           ) -> Iterator[dict[str, Any]]:
    """decisions or tasks in scope, by id."""
    assert table in ("decisions", "tasks")
    where, params = scope.where("d")
    return _raw(db, f"SELECT {_cols(fields, 'd')} FROM {table} d WHERE {where} ORDER BY d.id",
                params)


def _by(db: Database, *names: str) -> str:
    """An ORDER BY on text columns, in byte order on either engine (export order is stable)."""
    return ", ".join(db.dialect.binary(name) for name in names)


def checkpoints(db: Database, scope: Scope, fields: list[str]) -> Iterator[dict[str, Any]]:
    """A checkpoint names no session or app: a --session or --app export has none."""
    if scope.session_id is not None or scope.app_id is not None:
        return iter(())
    where, params = scope.where("c", ("tenant_id", "user_id"))
    return _raw(db, f"SELECT {_cols(fields, 'c')} FROM checkpoints c WHERE {where}"
                    f" ORDER BY {_by(db, 'c.tenant_id', 'c.user_id', 'c.thread_id')}", params)


def relations(db: Database, scope: Scope, fields: list[str]) -> Iterator[dict[str, Any]]:
    """Edges whose two ends are both in scope."""
    ws, ps = scope.where("s")
    wd, pd = scope.where("d")
    return _raw(db, f"SELECT {_cols(fields, 'r')} FROM relations r"
                    f" JOIN memories s ON s.id = r.src_id JOIN memories d ON d.id = r.dst_id"
                    f" WHERE {ws} AND {wd} ORDER BY r.src_id, r.dst_id, {_by(db, 'r.kind')}",
                ps + pd)


def proposals(db: Database, scope: Scope, fields: list[str]) -> Iterator[dict[str, Any]]:
    """A proposal names no app: an --app export has none."""
    if scope.app_id is not None:
        return iter(())
    where, params = scope.where("p", ("tenant_id", "user_id", "session_id"))
    return _raw(db, f"SELECT {_cols(fields, 'p')} FROM proposals p WHERE {where}"
                    f" ORDER BY p.id", params)


def artifacts(db: Database, scope: Scope, fields: list[str]) -> Iterator[dict[str, Any]]:
    where, params = scope.where("e")
    return _raw(db, f"SELECT {_cols(fields, 'a')} FROM artifacts a"
                    f" JOIN events e ON e.event_id = a.event_id WHERE {where}"
                    f" ORDER BY {_by(db, 'a.artifact_id')}", params)


def _session_filter(scope: Scope, alias: str) -> tuple[str, list]:
    where, params = scope.where(alias, ("tenant_id", "user_id", "session_id"))
    if scope.app_id is not None:  # sessions have no app: the ones with an event of the app
        ew, ep = scope.where("e")
        where += (f" AND {alias}.session_id IN (SELECT e.session_id FROM events e"
                  f" WHERE {ew} AND e.tenant_id = {alias}.tenant_id)")
        params = params + ep
    return where, params


def sessions(db: Database, scope: Scope, fields: list[str]) -> Iterator[dict[str, Any]]:
    where, params = _session_filter(scope, "s")
    return _raw(db, f"SELECT {_cols(fields, 's')} FROM sessions s WHERE {where}"
                    f" ORDER BY {_by(db, 's.tenant_id', 's.session_id')}", params)


def consolidations(db: Database, scope: Scope, fields: list[str]) -> Iterator[dict[str, Any]]:
    """Consolidation progress per session; the last consolidated event by id, not by seq."""
    where, params = _session_filter(scope, "s")
    rest = [f for f in fields if f != "last_event_id"]
    return _raw(db, f"SELECT {_cols(rest, 'c')}, (SELECT e.event_id FROM events e"
                    f" WHERE e.tenant_id = c.tenant_id AND e.session_id = c.session_id"
                    f" AND e.seq <= c.last_seq ORDER BY e.seq DESC LIMIT 1) AS last_event_id"
                    f" FROM session_consolidation c JOIN sessions s"
                    f" ON s.tenant_id = c.tenant_id AND s.session_id = c.session_id"
                    f" WHERE {where} ORDER BY {_by(db, 'c.tenant_id', 'c.session_id')}", params)


# -- import look-ups ------------------------------------------------------------------------------
def event_seq(db: Database, event_id: str | None) -> int | None:
    if event_id is None:
        return None
    return db.scalar("SELECT seq FROM events WHERE event_id = ?", (event_id,))


def episode_id(db: Database, event_id: str, chunk_index: int, kind: str) -> int | None:
    """The stored memory cut from this chunk of this event."""
    return db.scalar("SELECT id FROM memories WHERE event_id = ? AND chunk_index = ?"
                     " AND kind = ? LIMIT 1", (event_id, chunk_index, kind))


def derived_memory_keys(db: Database) -> dict[tuple[str, str, str, str], int]:
    """(tenant, kind, created_at, content as stored) -> id of every memory not cut from an
    event (facts, summaries, decisions ...): what identifies one across databases."""
    return {(r["tenant_id"], r["kind"], r["created_at"], r["content"]): r["id"] for r in _raw(
        db, "SELECT id, tenant_id, kind, created_at, content FROM memories"
            " WHERE event_id IS NULL ORDER BY id DESC")}


def ledger_by_key(db: Database, table: str, row: dict[str, Any], text_field: str) -> int | None:
    """The stored decision or task that is this one: the one over the same memory, or (with
    no memory) the same tenant, creation time and text."""
    assert table in ("decisions", "tasks") and text_field in ("decision", "title")
    if row["memory_id"] is not None:
        return db.scalar(f"SELECT id FROM {table} WHERE memory_id = ? LIMIT 1",
                         (row["memory_id"],))
    return db.scalar(f"SELECT id FROM {table} WHERE tenant_id = ? AND created_at = ?"
                     f" AND {text_field} = ? LIMIT 1",
                     (row["tenant_id"], row["created_at"], row[text_field]))


def proposal_by_key(db: Database, row: dict[str, Any]) -> int | None:
    return db.scalar("SELECT id FROM proposals WHERE tenant_id = ? AND user_id IS NOT DISTINCT"
                     " FROM ?"
                     " AND field = ? AND created_at = ? AND value = ? LIMIT 1",
                     (row["tenant_id"], row["user_id"], row["field"], row["created_at"],
                      row["value"]))


def exists(db: Database, table: str, key: dict[str, Any]) -> bool:
    """A row of `table` with these key column values (checkpoints, sessions, artifacts ...)."""
    assert table in ("checkpoints", "sessions", "session_consolidation", "artifacts",
                     "relations")
    where = " AND ".join(f"{k} = ?" for k in key if _NAME.match(k))
    return db.scalar(f"SELECT 1 FROM {table} WHERE {where} LIMIT 1",
                     tuple(key.values())) is not None


def taken_ids(db: Database, table: str, ids: list[int]) -> set[int]:
    assert table in ("memories", "decisions", "tasks", "proposals")
    taken: set[int] = set()
    for part in chunks(ids, 500):
        taken.update(r[0] for r in db.execute(
            f"SELECT id FROM {table} WHERE id IN ({marks(part)})", tuple(part)))
    return taken


def max_id(db: Database, table: str) -> int:
    assert table in ("memories", "decisions", "tasks", "proposals")
    return int(db.scalar(f"SELECT coalesce(max(id), 0) FROM {table}"))


# -- import writes --------------------------------------------------------------------------------
def defer_foreign_keys(db: Database) -> None:
    """Foreign keys checked at commit (a decision may cite one written after it); the pragma
    ends with the transaction."""
    db.backend.defer_foreign_keys(db)


def insert_row(db: Database, table: str, row: dict[str, Any]) -> None:
    """One row as given (values as at rest)."""
    assert table in ("events", "memories", "history", "decisions", "tasks", "checkpoints",
                     "relations", "proposals", "artifacts", "sessions", "session_consolidation")
    names = list(row)
    _cols(names, table)  # checks the names
    db.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
               tuple(row.values()))


def index_lexical(db: Database, ids: list[int]) -> None:
    """Full-text and trigram rows for these memories, as ingest writes them."""
    db.backend.index_memories(db, ids)


def unembedded_forgotten(db: Database, ids: list[int]) -> list[tuple[int, str]]:
    """(id, text) of these memories that are soft-deleted and have no vector: `memcli embed`
    skips them, but the database they came from had theirs (a restore brings them back).
    Read through the row tracer: a `high` text is embedded from its plain text (or skipped
    without the key)."""
    out: list[tuple[int, str]] = []
    for part in chunks(ids, 500):
        in_list = marks(part)
        out.extend((r[0], r[1]) for r in db.execute(
            f"SELECT id, content FROM memories WHERE id IN ({in_list}) AND state = 'soft_deleted'"
            f" AND {lacking('memories.id', 'memory_vectors', 'memory_id')}"
            f" ORDER BY id", tuple(part)))
    return out
