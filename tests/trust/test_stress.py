"""Stress: concurrent `memcli ingest` processes, query loops and lifecycle runs on one file.

Counts every event a process acknowledged (its JSON report: created + skipped) against what the
database holds (exactly once, by event id and by content), checks exit codes and the database's
invariants. Short by default (CI); `MEMCLI_TRUST_FULL=1` runs it at full length, and once more
with the default models (e5-small + SPLADE).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter

import pytest

from tests.support.backend import write_lock_held
from tests.support.trust import (
    Procs,
    check_database,
    marker,
    memcli_env,
    record,
    stored_events,
    wait_all,
    write_batch,
)

FULL = os.environ.get("MEMCLI_TRUST_FULL") == "1"

pytestmark = pytest.mark.trust


def _same_content_race(tmp_path, processes: int) -> None:
    db = tmp_path / "memory.db"
    env = memcli_env(tmp_path / "home", db)
    # Identical content, no event id: only the content hash can tell the repeat.
    batch = write_batch(tmp_path / "same.jsonl",
                        [record(n, with_id=False) for n in range(5)])
    with Procs(env) as procs:
        # The database exists: the race is about the events.
        assert procs.run("ingest", "--text", "warm-up")[0] == 0
        started = [procs.start("ingest", str(batch), "--json") for _ in range(processes)]
        results = [procs.finish(p) for p in started]
    for code, _, err in results:
        assert code == 0, err
    reports = [json.loads(out) for _, out, _ in results]
    created = [e for r in reports for e in r["created"]]
    assert len(created) == 5  # each event created by exactly one process
    for r in reports:
        assert len(r["created"]) + len(r["skipped"]) == 5 and not r["rejected"]
    stored = [m for m in stored_events(db).values() if m]
    assert sorted(stored) == sorted(marker(n) for n in range(5))
    assert check_database(db) == []


def test_processes_ingesting_the_same_content_all_succeed_once_each(tmp_path):
    """Several rounds: the duplicate must be decided under the write lock, never a UNIQUE
    error (exit 2) in the process that lost the race."""
    for round_ in range(2 if not FULL else 12):
        _same_content_race(tmp_path / f"r{round_}", processes=4)


def test_a_writer_waits_for_the_lock_then_writes(tmp_path):
    db = tmp_path / "memory.db"
    with Procs(memcli_env(tmp_path / "home", db)) as procs:
        assert procs.run("ingest", "--text", "warm-up")[0] == 0
        with write_lock_held(db):  # as another process would
            waiting = procs.start("ingest", "--text", "after the wait", "--json")
            time.sleep(2)
            assert waiting.poll() is None  # waiting, not failed
        code, out, err = procs.finish(waiting)
    assert code == 0, err
    assert len(json.loads(out)["created"]) == 1


def test_busy_past_the_timeout_exits_75_and_writes_nothing(tmp_path):
    db = tmp_path / "memory.db"
    env = {**memcli_env(tmp_path / "home", db), "MEMCLI_BUSY_TIMEOUT": "0.5"}
    with Procs(env) as procs:
        assert procs.run("ingest", "--text", "warm-up")[0] == 0
        with write_lock_held(db):
            code, out, err = procs.run("ingest", "--text", "blocked", "--json")
    assert code == 75 and out == ""
    assert err.count("\n") == 1 and "0.5 s" in err and "MEMCLI_BUSY_TIMEOUT" in err
    assert len(stored_events(db)) == 1


def test_processes_creating_a_new_database_at_once(tmp_path):
    """Four processes open a file that does not exist yet: one creates the schema, all write.
    Several rounds: their switches to WAL deadlock now and then, and SQLite answers one busy at
    once (connection._switch_to_wal tries again; before, 1 round in ~15 failed with exit 75)."""
    for round_ in range(2 if not FULL else 12):
        db = tmp_path / f"r{round_}" / "memory.db"
        with Procs(memcli_env(tmp_path / "home", db)) as procs:
            started = [procs.start("ingest", "--text", f"process {i}", "--json")
                       for i in range(4)]
            results = [procs.finish(p) for p in started]
        assert [code for code, _, _ in results] == [0] * 4, [err for _, _, err in results]
        assert len(stored_events(db)) == 4
        assert check_database(db) == []


class Tally:
    """Exit codes, acknowledged events and failures, collected from the worker threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.codes: Counter[tuple[str, int]] = Counter()
        self.acked: set[str] = set()  # markers of acknowledged events
        self.acked_ids: set[str] = set()
        self.failures: list[str] = []
        self.retries = 0

    def note(self, command: str, code: int, err: str, allowed: tuple[int, ...] = (0,)) -> None:
        with self.lock:
            self.codes[(command, code)] += 1
            if code not in allowed:
                self.failures.append(f"{command} exited {code}: {err.strip()[-300:]}")


