"""Indexing in the background (memcli.ingest.background, memcli.service.daemon.indexing),
in-process.

The queue a daemon installs before it forks is installed here on a real pipe: ingest then
commits events, memories and full-text rows without vectors and writes a wake line naming the
database; the indexer's loop (the code its process runs) drains each database's backlog, in
turns, and consolidates a user's sessions once a new one starts. Both engines
(tests/support/backend.py). The processes themselves (a real `memcli serve`, kill -9) are in
tests/service/test_daemon_indexing.py and test_daemon_indexer_lifecycle.py.
"""

from __future__ import annotations

import json
import os

import pytest

from memcli.config import load_settings
from memcli.ingest import background
from memcli.operations.memory import Memory
from memcli.providers.embedders import HashEmbedder
from memcli.service.daemon import indexing
from tests.support.backend import rows
from tests.support.lifecycle import conversation, extraction, memory_rows

pytestmark = pytest.mark.backends


@pytest.fixture
def wake():
    """A queue installed on a real pipe, as `memcli serve` installs it; (read end, memory)."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    yield read, write
    background.uninstall()
    os.close(read)
    os.close(write)


def _lines(fd: int) -> list[bytes]:
    try:
        return os.read(fd, 65536).split(b"\n")[:-1]
    except BlockingIOError:
        return []


def _vectors(db_path) -> int:
    return rows(db_path, "SELECT count(*) FROM memory_vectors")[0][0]


def _woken(db_path, *users: str) -> list[bytes]:
    """The wake lines an ingest into `db_path` writes (users: whose new session started)."""
    place = background.where(str(db_path)).encode()
    return [b"W" + place] + [b"C" + place + b'\t["default", "' + u.encode() + b'"]'
                             for u in users]


def test_ingest_in_the_daemon_answers_before_the_vectors(db_path, wake):
    read, write = wake
    background.install(write)
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        report = memory.ingest([{"text": f"note {i} about otters"} for i in range(3)])
        assert report.created and report.embedded == 0
        assert report.deferred_embedding == 3
        assert _vectors(db_path) == 0  # acknowledged with events, memories, full text only
        assert _lines(read) == _woken(db_path)  # the indexer is woken for this database
        done, last = background.index_next(memory.db, memory.embedder, None, after=0, limit=2)
        assert (done, last) == (2, report.memory_ids[1])  # oldest first
        done, last = background.index_next(memory.db, memory.embedder, None, after=last,
                                            limit=2)
        assert (done, last) == (1, report.memory_ids[2])
        assert background.index_next(memory.db, memory.embedder, None, after=last,
                                     limit=2) == (0, last)
    assert _vectors(db_path) == 3


def test_without_a_daemon_ingest_writes_vectors_inline(db_path, wake):
    _read, write = wake
    background.install(write, only=str(db_path) + "-another")  # another database's daemon
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        report = memory.ingest([{"text": "inline vectors"}])
    assert report.embedded == 1 and report.deferred_embedding == 0
    assert _vectors(db_path) == 1


def test_a_fresh_memory_is_found_before_its_vector(db_path, wake):
    """The lexical, trigram and entity legs answer for a memory that has no vector yet; the
    dense leg simply has nothing for it."""
    background.install(wake[1])
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        memory.ingest([{"text": "Anika adopted a quokka named Biscuit", "user_id": "u"},
                       {"text": "我们今天去动物园看熊猫", "user_id": "u"},
                       {"text": "the weather was grey all week", "user_id": "u"}])
        assert _vectors(db_path) == 0
        for text, leg, found in (
                ("quokka", "lexical", "Anika adopted a quokka named Biscuit"),
                ("动物园", "trigram", "我们今天去动物园看熊猫"),
                ("Biscuit", "entity", "Anika adopted a quokka named Biscuit")):
            result = memory.query(text, fallback=False)
            assert [h.text for h in result.hits][:1] == [found], (text, result.legs)
            assert result.legs.get(leg, 0) >= 1, (text, result.legs)


def test_a_memory_purged_before_the_indexer_reaches_it_is_skipped(db_path, wake):
    background.install(wake[1])
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        first = memory.ingest([{"text": "keep me", "session_id": "a"}]).memory_ids
        memory.ingest([{"text": "purge me", "session_id": "b"}])
        waiting = background.backlog.waiting(memory.db, after=0, limit=10, dense=True,
                                             sparse=False)
        assert [row[0] for row in waiting] == [first[0], first[0] + 1]
        memory.purge(session_id="b")
        assert background.backlog.still_waiting(
            memory.db, [row[0] for row in waiting], dense=True, sparse=False) == {
            first[0]: (True, False)}


def test_importing_an_export_in_the_daemon_counts_the_vectors_left_to_it(db_path, wake,
                                                                          tmp_path):
    """`memcli import` of memcli's own file inside the daemon: the live memories' vectors are
    the indexer's (counted as deferred), a forgotten one's are written at once (`memcli
    embed` and the indexer skip it)."""
    from memcli.lifecycle.purge import forget
    from memcli.portable.file_format import parse
    from memcli.portable.importer import load_parsed
    from tests.support.portable import dump

    with Memory.open(tmp_path / "source.db", embedder=HashEmbedder(64)) as source:
        ids = source.ingest([{"text": f"note {i} about otters"} for i in range(3)]).memory_ids
        forget(source.db, ids[0], owner=source.owner())
        head, records = parse(dump(source))
    read, write = wake
    background.install(write)
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        report = load_parsed(memory, head, records)
    assert report["counts"]["memory"]["added"] == 3
    assert report["embedded"] == 1 and report["deferred_embedding"] == 2
    assert _vectors(db_path) == 1 and _lines(read) == _woken(db_path)


def test_a_users_new_session_is_announced_once(db_path, wake):
    read, write = wake
    background.install(write)
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        def said(session: str | None, text: str, user: str | None = "priya") -> None:
            memory.ingest([{"text": text, "session_id": session, "user_id": user}])

        said("s1", "hello")
        assert _lines(read) == _woken(db_path, "priya")
        said("s1", "and more")  # the same session
        assert _lines(read) == _woken(db_path)
        said("x", "no user, no session switch", user=None)
        assert _lines(read) == _woken(db_path)
        said("s2", "hello again")
        assert _lines(read) == _woken(db_path, "priya")


def _drain(db_path, config: str, tmp_path, monkeypatch) -> indexing._Drain:
    """Run the indexer's loop in this process until the backlog and the sessions are done."""
    path = tmp_path / "config.yaml"
    path.write_text(config, encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(path))
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    settings = load_settings(str(db_path))
    wake_r, wake_w = os.pipe()
    reports_r, reports_w = os.pipe()
    life_r, life_w = os.pipe()
    background.install(wake_w)
    try:
        with Memory.configured(db_path) as memory:
            memory.ingest(conversation("s1", ["I work as a nurse at Santa Maria.",
                                              "I love green tea."]))
            memory.ingest(conversation("s2", ["Hello again!"], day=2))
            assert _vectors(db_path) == 0
        background.uninstall()
        loop = indexing.Loop(lambda _location: settings, wake_r, reports_w, (life_r,),
                             lambda _l: None)
        for _ in range(20):  # index, consolidate, index what consolidating wrote
            assert loop.step()
            if loop.drains and not loop.turns:
                break
        (drain,) = loop.drains.values()
        assert drain.memory is None  # closed once its queue was empty
        os.set_blocking(reports_r, False)
        last = json.loads(_lines(reports_r)[-1][1:])
        assert last["indexed"] == drain.figures["indexed"] and last["busy"] is False
        assert last["db"] == background.where(str(db_path))
        everything = rows(db_path, "SELECT count(*) FROM memories WHERE state != 'soft_deleted'")
        assert _vectors(db_path) == everything[0][0]
        return drain
    finally:
        for fd in (wake_r, wake_w, reports_r, reports_w, life_r, life_w):
            os.close(fd)


