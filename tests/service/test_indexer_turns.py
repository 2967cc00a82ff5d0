"""The indexer's loop over several databases (memcli.service.daemon.indexing), in-process.

Ingest with the daemon's queue installed on a real pipe writes wake lines naming each database;
the loop the indexer process runs reads them, drains each database with its own settings and
connection, in turns of one batch, closes a database once its queue is empty, and stops once it
has had nothing to do for its idle figure. SQLite files, the hash embedder; no clock decides an
assertion (the idle figure is 0 or an hour).
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


@pytest.fixture
def pipes():
    """(wake read end, wake write end, reports read end, reports write end, life read end)."""
    wake_r, wake_w = os.pipe()
    reports_r, reports_w = os.pipe()
    life_r, life_w = os.pipe()
    for fd in (wake_r, reports_r):
        os.set_blocking(fd, False)
    background.install(wake_w)
    yield wake_r, wake_w, reports_r, reports_w, life_r
    background.uninstall()
    for fd in (wake_r, wake_w, reports_r, reports_w, life_r, life_w):
        os.close(fd)


@pytest.fixture
def settings_for(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMCLI_CONFIG", str(tmp_path / "none.yaml"))
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    asked: list[str] = []

    def settings(location: str):
        asked.append(location)
        return load_settings(location)

    settings.asked = asked
    return settings


def _ingest(path, texts: list[str]) -> None:
    with Memory.open(path, embedder=HashEmbedder()) as memory:
        report = memory.ingest([{"text": t, "user_id": "u"} for t in texts])
        assert report.deferred_embedding == len(texts)


def _vectors(path) -> int:
    return rows(path, "SELECT count(*) FROM memory_vectors")[0][0]


def _vector_texts(path) -> set[str]:
    return {
        text
        for (text,) in rows(
            path, "SELECT m.content FROM memories m JOIN memory_vectors v ON v.memory_id = m.id"
        )
    }


def _reports(fd: int) -> list[dict]:
    try:
        data = os.read(fd, 1 << 20)
    except BlockingIOError:
        return []
    return [json.loads(line[1:]) for line in data.split(b"\n") if line.startswith(b"B")]


def _loop(pipes, settings_for, idle_exit: float = 3600.0) -> indexing.Loop:
    wake_r, _w, _r, reports_w, life_r = pipes
    return indexing.Loop(
        settings_for, wake_r, reports_w, (life_r,), lambda _line: None, idle_exit=idle_exit
    )


def test_two_databases_each_get_their_own_vectors(tmp_path, pipes, settings_for):
    first, second = tmp_path / "a" / "first.db", tmp_path / "b" / "second.db"
    first.parent.mkdir()
    second.parent.mkdir()
    _ingest(first, ["otters hold hands", "otters sleep"])
    _ingest(second, ["herons stand still"])
    loop = _loop(pipes, settings_for)
    for _ in range(10):
        assert loop.step()
        if loop.drains and not loop.turns:
            break
    assert _vector_texts(first) == {"otters hold hands", "otters sleep"}
    assert _vector_texts(second) == {"herons stand still"}  # nothing of the other's
    where = {background.where(str(first)), background.where(str(second))}
    assert set(settings_for.asked) == where  # each database with its own settings
    assert all(d.memory is None for d in loop.drains.values())  # closed: queues empty
    last = {r["db"]: r for r in _reports(pipes[2])}
    assert set(last) == where
    assert [last[background.where(str(p))]["indexed"] for p in (first, second)] == [2, 1]
    assert not any(r["busy"] for r in last.values())


def test_a_big_backlog_does_not_keep_another_databases_first_memory_waiting(
    tmp_path, pipes, settings_for
):
    big, small = tmp_path / "big.db", tmp_path / "small.db"
    _ingest(big, [f"note {i} in the big one" for i in range(3 * indexing.BATCH)])
    _ingest(small, ["the one memory of the small one"])
    loop = _loop(pipes, settings_for)
    assert loop.step() and loop.step()  # one batch of each, in turns
    assert _vectors(big) == indexing.BATCH
    assert _vectors(small) == 1
    while loop.turns:
        assert loop.step()
    assert _vectors(big) == 3 * indexing.BATCH


def test_the_loop_ends_once_idle_and_a_later_wake_opens_the_database_again(
    tmp_path, pipes, settings_for
):
    path = tmp_path / "m.db"
    _ingest(path, ["first"])
    loop = _loop(pipes, settings_for, idle_exit=0.0)
    steps = 0
    while loop.step():
        steps += 1
        assert steps < 10
    assert _vectors(path) == 1 and loop.drains[background.where(str(path))].memory is None
    _ingest(path, ["second"])  # a new indexer (here: a new loop) takes the next wake line
    loop = _loop(pipes, settings_for, idle_exit=0.0)
    while loop.step():
        pass
    assert _vectors(path) == 2


def test_a_database_removed_before_its_turn_is_not_made_again(tmp_path, pipes, settings_for):
    gone, kept = tmp_path / "gone.db", tmp_path / "kept.db"
    _ingest(gone, ["soon removed"])
    _ingest(kept, ["stays"])
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{gone}{suffix}"):
            os.unlink(f"{gone}{suffix}")
    loop = _loop(pipes, settings_for, idle_exit=0.0)
    while loop.step():
        pass
    assert not gone.exists() and _vectors(kept) == 1


def test_a_database_that_fails_waits_for_its_retry_while_the_others_go_on(
    tmp_path, pipes, settings_for
):
    broken, fine = tmp_path / "broken.db", tmp_path / "fine.db"
    _ingest(broken, ["unreadable settings"])
    _ingest(fine, ["readable"])

    def settings(location: str):
        if location == background.where(str(broken)):
            raise ValueError("this database's settings cannot be read")
        return settings_for(location)

    wake_r, _w, reports_r, reports_w, life_r = pipes
    loop = indexing.Loop(settings, wake_r, reports_w, (life_r,), lambda _line: None, idle_exit=0.0)
    assert loop.step() and loop.step() and loop.step()  # each a turn; then `fine` is done
    assert _vectors(fine) == 1 and _vectors(broken) == 0
    drain = loop.drains[background.where(str(broken))]
    assert drain.failures == 1 and drain.figures["last_error"].startswith("this database")
    assert loop.turns == [drain.location]  # retried later: the loop does not end meanwhile
    failed = [r for r in _reports(reports_r) if r["db"] == drain.location]
    assert failed[-1]["busy"] is True and failed[-1]["last_error"]


def test_a_memory_the_cursor_passed_is_found_once_the_cursor_goes_back_to_0(
    tmp_path, pipes, settings_for, monkeypatch
):
    """RESCAN: after a database's idle seconds the cursor starts from id 0 again (here at
    once), so a memory below it that lacks its vector (another process's write, an id
    committed out of order on PostgreSQL) is indexed too."""
    from memcli.store.vectors import delete_vectors

    monkeypatch.setattr(indexing, "RESCAN", 0.0)
    path = tmp_path / "m.db"
    _ingest(path, ["first", "second"])
    loop = _loop(pipes, settings_for)
    while not loop.drains or loop.turns:
        assert loop.step()
    (drain,) = loop.drains.values()
    assert _vectors(path) == 2 and drain.cursor > 0 and drain.rescan_at is not None
    with Memory.open(path, embedder=HashEmbedder()) as memory, memory.db.transaction():
        first_id = memory.db.execute("SELECT min(id) FROM memories").fetchone()[0]
        delete_vectors(memory.db, [first_id])
    assert _vectors(path) == 1
    for _ in range(4):  # the rescan, then its batch
        assert loop.step()
    assert _vectors(path) == 2


def test_a_database_that_keeps_failing_is_left_to_its_next_wake_line(
    tmp_path, pipes, settings_for, monkeypatch
):
    """Its failures must not keep the indexer (and its models' memory) alive for good."""
    monkeypatch.setattr(indexing, "RETRY", (0.0, 0.0))
    broken = tmp_path / "broken.db"
    _ingest(broken, ["unreadable settings"])

    def settings(location: str):
        raise ValueError("this database's settings cannot be read")

    wake_r, _w, reports_r, reports_w, life_r = pipes
    loop = indexing.Loop(settings, wake_r, reports_w, (life_r,), lambda _line: None, idle_exit=0.0)
    steps = 0
    while loop.step():
        steps += 1
        assert steps < 2 * indexing.GIVE_UP
    assert steps == indexing.GIVE_UP and _vectors(broken) == 0
    last = _reports(reports_r)[-1]
    assert last["busy"] is False and last["last_error"].startswith("this database")
