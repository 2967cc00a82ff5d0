"""bench/locomo.py's measurement on one engine: the database to use (cached SQLite file,
temporary one, or PostgreSQL) and every configuration asked on it."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.locomo_data import _load_average
from bench.locomo_db import build_database, cached_database, open_memory
from bench.locomo_score import SESSION_RULES, evaluate, session_ask
from memcli.core.tokens import count_tokens

# --------------------------------------------------------------------------- main


def measure(
    location: Path | str,
    embedder: Any,
    sparse: Any,
    qs: list[dict[str, Any]],
    configs: list[str],
    session_configs: list[str],
    last: dict[str, str],
) -> dict[str, Any]:
    """Every configuration (then every session-scoped configuration and widening rule) asked
    on one database: the raw runs by name, as `evaluate` returns them."""
    runs: dict[str, dict[str, Any]] = {}
    session_runs: dict[str, dict[str, Any]] = {}
    with open_memory(location, embedder, sparse) as memory:
        count_tokens("warm up", memory.encoding)  # load the encoding outside the timings
        # Model loads are not query latency.
        embedder.embed_query("warm up")
        if sparse is not None:
            sparse.encode_query("warm up")
        for config in configs:
            t = time.perf_counter()
            runs[config] = evaluate(memory, qs, config)
            print(f"  {config}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
        for config in session_configs:
            for rule in SESSION_RULES:
                t = time.perf_counter()
                name = f"{config} / {rule}"
                session_runs[name] = evaluate(memory, qs, config, session_ask(rule, last))
                print(f"  {name}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return {"runs": runs, "session": session_runs, "load_avg_queries": _load_average()}


@contextlib.contextmanager
def engine_database(
    engine: str, args: argparse.Namespace, data_path: Path, data: list[dict[str, Any]],
    embedder: Any, sparse: Any, max_sessions: int | None,
) -> Iterator[tuple[Path | str, dict[str, Any]]]:
    """(location, ingest stats) of the database to measure on one engine, ingested through
    memcli's own `Memory.ingest` either way. SQLite: the cached file (a temporary one for
    --smoke). PostgreSQL: a fresh database on a throw-away server, or `--db URL` (never
    cached: PostgreSQL is ingested in every run)."""
    if engine == "postgresql":
        from bench import locomo_pg  # bench/; psycopg and the test server code only when asked for

        with locomo_pg.postgres_database(args.db) as url:
            print(f"ingesting into PostgreSQL ({locomo_pg.shown(url)}) ...", file=sys.stderr)
            ingest = build_database(url, embedder, sparse, data, max_sessions)
            yield url, {**ingest, "cached": False}
        return
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="memcli-locomo-") as tmp:
            path = Path(tmp) / "locomo.db"
            ingest = build_database(path, embedder, sparse, data, max_sessions)
            yield path, {**ingest, "cached": False}
        return
    yield cached_database(data_path, embedder, sparse, args.embedder, data, args.rebuild)


def measure_engine(
    engine: str,
    args: argparse.Namespace,
    data_path: Path,
    data: list[dict[str, Any]],
    embedder_name: str,
    max_sessions: int | None,
    qs: list[dict[str, Any]],
    configs: list[str],
    session_configs: list[str],
    last: dict[str, str],
    embedder: Any,
    sparse: Any,
) -> dict[str, Any]:
    """Ingest (or reuse the cache) and ask everything on one engine."""
    with engine_database(engine, args, data_path, data, embedder, sparse, max_sessions) as (
        location,
        ingest,
    ):
        measured = measure(location, embedder, sparse, qs, configs, session_configs, last)
    return {**measured, "ingest": ingest}
