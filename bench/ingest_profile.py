"""Where one ingest's time goes, per statement kind, on SQLite and PostgreSQL (issue #16).

    python bench/ingest_profile.py             # 5,000 events preloaded, 20 x 100 measured
    python bench/ingest_profile.py --preload 20000 --engine postgresql
    python bench/ingest_profile.py --explain   # + EXPLAIN (ANALYZE, BUFFERS) of the hot
                                               #   statements (PostgreSQL)
    python bench/ingest_profile.py --engine postgresql --disable-trigger memories_lexical_insert
                                               # the BM25 statistics' share (the numbers only:
                                               # the statistics are wrong afterwards)

One process, `Memory.ingest` as an agent calls it (the hash embedder, no SPLADE: the store's
path is what is measured), on a database first loaded with `--preload` events (bench/perf.py's
chat corpus with pg_scale's 1,000 users in 8 tenants), then `--batches` batches of `--size` new
events timed. Every statement the store sends through the connection (`execute`,
`executemany`, and what `scalar`/`insert`/`query` build on them) is timed from the client and
grouped by its first words; `rest` is the batch's time outside those statements: Python
(validation, redaction, chunking, entities, the hash embedder), BEGIN, the writer lock and
COMMIT. PostgreSQL is a throw-away server (tests/pg_support.py). Prints a table; nothing is
written to bench/results (the numbers quoted there say which run they come from).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH.parent / "tests"))
sys.path.insert(0, str(BENCH))

import pg_scale_support as sup  # noqa: E402

from memcli.memory import Memory  # noqa: E402
from memcli.providers.embedders import HashEmbedder  # noqa: E402


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

        db.execute, db.executemany = timed_execute, timed_executemany

    def _add(self, sql: str, params: Any, seconds: float) -> None:
        kind = kind_of(sql)
        self.spent[kind] += seconds
        self.calls[kind] += 1
        self.samples.setdefault(kind, (sql, params))


def location(engine: str, work: Path, dsn: str | None, name: str) -> str:
    if engine == "sqlite":
        return str(work / f"{name}.db")
    import psycopg

    assert dsn is not None
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    return dsn.rsplit("/", 1)[0] + "/" + name


def profile(loc: str, preload: int, batches: int, size: int,
            disabled: list[str]) -> dict[str, Any]:
    events = sup.corpus(preload) if preload else []
    extra = sup.extra_events(batches * size, copy=1, tenant=None)
    memory = Memory.open(loc, embedder=HashEmbedder())
    try:
        for start in range(0, len(events), 500):
            memory.ingest(events[start:start + 500])
        for name in disabled:  # after the load: only the measured batches go without
            memory.db.execute(f"ALTER TABLE memories DISABLE TRIGGER {name}")
        timer = Timer(memory.db)
        timer.on = True
        wall = 0.0
        for b in range(batches):
            part = extra[b * size:(b + 1) * size]
            t = time.perf_counter()
            report = memory.ingest(part)
            wall += time.perf_counter() - t
            assert len(report.created) == len(part), report
        timer.on = False
        return {"wall": wall, "events": batches * size, "spent": dict(timer.spent),
                "calls": dict(timer.calls), "samples": timer.samples, "db": memory.db}
    finally:
        memory.close()


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


def show(engine: str, out: dict[str, Any]) -> None:
    n = out["events"]
    stmt = sum(out["spent"].values())
    print(f"\n{engine}: {n} events in {out['wall']:.2f} s = {n / out['wall']:.1f} events/s"
          f" ({1000 * out['wall'] / n:.2f} ms/event; statements {1000 * stmt / n:.2f})")
    print(f"{'statement':<40} {'calls/event':>11} {'ms/event':>9} {'share':>6}")
    rows = sorted(out["spent"].items(), key=lambda kv: -kv[1])
    for kind, spent in rows:
        print(f"{kind:<40} {out['calls'][kind] / n:>11.2f} {1000 * spent / n:>9.3f}"
              f" {100 * spent / out['wall']:>5.1f}%")
    rest = out["wall"] - stmt
    print(f"{'rest (Python, BEGIN/lock/COMMIT)':<40} {'':>11} {1000 * rest / n:>9.3f}"
          f" {100 * rest / out['wall']:>5.1f}%")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--preload", type=int, default=5000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--disable-trigger", action="append", default=[],
                        help="a trigger on memories to disable for the measured batches")
    args = parser.parse_args(argv)
    engines = ("sqlite", "postgresql") if args.engine == "both" else (args.engine,)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="ingprof-") as tmp:
        server = None
        if "postgresql" in engines:
            from pg_support import running_server

            server = running_server()
        dsn = server.__enter__().dsn if server is not None else None
        try:
            for engine in engines:
                loc = location(engine, Path(tmp), dsn, "ingprof")
                out = profile(loc, args.preload, args.batches, args.size,
                              args.disable_trigger if engine == "postgresql" else [])
                show(engine, out)
                if args.explain and engine == "postgresql":
                    explain(loc, out["samples"])
        finally:
            if server is not None:
                server.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