NO_SPARSE = "retrieval: {leg_weights: {lexical: 1, sparse: 0, dense: 1, entity: 0.5}}\n"


def test_a_session_switch_consolidates_the_previous_session(db_path, tmp_path, monkeypatch,
                                                           stub):
    """The default (`consolidate: extractive`): the model-free part only, even with a model
    configured."""
    monkeypatch.setenv("MEMCLI_LLM_BASE_URL", stub.base_url)
    loop = _drain(db_path, NO_SPARSE, tmp_path, monkeypatch)
    assert loop.figures["indexed"] == 3 and loop.figures["consolidated"] == 1
    (summary,) = memory_rows(db_path, "kind = 'summary'")
    assert summary["session_id"] == "s1"
    assert summary["attributes"]["method"] == "extractive"
    assert stub.chat_requests == []


def test_with_consolidate_auto_the_model_extracts_facts(db_path, tmp_path, monkeypatch, stub):
    monkeypatch.setenv("MEMCLI_LLM_BASE_URL", stub.base_url)
    monkeypatch.setenv("MEMCLI_LLM_MODEL", "stub-model")
    stub.enqueue_json(extraction("Priya is a nurse.",
                                 facts=["Priya works as a nurse at Santa Maria hospital."]))
    loop = _drain(db_path, NO_SPARSE + "consolidate: auto\n", tmp_path, monkeypatch)
    assert loop.figures["consolidated"] == 1 and loop.figures["last_error"] is None
    assert len(stub.chat_requests) == 1
    (fact,) = memory_rows(db_path, "kind = 'fact'")
    assert fact["content"] == "Priya works as a nurse at Santa Maria hospital."
    (summary,) = memory_rows(db_path, "kind = 'summary'")
    assert summary["attributes"]["method"] == "llm"


