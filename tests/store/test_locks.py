"""Lock discipline: no command holds the write lock while a model runs.

The embedder here is the test embedder with a probe: on every call it checks whether another
connection could take the write lock at that moment. Embedding takes seconds under load, and a
writer waiting on it behind the lock is what made concurrent ingests exit 75.
"""

from __future__ import annotations

import time

import pytest

from memcli import Memory
from memcli.lifecycle.consolidate import consolidate
from memcli.providers.embedders import HashEmbedder
from tests.support.backend import write_lock_held
from tests.support.lifecycle import settings, writer_lock_free
from tests.support.records import turns
from tests.support.trust import Procs, memcli_env

# SQLite and PostgreSQL (tests/support/backend.py); the last test is about SQLite's busy wait
pytestmark = pytest.mark.backends


class ProbingEmbedder(HashEmbedder):
    def __init__(self, path) -> None:
        super().__init__(64)
        self.path = str(path)
        self.calls = 0
        self.under_lock: list[list[str]] = []

    def embed_documents(self, texts):
        self.calls += 1
        if not writer_lock_free(self.path):
            self.under_lock.append(list(texts))
        return super().embed_documents(texts)


def test_the_probe_sees_a_held_write_lock(memory, db_path):
    """Without this the probe could say "free" on an engine whose lock it cannot see."""
    assert writer_lock_free(db_path)
    with memory.db.transaction():
        assert not writer_lock_free(db_path)
    assert writer_lock_free(db_path)


def test_ingest_embeds_before_taking_the_write_lock(db_path):
    probe = ProbingEmbedder(db_path)
    with Memory.open(db_path, embedder=probe) as m:
        report = m.ingest(turns("s1", ["Alice likes green tea.", "Bob drinks coffee."]))
    assert len(report.created) == 2 and probe.calls >= 1
    assert probe.under_lock == []


def test_consolidate_embeds_before_taking_the_write_lock(db_path):
    probe = ProbingEmbedder(db_path)
    with Memory.open(db_path, embedder=probe) as m:
        m.ingest(turns("s1", ["Alice moved to Lisbon in May.", "She works on the roadmap.",
                              "Bob visits her in June."]))
        calls = probe.calls
        report = consolidate(m, None, settings(), session_id="s1")
    assert report["sessions"] and probe.calls > calls  # the summary was embedded
    assert probe.under_lock == []


def test_ledger_writes_embed_before_taking_the_write_lock(db_path):
    from memcli.ledger import entries as ledger

    probe = ProbingEmbedder(db_path)
    with Memory.open(db_path, embedder=probe) as m:
        first = ledger.add_decision(m, "Use SQLite", rationale=["offline"], user_id="u1")
        ledger.supersede_decision(m, first["id"], "Use SQLite in WAL mode", reason="readers")
        task = ledger.add_task(m, "Book the flights", user_id="u1")
        ledger.update_task(m, task["id"], status="doing")
    assert probe.calls >= 4  # each wrote a memory with a vector
    assert probe.under_lock == []


def test_a_read_does_not_wait_the_writers_timeout_for_its_access_counts(tmp_path):
    """Access counts and metrics are hints: a query behind a held write lock gives them up
    after a second (HINT_WAIT) and answers, rather than waiting MEMCLI_BUSY_TIMEOUT."""
    db = tmp_path / "memory.db"
    env = {**memcli_env(tmp_path / "home", db), "MEMCLI_BUSY_TIMEOUT": "60"}
    with Procs(env) as procs:
        assert procs.run("ingest", "--text", "Alice likes green tea")[0] == 0
        with write_lock_held(db):
            started = time.monotonic()
            code, out, err = procs.run("query", "green tea", "--json", timeout=120)
            elapsed = time.monotonic() - started
    assert code == 0, err
    assert "green tea" in out
    assert elapsed < 40  # not the 60 s a writer would wait
