"""SQL for the ground truth: events, artifacts and sessions."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memcli.store.batching import chunks, marks
from memcli.store.sealing import seal_if, seal_json_if

if TYPE_CHECKING:
    from memcli.store.connection import Database


def existing_event(db: Database, event_id: str | None, content_hash: str) -> str | None:
    """The id of an already stored event with this id or content hash (idempotent ingest)."""
    row = db.scalar(
        "SELECT event_id FROM events WHERE event_id = ? OR content_hash = ? LIMIT 1",
        (event_id, content_hash),
    )
    return row


# Keys per lookup statement (two parameters each: well under any engine's parameter limit).
_KEYS_PER_LOOKUP = 400


def contents_by_id(db: Database, event_ids: list[str]) -> dict[str, str]:
    """The stored content (JSON text) of each of these events that exists (an import tells a
    message id reused by another conversation from the message it already holds)."""
    out: dict[str, str] = {}
    for part in chunks(event_ids, _KEYS_PER_LOOKUP * 2):
        out.update(db.execute(f"SELECT event_id, content FROM events WHERE event_id IN"
                              f" ({marks(part)})", list(part)))
    return out


def existing_events(db: Database, keys: list[tuple[str, str]]) -> list[str | None]:
    """For each (event id, content hash): the id of the stored event with that event id, else
    of the one with that content hash, else None (`existing_event` for a whole batch, in one
    statement per 400 keys instead of one per record: ingest's dedup before and under the
    lock). Both columns are unique, so a key matches at most one event by each."""
    by_id: dict[str, str] = {}
    by_hash: dict[str, str] = {}
    for part in chunks(keys, _KEYS_PER_LOOKUP):
        in_list = marks(part)
        for event_id, content_hash in db.execute(
                f"SELECT event_id, content_hash FROM events WHERE event_id IN ({in_list})"
                f" OR content_hash IN ({in_list})",
                [k[0] for k in part] + [k[1] for k in part]):
            by_id[event_id] = event_id
            by_hash[content_hash] = event_id
    return [by_id.get(event_id) or by_hash.get(content_hash) for event_id, content_hash in keys]


EVENT_COLUMNS = ("event_id", "ts", "recorded_at", "tenant_id", "user_id", "agent_id",
                 "session_id", "app_id", "run_id", "channel", "actor_type", "actor_id", "kind",
                 "sensitivity", "tags", "content", "refs", "content_hash", "redactions")
_EVENT_ROWS = 100  # events per INSERT (19 parameters each)


def insert_events(db: Database, rows: list[dict[str, Any]]) -> list[int]:
    """Append events, one multi-row INSERT per 100; returns their sequence numbers in the
    rows' order (those one INSERT each would give). A `high` event's content, tags and refs
    are stored encrypted (they can all carry what was said)."""
    row_marks = "(" + ", ".join("?" * len(EVENT_COLUMNS)) + ")"
    seqs: list[int] = []
    for part in chunks(rows, _EVENT_ROWS):
        values: list[Any] = []
        for row in part:
            high = row.get("sensitivity") == "high"
            stored = {
                **row,
                "tags": seal_json_if(db, high, row["tags"]),
                "content": seal_json_if(db, high, row["content"]),
                "refs": seal_json_if(db, high, row["refs"]),
                "redactions": json.dumps(row["redactions"]),
            }
            values.extend(stored[c] for c in EVENT_COLUMNS)
        # RETURNING's order is not promised; `seq` ascends in VALUES order on both engines
        # (as memories' ids do: memcli.store.memories.insert_memories).
        seqs.extend(sorted(int(r[0]) for r in db.execute(
            f"INSERT INTO events ({', '.join(EVENT_COLUMNS)}) VALUES"
            f" {', '.join([row_marks] * len(part))} RETURNING seq", values)))
    return seqs


def insert_artifact(db: Database, artifact: dict[str, Any]) -> None:
    """Store a tool output; the output of a `high` event (inserted first) is encrypted."""
    high = db.scalar("SELECT sensitivity FROM events WHERE event_id = ?",
                     (artifact["event_id"],)) == "high"
    body = artifact["body"]
    if high:  # sealed text in the BLOB column; get_artifact turns it back into bytes
        body = seal_if(db, True, body.decode("utf-8", errors="surrogateescape"))
        if db.backend.name == "postgresql":  # a bytea column takes no text: its UTF-8 bytes
            body = body.encode("ascii")  # (the backend opens them as text again on read)
    db.execute(
        "INSERT INTO artifacts (artifact_id, event_id, mime, bytes, sha256, body, created_at) "
        "VALUES (:artifact_id, :event_id, :mime, :bytes, :sha256, :body, :created_at)",
        {**artifact, "body": body},
    )


def get_artifact(db: Database, artifact_id: str) -> dict[str, Any] | None:
    rows = db.query("SELECT * FROM artifacts WHERE artifact_id = ?", (artifact_id,))
    if rows and isinstance(rows[0]["body"], str):  # decrypted by the connection's row tracer
        rows[0]["body"] = rows[0]["body"].encode("utf-8", errors="surrogateescape")
    return rows[0] if rows else None


def touch_session(db: Database, tenant_id: str, session_id: str, user_id: str | None,
                  ts: str) -> None:
    touch_sessions(db, [(tenant_id, session_id, user_id, ts, ts, 1)])


def touch_sessions(db: Database, rows: list[tuple]) -> None:
    """(tenant, session, user, first ts, last ts, events) per session, each session once:
    created, or its span widened and its count raised (ingest: one statement per batch)."""
    last = db.dialect.greatest("sessions.last_event_at", "excluded.last_event_at")
    first = db.dialect.least("sessions.started_at", "excluded.started_at")
    for part in chunks(rows, 100):
        values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(part))
        db.execute(
            f"""INSERT INTO sessions (tenant_id, session_id, user_id, started_at,
                   last_event_at, event_count) VALUES {values}
               ON CONFLICT (tenant_id, session_id) DO UPDATE SET
                   last_event_at = {last}, started_at = {first},
                   user_id = coalesce(sessions.user_id, excluded.user_id),
                   event_count = sessions.event_count + excluded.event_count""",
            [v for row in part for v in row],
        )


def get_events(db: Database, event_ids: list[str]) -> list[dict[str, Any]]:
    if not event_ids:
        return []
    in_list = marks(event_ids)
    rows = db.query(f"SELECT * FROM events WHERE event_id IN ({in_list}) ORDER BY seq", event_ids)
    for row in rows:
        for key in ("tags", "content", "refs", "redactions"):
            row[key] = json.loads(row[key])
    return rows


def event_receipts(db: Database, event_ids: list[str], tenant_id: str | None = None
                   ) -> dict[str, dict[str, Any]]:
    """For each stored event among `event_ids` (of `tenant_id` only, when given): when memcli
    stored it (`created_at`) and its episode memories in chunk order (`chunk_ids`), the
    receipt `POST /api/v1/events` answers with."""
    out: dict[str, dict[str, Any]] = {}
    wanted = list(dict.fromkeys(event_ids))
    for part in chunks(wanted, _KEYS_PER_LOOKUP):
        in_list = marks(part)
        for event_id, recorded_at, tenant in db.execute(
                f"SELECT event_id, recorded_at, tenant_id FROM events"
                f" WHERE event_id IN ({in_list})", part):
            if tenant_id is None or tenant == tenant_id:
                out[event_id] = {"created_at": recorded_at, "chunk_ids": []}
        for memory_id, event_id in db.execute(
                f"SELECT id, event_id FROM memories WHERE kind = 'episode' AND event_id IN"
                f" ({in_list}) ORDER BY event_id, chunk_index, id", part):
            if event_id in out:
                out[event_id]["chunk_ids"].append(memory_id)
    return out