def test_doctor_says_the_daemons_indexer_is_writing_the_missing_vectors(db_path, wake):
    from memcli.health.checks import diagnose

    background.install(wake[1])  # by this process: the daemon that indexes is alive
    with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
        memory.ingest([{"text": "waits for its vector"}])
        report = diagnose(memory.db, embedder=memory.embedder)
        assert report["healthy"], report
        (missing,) = [c for c in report["checks"] if c["check"] == "missing:memory_vectors"]
        assert missing["status"] == "info" and "indexer" in missing["detail"]
        background.uninstall()  # no daemon indexes it: `memcli embed` is the fix
        report = diagnose(memory.db, embedder=memory.embedder)
        assert not report["healthy"]


@pytest.mark.parametrize(("written", "read"),
                         [("off", "off"), ("auto", "auto"), ("", "extractive")])
def test_the_consolidate_setting(tmp_path, monkeypatch, written, read):
    config = tmp_path / "config.yaml"
    config.write_text(f"consolidate: {written}\n" if written else "", encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    assert load_settings(str(tmp_path / "m.db")).consolidate == read


def test_the_queue_is_alive_while_the_wake_pipe_is_read(db_path):
    """`ingest --wait` waits for the daemon while its supervisor reads the wake pipe; once the
    daemon is stopping (the read end closed everywhere) it writes the vectors itself."""
    read, write = os.pipe()
    try:
        background.install(write)
        with Memory.open(db_path, embedder=HashEmbedder(64)) as memory:
            queue = background.queue_for(memory.db)
            assert queue is not None and queue.alive()
            os.close(read)
            read = -1
            assert not queue.alive()
            (memory_id,) = memory.ingest([{"text": "waits for its vector"}]).memory_ids
            memory.wait_indexed([memory_id])  # no daemon to wait for: written here
        assert _vectors(db_path) == 1
    finally:
        background.uninstall()
        for fd in (read, write):
            if fd >= 0:
                os.close(fd)
