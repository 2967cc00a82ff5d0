"""How many statements a PostgreSQL ingest sends (writes under the one writer lock):
a fixed number per batch, not a number per record or memory.

Counted by the server itself: the test turns `log_statement = 'all'` on for memcli's own
connection (a superuser may set it for its session) and reads the server's log lines of that
backend's pid, so what is counted is what reached PostgreSQL, whatever path in memcli sent it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memcli.operations.memory import Memory
from memcli.providers.embedders import HashEmbedder
from tests.support.backend import rows

pytestmark = pytest.mark.usefixtures("fast_cli")


def _word(tag: str, i: int) -> str:
    """A name no other event has (entity names keep no digits)."""
    return tag.title() + "".join(chr(ord("a") + int(d)) for d in str(i))


def _batch(tag: str, events: int) -> list[dict]:
    """`events` records over 5 sessions of 2 users (some sessions new, some continued), with
    entities both new and already stored, one tool output, one `high` turn."""
    out = []
    for i in range(events):
        out.append({"event_id": f"{tag}-{i}", "session_id": f"s{i % 5}",
                    "user_id": f"u{i % 5 % 2}", "ts": f"2025-01-01T10:{i % 60:02d}:00Z",
                    "text": f"{tag} turn {i}: Alice met {_word(tag, i)} in Paris"})
    out[-1]["sensitivity"] = "high"
    out[0]["kind"] = "tool_result"
    return out


class _Statements:
    """The statements one backend logs (`log_statement = 'all'`), read from the server log."""

    def __init__(self, log: Path, pid: int) -> None:
        self.log, self.mark = log, log.stat().st_size
        self.line = re.compile(rf"\[{pid}\] LOG:  (?:statement|execute [^:]*): (.*)")

    def since_mark(self) -> list[str]:
        with self.log.open("rb") as fh:
            fh.seek(self.mark)
            text = fh.read().decode("utf-8", errors="replace")
        self.mark += len(text.encode("utf-8", errors="replace"))
        return [m.group(1) for m in map(self.line.search, text.splitlines()) if m]


def test_a_postgresql_batch_sends_the_same_statements_for_6_or_60_events(
        pg_memcli_db, pg_cluster):
    with Memory.open(pg_memcli_db, embedder=HashEmbedder(64)) as memory:
        db = memory.db
        memory.ingest(_batch("seed", 10))  # sessions, entities and a thread to continue
        db.execute("SET log_statement = 'all'")
        counter = _Statements(pg_cluster.folder / "server.log", db.scalar(
            "SELECT pg_backend_pid()"))
        counter.since_mark()
        small = memory.ingest(_batch("small", 6))
        sent_small = counter.since_mark()
        large = memory.ingest(_batch("large", 60))
        sent_large = counter.since_mark()
        db.execute("SET log_statement = 'none'")
    assert (len(small.created), len(large.created)) == (6, 60)
    assert rows(pg_memcli_db, "SELECT count(*) FROM memories") == [(76,)]
    # One statement per kind of row, not one per record: ten times the records, the same
    # statements (the old path sent ~4.6 per event, ~280 for the large batch).
    assert len(sent_large) == len(sent_small), (sent_small, sent_large)
    assert len(sent_large) <= 30, sent_large
    inserts = [s.split("(", 1)[0].split()[2] for s in sent_large
               if s.lstrip().upper().startswith("INSERT INTO")]
    assert sorted(inserts) == sorted(set(inserts)), inserts  # each table once
