"""Where one ingest's time goes, per statement kind, on SQLite and PostgreSQL.

    python -m bench.ingest_profile             # 5,000 events preloaded, 20 x 100 measured
    python -m bench.ingest_profile --preload 20000 --engine postgresql
    python -m bench.ingest_profile --explain   # + EXPLAIN (ANALYZE, BUFFERS) of the hot
                                               #   statements (PostgreSQL)
    python -m bench.ingest_profile --writers 8 # 8 processes, one tenant each, at once
    python -m bench.ingest_profile --engine postgresql --disable-trigger memories_lexical_insert
                                               # the BM25 statistics' share (the numbers only:
                                               # the statistics are wrong afterwards)

One process, `Memory.ingest` as an agent calls it (the hash embedder, no SPLADE: the store's
path is what is measured), on a database first loaded with `--preload` events (bench/perf.py's
chat corpus with pg_scale's 1,000 users in 8 tenants), then `--batches` batches of `--size` new
events timed (with `--writers N`, N processes at once, each `--batches` batches into its own
tenant). Every statement the store sends through the connection (`execute`, `executemany`,
and what `scalar`/`insert`/`query` build on them) is timed from the client and grouped by its
first words, and so are BEGIN + the writer lock (with many writers: the wait for the others)
and COMMIT; `rest` is the time outside those: Python (validation, redaction, chunking,
entities, the hash embedder). With many writers the times are summed over the writers.
PostgreSQL is a throw-away server (tests/support/pg.py). Prints a table; nothing is written
to bench/results (the numbers quoted there say which run they come from).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import pg_scale_support as sup
from memcli.operations.memory import Memory
from memcli.providers.embedders import HashEmbedder

BENCH = Path(__file__).resolve().parent


def kind_of(sql: str) -> str:
    """A statement's group: its verb and table (`SELECT events`, `UPDATE memories`, ...)."""
    text = re.sub(r"\s+", " ", sql).strip()
    verb = text.split(" ", 1)[0].upper()
    table = re.search(r"\b(?:FROM|INTO|UPDATE)\s+([a-z_]+)", text, re.IGNORECASE)
    name = table.group(1) if table else text[:30]
    if verb == "UPDATE" and "SET context" in text:
        name += " (context)"
    return f"{verb} {name}"


class Timer:
    """Wraps a connection's execute/executemany (instance attributes: the connection's own
    helpers call them through `self`, so every statement passes here)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.spent: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.on = False
        self.samples: dict[str, tuple[str, Any]] = {}
        execute, executemany = db.execute, db.executemany

        def timed_execute(sql: str, params: Any = None) -> Any:
            if not self.on:
                return execute(sql, params)
            t = time.perf_counter()
            try:
                return execute(sql, params)
            finally:
                self._add(sql, params, time.perf_counter() - t)

        def timed_executemany(sql: str, seq: Any) -> Any:
            if not self.on:
                return executemany(sql, seq)
            t = time.perf_counter()
            try:
                return executemany(sql, seq)
            finally:
                self._add(sql, None, time.perf_counter() - t)

        transaction = db.transaction

        @contextlib.contextmanager
        def timed_transaction(*args: Any, **kwargs: Any) -> Iterator[None]:
            outer = self.on and not db.in_transaction
            t = time.perf_counter()
            with transaction(*args, **kwargs):
                if outer:  # BEGIN and the writer lock (the wait for other writers)
                    self._add_raw("BEGIN + writer lock", time.perf_counter() - t)
                yield
                t = time.perf_counter()
            if outer:
                self._add_raw("COMMIT", time.perf_counter() - t)

        db.execute, db.executemany = timed_execute, timed_executemany
        db.transaction = timed_transaction

    def _add(self, sql: str, params: Any, seconds: float) -> None:
        kind = kind_of(sql)
        self._add_raw(kind, seconds)
        self.samples.setdefault(kind, (sql, params))

    def _add_raw(self, kind: str, seconds: float) -> None:
        self.spent[kind] += seconds
        self.calls[kind] += 1


def location(engine: str, work: Path, dsn: str | None, name: str) -> str:
    if engine == "sqlite":
        return str(work / f"{name}.db")
    import psycopg

    assert dsn is not None
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    return dsn.rsplit("/", 1)[0] + "/" + name


def preload(loc: str, n: int, disabled: list[str]) -> None:
    events = sup.corpus(n) if n else []
    with Memory.open(loc, embedder=HashEmbedder()) as memory:
        for start in range(0, len(events), 500):
            memory.ingest(events[start:start + 500])
        for name in disabled:  # after the load: only the measured batches go without
            memory.db.execute(f"ALTER TABLE memories DISABLE TRIGGER {name}")


def measure(loc: str, events: list[dict], size: int, go: Path | None = None) -> dict[str, Any]:
    """Ingest `events` in batches of `size`, every statement timed (`go`: wait for that file
    to appear first, so writer processes start together)."""
    memory = Memory.open(loc, embedder=HashEmbedder())
    try:
        memory.ingest([{"event_id": f"warm-{os.getpid()}", "tenant_id": "warm",
                        "text": "warm up"}])
        timer = Timer(memory.db)
        while go is not None and not go.exists():
            time.sleep(0.005)
        timer.on = True
        wall = 0.0
        for start in range(0, len(events), size):
            part = events[start:start + size]
            t = time.perf_counter()
            report = memory.ingest(part)
            wall += time.perf_counter() - t
            assert len(report.created) == len(part), report
        timer.on = False
        return {"wall": wall, "events": len(events), "spent": dict(timer.spent),
                "calls": dict(timer.calls), "samples": timer.samples}
    finally:
        memory.close()


def writers(loc: str, n: int, batches: int, size: int, work: Path) -> dict[str, Any]:
    """`n` writer processes, writer i ingesting into tenant t{i}; per-statement times summed
    over the writers (so `rest` and the lock are per writer, the wall clock shared)."""
    go = work / f"go-{time.monotonic_ns()}"
    procs = [subprocess.Popen([sys.executable, "-m", "bench.ingest_profile", "--child", loc, str(i),
                               str(batches), str(size), str(go)], stdout=subprocess.PIPE,
                              text=True, cwd=BENCH.parent)
             for i in range(n)]
    time.sleep(4.0 + 0.5 * n)  # imports and connections first
    start = time.perf_counter()
    go.touch()
    outs = [json.loads(p.communicate()[0]) for p in procs]
    wall = time.perf_counter() - start
    spent: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for out in outs:
        for kind, seconds in out["spent"].items():
            spent[kind] += seconds
            calls[kind] += out["calls"][kind]
    return {"wall": wall, "events": sum(o["events"] for o in outs), "spent": dict(spent),
            "calls": dict(calls), "samples": {}, "busy": sum(o["wall"] for o in outs)}


def child(loc: str, index: int, batches: int, size: int, go: str) -> int:
    events = sup.extra_events(batches * size, copy=10 + index, tenant=f"t{index}")
    out = measure(loc, events, size, Path(go))
    out.pop("samples")
    print(json.dumps(out))
    return 0


def explain(dsn_db: str, samples: dict[str, tuple[str, Any]]) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) of each sampled statement, rolled back."""
    from memcli.store.postgres.connection import PgDatabase

    db = PgDatabase(dsn_db)
    try:
        for kind, (sql, params) in sorted(samples.items()):
            if kind.split(" ")[0] not in ("SELECT", "UPDATE", "INSERT"):
                continue
            print(f"\n-- {kind}")
            try:
                with db.transaction():
                    for row in db.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params):
                        print("   ", row[0])
                    raise _Undo
            except _Undo:
                pass
            except Exception as exc:  # noqa: BLE001 - a sample may not replay (duplicate key)
                print("    (not replayed:", str(exc).splitlines()[0], ")")
    finally:
        db.close()


