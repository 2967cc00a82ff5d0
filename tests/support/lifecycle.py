"""Helpers for the lifecycle tests (consolidate, decay, reflect, proposals); not a test module.

The model is always the scripted HTTP stub (tests/support/llmstub.py) spoken to by the real `openai`
client; these helpers only build conversations, scripted replies and database snapshots.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memcli.config import LifecycleSettings, LLMSettings
from memcli.derived.llm_usage import Model
from memcli.lifecycle.proposals import accept, propose
from tests.support import backend

# Tables a lifecycle step may change; `snapshot` compares them before and after.
CONTENT_TABLES = (
    "memories",
    "history",
    "relations",
    "sessions",
    "proposals",
    "change_log",
    "memory_entities",
    "memory_vectors",
)


def conversation(
    session: str,
    texts: list[str],
    *,
    user: str = "priya",
    day: int = 1,
    speaker: str = "Priya",
    **extra: Any,
) -> list[dict[str, Any]]:
    """Records for one session, a turn a minute on 2025-01-<day>, stable event ids."""
    return [
        {
            "event_id": f"{session}-{i}",
            "session_id": session,
            "user_id": user,
            "ts": f"2025-01-{day:02d}T10:{i:02d}:00Z",
            "content": {"text": text},
            "actor": {"type": "human", "id": speaker},
            **extra,
        }
        for i, text in enumerate(texts)
    ]


def one_a_day(*texts: str) -> list[dict[str, Any]]:
    """Sessions s1, s2, ..., one a day from 2025-01-01, one turn of Priya's each: all but the
    last are finished (a later session began), so consolidate runs on them."""
    return [record for day, text in enumerate(texts, 1)
            for record in conversation(f"s{day}", [text], day=day)]


def propose_field(memory: Any, field: str, value: str, text: str, **options: Any
                  ) -> dict[str, Any]:
    """A change of Priya's profile `field` proposed in a transaction of its own; the
    proposal's answer."""
    with memory.db.transaction():
        return propose(memory.db, tenant_id="default", user_id="priya", field=field,
                       value=value, text=text, **options)


def propose_city(memory: Any, value: str, text: str | None = None) -> dict[str, Any]:
    """Priya's city `value` proposed; the proposal's answer."""
    return propose_field(memory, "city", value, text or f"Priya lives in {value}.")


def accept_city(memory: Any, value: str) -> dict[str, Any]:
    """Priya's city `value` proposed and accepted: her profile holds it (a fact)."""
    prop = propose_city(memory, value)
    accept(memory, prop["proposal_id"])
    return prop


def extraction(
    summary: str = "Priya talked about her life.",
    *,
    facts: list | None = None,
    preferences: list | None = None,
    decisions: list | None = None,
    todos: list | None = None,
    profile: list | None = None,
    entities: list | None = None,
) -> dict[str, Any]:
    """An extraction reply; plain strings become items citing turn 1."""

    def items(values: list | None) -> list[dict[str, Any]]:
        return [
            {"text": v, "turns": [1], "importance": 0.6} if isinstance(v, str) else v
            for v in values or []
        ]

    return {
        "summary": summary,
        "facts": items(facts),
        "preferences": items(preferences),
        "decisions": items(decisions),
        "todos": items(todos),
        "entities": entities or [],
        "profile": profile or [],
    }


def verdicts(*answers: str) -> dict[str, Any]:
    return {"verdicts": [{"pair": i, "verdict": a} for i, a in enumerate(answers, start=1)]}


def model_for(memory: Any, stub: Any, command: str = "consolidate", **llm: Any) -> Model:
    settings = LLMSettings(base_url=stub.base_url, model="stub-model", max_retries=0, **llm)
    return Model(memory.db, settings, command)


def settings(**overrides: Any) -> LifecycleSettings:
    return LifecycleSettings(**overrides)


def rows(db_path: Path | str, sql: str, params: tuple = ()) -> list[tuple]:
    """Read with a connection of the test's own (not through memcli), on either engine."""
    return backend.rows(db_path, sql, params)


def snapshot(db_path: Path | str, tables: tuple[str, ...] = CONTENT_TABLES) -> dict[str, list]:
    """Every row of `tables`, sorted in Python (PostgreSQL has no rowid order for ties)."""
    return {t: sorted(rows(db_path, f"SELECT * FROM {t}"), key=repr) for t in tables}


def memory_rows(db_path: Path | str, where: str = "1 = 1",
                params: tuple = ()) -> list[dict[str, Any]]:
    """The memories matching `where` as dicts (attributes and source_ids decoded), by id."""
    if backend.is_pg(db_path):
        names = [n for (n,) in rows(db_path, "SELECT column_name FROM information_schema.columns"
                                             " WHERE table_schema = current_schema()"
                                             " AND table_name = 'memories'"
                                             " ORDER BY ordinal_position")]
    else:
        names = [r[1] for r in rows(db_path, "PRAGMA table_info(memories)")]
    found = rows(db_path, f"SELECT * FROM memories WHERE {where} ORDER BY id", params)
    out = [dict(zip(names, r, strict=True)) for r in found]
    for r in out:
        r["attributes"] = json.loads(r["attributes"])
        r["source_ids"] = json.loads(r["source_ids"])
    return out


def writer_lock_free(location: Path | str) -> bool:
    """Whether another connection could take memcli's write lock right now, without waiting:
    SQLite's `BEGIN IMMEDIATE`; PostgreSQL's writer advisory lock (connection.WRITER_KEY)."""
    if backend.is_pg(location):
        import psycopg

        from memcli.store.postgres.connection import WRITER_KEY

        with psycopg.connect(str(location)) as conn:  # a transaction: the lock is xact-scoped
            free = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (WRITER_KEY,))
            taken = bool(free.fetchone()[0])
            conn.rollback()
            return taken
    import apsw

    other = apsw.Connection(str(location))
    other.setbusytimeout(0)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except apsw.BusyError:
        return False
    finally:
        other.close()


@contextlib.contextmanager
def run_lock_held(location: Path | str, command: str) -> Iterator[None]:
    """Another live process holds `memcli <command>`'s run lock for the block; when the block
    ends the holder dies without releasing it (its `run_locks` row stays behind). SQLite: the
    row names this live process, then a pid that has exited; PostgreSQL: the row plus the
    session advisory lock of a connection of the test's own, then that connection closes."""
    insert = "INSERT INTO run_locks VALUES (?, 'x', ?, ?, '2025', '9999')"
    conn = backend.connect(location)
    try:
        conn.execute(insert, (command, socket.gethostname(), os.getpid()))
        if backend.is_pg(location):
            conn.execute("SELECT pg_advisory_lock(hashtext(?))", (f"memcli.run.{command}",))
        yield
        if not backend.is_pg(location):
            gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                                  capture_output=True, text=True, check=True)
            conn.execute("UPDATE run_locks SET pid = ?", (int(gone.stdout),))
    finally:
        conn.close()