def _writer(procs: Procs, tally: Tally, batches: list, stop: threading.Event) -> None:
    for path, markers in batches:
        while not stop.is_set():
            code, out, err = procs.run("ingest", str(path), "--json")
            tally.note("ingest", code, err, (0, 75))
            if code == 75:  # busy past the timeout: nothing of it was written; try again
                with tally.lock:
                    tally.retries += 1
                continue
            if code == 0:
                report = json.loads(out)
                with tally.lock:
                    tally.acked.update(markers)
                    tally.acked_ids.update(report["created"] + report["skipped"])
                    if len(report["created"]) + len(report["skipped"]) != len(markers):
                        tally.failures.append(f"report does not account for {path.name}")
            break


def _looper(procs: Procs, tally: Tally, stop: threading.Event, commands: list[list[str]]) -> None:
    i = 0
    while not stop.is_set():
        args = commands[i % len(commands)]
        code, _, err = procs.run(*args)
        # A lifecycle run finding another run of itself in progress exits 75 by design.
        tally.note(args[0], code, err, (0,) if args[0] == "query" else (0, 75))
        i += 1


def run_stress(tmp_path, *, models: str, writers: int, batches: int, size: int,
               seed: int) -> dict:
    rng = random.Random(seed)
    print(f"stress seed {seed}")
    db = tmp_path / "memory.db"
    env = memcli_env(tmp_path / "home", db, models=models)
    pool = writers * batches * size // 2  # about half of all records repeat another's
    plan = []
    for w in range(writers):
        mine = []
        for b in range(batches):
            numbers = rng.sample(range(pool), size)
            # Some repeats carry the event id, some only the same content.
            recs = [record(n, with_id=rng.random() < 0.7) for n in numbers]
            path = write_batch(tmp_path / f"w{w}b{b}.jsonl", recs)
            mine.append((path, {marker(n) for n in numbers}))
        plan.append(mine)
    tally = Tally()
    stop = threading.Event()
    started = time.monotonic()
    with Procs(env) as procs:
        assert procs.run("ingest", "--text", "warm-up")[0] == 0
        threads = [threading.Thread(target=_writer, args=(procs, tally, mine, stop))
                   for mine in plan]
        loops = [threading.Thread(target=_looper, args=(procs, tally, stop, cmds)) for cmds in (
            [["query", "Alice met Bob", "--json"]],
            [["query", "coffee in Lisbon", "--json", "--user", "u1"]],
            [["decay", "--json"], ["consolidate", "--no-llm", "--json"]],
        )]
        for t in threads + loops:
            t.start()
        try:
            wait_all(threads, timeout=3600)
        finally:
            stop.set()
            wait_all(loops, timeout=600)
    elapsed = time.monotonic() - started
    stored = stored_events(db)
    found = Counter(v for v in stored.values() if v)
    lost = tally.acked - set(found)
    twice = {m for m, c in found.items() if c > 1}
    stats = {
        "seed": seed, "models": models, "seconds": round(elapsed, 1),
        "acknowledged": len(tally.acked), "found": len(found), "lost": len(lost),
        "found_twice": len(twice), "retried_75": tally.retries,
        "exit_codes": {f"{c}:{k}": n for (c, k), n in sorted(tally.codes.items())},
    }
    print("stress", json.dumps(stats))
    assert tally.failures == []
    assert not lost and not twice
    assert set(found) == tally.acked  # nothing stored that no one acknowledged
    assert tally.acked_ids <= set(stored)
    assert check_database(db, sparse=models == "default") == []
    return stats


def test_concurrent_ingest_queries_and_lifecycle(tmp_path):
    seed = int(os.environ.get("MEMCLI_TRUST_SEED", random.randrange(1 << 30)))
    if FULL:
        run_stress(tmp_path / "hash", models="hash", writers=8, batches=10, size=40, seed=seed)
    else:
        run_stress(tmp_path, models="hash", writers=8, batches=2, size=10, seed=seed)


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="full length only (MEMCLI_TRUST_FULL=1)")
def test_concurrent_ingest_with_default_models(tmp_path):
    seed = int(os.environ.get("MEMCLI_TRUST_SEED", random.randrange(1 << 30)))
    run_stress(tmp_path, models="default", writers=8, batches=10, size=20, seed=seed)
