"""Crash: `kill -9` at random moments during ingest, `consolidate --no-llm` and `purge`.

After every kill: integrity ok, the database's invariants hold (each event wholly present or
absent: its event row, memories, FTS and trigram rows, vectors, history), and the killed
command's own unit of work landed whole or not at all (a batch's events, a purged session).
At the end the same ingest, run again to completion, stores every event exactly once.

The moments are drawn from a seeded generator; the seed is printed (`pytest -s`) and can be
given back through MEMCLI_TRUST_SEED to replay a failure. Short by default (10 kills);
`MEMCLI_TRUST_FULL=1`: 100 kills over larger batches.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter

import pytest

from tests.support.trust import (
    Procs,
    check_database,
    marker,
    memcli_env,
    record,
    stored_events,
    write_batch,
)

FULL = os.environ.get("MEMCLI_TRUST_FULL") == "1"
KILLS = 100 if FULL else 10
BATCHES, SIZE = (30, 100) if FULL else (6, 60)

pytestmark = pytest.mark.trust


def _by_marker(db) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for event_id, mark in stored_events(db).items():
        out.setdefault(mark, set()).add(event_id)
    return out


def test_kill_9_at_random_moments(tmp_path):
    seed = int(os.environ.get("MEMCLI_TRUST_SEED", random.randrange(1 << 30)))
    print(f"crash seed {seed}")
    rng = random.Random(seed)
    db = tmp_path / "memory.db"
    env = memcli_env(tmp_path / "home", db)
    batches = []
    for b in range(BATCHES):
        numbers = range(b * SIZE, (b + 1) * SIZE)
        recs = [record(n, with_id=n % 4 != 0) for n in numbers]
        batches.append((write_batch(tmp_path / f"b{b}.jsonl", recs),
                        {marker(n) for n in numbers}))
    outcomes: Counter[str] = Counter()
    started = time.monotonic()
    with Procs(env) as procs:
        # How long one batch takes end to end, so kills spread over start-up, models and writes.
        t0 = time.monotonic()
        assert procs.run("ingest", str(batches[0][0]), "--json")[0] == 0
        span = (time.monotonic() - t0) * 1.2
        for kill in range(KILLS):
            roll = rng.random()
            before = _by_marker(db)
            if roll < 0.7:
                # A batch not stored yet if there is one (a stored one only reads and skips).
                pending = [b for b in batches[1:] if not b[1] <= set(before)] or batches[1:]
                path, markers = pending[rng.randrange(len(pending))]
                proc = procs.start("ingest", str(path), "--json")
                what = "ingest"
            elif roll < 0.85:
                proc = procs.start("consolidate", "--no-llm", "--json")
                what = "consolidate"
            else:
                session = f"s{rng.randrange(7)}"
                proc = procs.start("purge", "--session", session, "--json")
                what = "purge"
            time.sleep(rng.uniform(0, span))
            code = procs.kill9(proc)
            outcome = f"{what}:{'killed' if code == -9 else code}"
            assert code in (-9, 0), f"kill {kill} ({what}, seed {seed}): exit {code}"
            problems = check_database(db)
            assert problems == [], f"kill {kill} ({what}, seed {seed}): {problems}"
            after = _by_marker(db)
            assert all(len(ids) == 1 for ids in after.values()), f"seed {seed}: duplicates"
            if what == "ingest":
                # One batch is one transaction: it landed whole, or not at all.
                new = set(after) - set(before)
                assert new in (set(), markers - set(before)), f"kill {kill}, seed {seed}"
                outcome += ":landed" if new else ":nothing new"
            elif what == "purge":
                gone = set(before) - set(after)
                session_marks = {m for m in before
                                 if int(m[2:7]) % 7 == int(session[1:])}
                assert gone in (set(), session_marks), f"kill {kill}, seed {seed}"
                outcome += ":done" if gone else ":nothing gone"
            outcomes[outcome] += 1
        # The same ingest again, uninterrupted: every event stored exactly once.
        for path, _ in batches:
            code, out, err = procs.run("ingest", str(path), "--json")
            assert code == 0, err
            report = json.loads(out)
            assert len(report["created"]) + len(report["skipped"]) == SIZE
    final = _by_marker(db)
    expected = {m for _, markers in batches for m in markers}
    assert set(final) - {""} == expected
    assert all(len(ids) == 1 for ids in final.values())
    assert check_database(db) == []
    stats = {"seed": seed, "kills": KILLS, "intact": KILLS, "seconds":
             round(time.monotonic() - started, 1), "events": len(expected),
             "outcomes": dict(sorted(outcomes.items()))}
    print("crash", json.dumps(stats))
