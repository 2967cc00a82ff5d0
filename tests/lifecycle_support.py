"""Helpers for the lifecycle tests (consolidate, decay, reflect, proposals); not a test module.

The model is always the scripted HTTP stub (tests/llmstub.py) spoken to by the real `openai`
client; these helpers only build conversations, scripted replies and database snapshots.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw

from memcli.config import LifecycleSettings, LLMSettings
from memcli.lifecycle.llm_usage import Model

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


def rows(db_path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Read with a connection of the test's own (not through memcli)."""
    conn = apsw.Connection(str(db_path))
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def snapshot(db_path: Path, tables: tuple[str, ...] = CONTENT_TABLES) -> dict[str, list]:
    conn = apsw.Connection(str(db_path))
    try:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables}
    finally:
        conn.close()


def memory_rows(db_path: Path, where: str = "1", params: tuple = ()) -> list[dict[str, Any]]:
    conn = apsw.Connection(str(db_path))
    try:
        names = [r[1] for r in conn.execute("PRAGMA table_info(memories)")]
        out = [
            dict(zip(names, r, strict=True))
            for r in conn.execute(f"SELECT * FROM memories WHERE {where} ORDER BY id", params)
        ]
    finally:
        conn.close()
    for r in out:
        r["attributes"] = json.loads(r["attributes"])
        r["source_ids"] = json.loads(r["source_ids"])
    return out
