"""SQL for request metrics: one row per query or context build."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.core.records import utcnow

if TYPE_CHECKING:
    from memcli.store.connection import Database

COLUMNS = ("command", "tenant_id", "user_id", "session_id", "lexical_hits", "sparse_hits",
           "vector_hits", "entity_hits", "retrieval_path", "fallbacks", "items", "tokens_used",
           "truncated", "latency_ms", "error_stage")


def record_request(db: Database, row: dict[str, Any]) -> None:
    values = [row.get(c) for c in COLUMNS]
    db.execute(
        f"INSERT INTO request_metrics (ts, {', '.join(COLUMNS)}) VALUES "
        f"(?, {', '.join('?' * len(COLUMNS))})",
        [utcnow(), *[0 if v is None and c.endswith(("hits", "fallbacks", "items", "tokens_used",
                                                       "truncated", "latency_ms")) else v
                     for c, v in zip(COLUMNS, values, strict=True)]],
    )