class _Undo(Exception):
    pass


def show(engine: str, out: dict[str, Any], n_writers: int) -> None:
    n = out["events"]
    busy = out.get("busy", out["wall"])  # the writers' summed time inside ingest
    stmt = sum(out["spent"].values())
    print(f"\n{engine}, {n_writers} writer(s): {n} events in {out['wall']:.2f} s ="
          f" {n / out['wall']:.1f} events/s ({1000 * busy / n:.2f} writer-ms/event;"
          f" timed {1000 * stmt / n:.2f})")
    print(f"{'statement':<40} {'calls/event':>11} {'ms/event':>9} {'share':>6}")
    rows = sorted(out["spent"].items(), key=lambda kv: -kv[1])
    for kind, spent in rows:
        print(f"{kind:<40} {out['calls'][kind] / n:>11.2f} {1000 * spent / n:>9.3f}"
              f" {100 * spent / busy:>5.1f}%")
    rest = busy - stmt
    print(f"{'rest (Python: validate, chunk, embed...)':<40} {'':>11} {1000 * rest / n:>9.3f}"
          f" {100 * rest / busy:>5.1f}%")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        loc, index, batches, size, go = argv[1:]
        return child(loc, int(index), int(batches), int(size), go)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--preload", type=int, default=5000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--writers", type=int, default=1,
                        help="writer processes (each its own tenant; batches each)")
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--disable-trigger", action="append", default=[],
                        help="a trigger on memories to disable for the measured batches")
    args = parser.parse_args(argv)
    engines = ("sqlite", "postgresql") if args.engine == "both" else (args.engine,)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ingprof-")))
        dsn = None
        if "postgresql" in engines:
            from tests.support.pg import running_server

            dsn = stack.enter_context(running_server()).dsn
        for engine in engines:
            loc = location(engine, tmp, dsn, "ingprof")
            preload(loc, args.preload, args.disable_trigger if engine == "postgresql" else [])
            if args.writers == 1:
                extra = sup.extra_events(args.batches * args.size, copy=1, tenant=None)
                out = measure(loc, extra, args.size)
            else:
                out = writers(loc, args.writers, args.batches, args.size, tmp)
            show(engine, out, args.writers)
            if args.explain and engine == "postgresql" and out["samples"]:
                explain(loc, out["samples"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
