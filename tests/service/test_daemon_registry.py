"""The user's daemon's registry of open databases and the board `serve status` reads
(memcli/service/daemon/registry.py), without a daemon: a fork made before a state is published
reads it, databases are learned from `D<location>` lines and closed after their idle figure."""

from __future__ import annotations

import json
import os
import time

from memcli.service.daemon.registry import Board, Registry


def test_a_fork_made_before_reads_what_is_published_after():
    board = Board(4096)
    assert board.read() is None  # nothing published yet
    ready_r, ready_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a spare command process, forked long before `serve status` asks
        try:
            os.close(ready_w)
            os.read(ready_r, 1)
            os.write(out_w, json.dumps(board.read()).encode())
        finally:
            os._exit(0)
    os.close(ready_r)
    os.close(out_w)
    board.publish({"requests": 1})
    board.publish({"requests": 2, "databases": [{"db": "/a.db"}]})
    os.write(ready_w, b"x")
    os.close(ready_w)
    got = b""
    while chunk := os.read(out_r, 65536):
        got += chunk
    os.close(out_r)
    os.waitpid(pid, 0)
    assert json.loads(got) == {"requests": 2, "databases": [{"db": "/a.db"}]}


def test_a_state_too_large_leaves_the_last_one():
    board = Board(64)
    board.publish({"n": 1})
    board.publish({"n": "x" * 100})
    assert board.read() == {"n": 1}


def test_databases_are_learned_from_reports_and_closed_when_idle():
    registry = Registry(idle_close=60.0)
    try:
        os.write(registry.write_fd, b"D/a.db\nD/b.db\nD/a.")
        assert registry.read_reports() == ["/a.db", "/b.db"]
        os.write(registry.write_fd, b"db\nX ignored\n")
        assert registry.read_reports() == ["/a.db"]
        assert registry.read_reports() == []  # nothing waiting: no block
        assert [(e["db"], e["requests"]) for e in registry.snapshot()] == [
            ("/a.db", 2), ("/b.db", 1)]
        now = time.monotonic()
        registry.open["/b.db"].last = now - 61
        assert registry.next_close(now) == 0.0
        assert registry.close_idle(now) == ["/b.db"]
        assert [e["db"] for e in registry.snapshot()] == ["/a.db"]
        assert 0 < registry.next_close(now) <= 60
        registry.open["/a.db"].last = now - 60
        assert registry.close_idle(now) == ["/a.db"] and registry.next_close(now) is None
    finally:
        registry.close()
