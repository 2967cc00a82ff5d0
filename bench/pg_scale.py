"""The scale benchmark: PostgreSQL beside SQLite in the same run.

    python -m bench.pg_scale --events 1000000     # the issue's size (see "needs" in the results)
    python -m bench.pg_scale --events 100000      # ~1 h on 2 busy cores (50k took 33 min)
    python -m bench.pg_scale --quick              # 400 events, 2 writers, hash embedder

What it measures, how, and the results: bench/README.md, "PostgreSQL beside SQLite at scale".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import perf_data as perf
from bench import pg_scale_report as report
from bench import pg_scale_support as sup
from bench.perf_query import db_size, page_cache_warm, time_process
from bench.pg_bench_support import create_database

BENCH = Path(__file__).resolve().parent

RESULTS = BENCH / "results"
SOURCE = BENCH / ".cache" / "perf-100000-e5-small-splade.db"
WRITERS = 8


def log(msg: str) -> None:
    print(f"[pg_scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_child(kind: str, spec: dict[str, Any], work: Path, name: str) -> subprocess.Popen:
    path = work / f"{name}.json"
    path.write_text(json.dumps(spec))
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "HOME": str(work)}
    return subprocess.Popen([sys.executable, "-m", "bench.pg_scale", "--child", kind, str(path)],
                            stdout=subprocess.PIPE, text=True, env=env, cwd=BENCH.parent)


def child_result(proc: subprocess.Popen) -> dict[str, Any]:
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"a child failed (exit {proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- models


def build_models(events: list[dict], queries: list[dict], source: Path, work: Path
                 ) -> tuple[Path, dict[str, Any]]:
    """The replay file (model ids, real query encodings) and the stored encodings of the
    corpus texts (each writer gets its own part of them)."""
    import apsw

    from memcli.config import EmbedderSettings, Settings
    from memcli.operations.memory import make_embedder, make_sparse

    texts = {e["content"]["text"] for e in events}
    conn = apsw.Connection(f"file:{source}?mode=ro&immutable=1",
                           flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    ids: dict[int, str] = {}
    for mid, content in conn.execute("SELECT id, content FROM memories"):
        if content in texts:
            ids[mid] = content
    vectors = {ids[m]: blob for m, blob in
               conn.execute("SELECT memory_id, embedding FROM memory_vectors") if m in ids}
    sparse: dict[str, dict[int, float]] = {}
    for term, mid, weight in conn.execute(
            "SELECT term_id, memory_id, weight FROM sparse_postings"):
        if mid in ids:
            sparse.setdefault(ids[mid], {})[term] = weight / 100  # store/sparse.py's SCALE
    conn.close()
    missing = texts - vectors.keys()
    if missing:
        raise SystemExit(f"{len(missing)} corpus texts have no stored vector in {source}")
    log(f"replay encodings: {len(vectors)} texts; encoding {len(queries)} queries for real")
    settings = Settings(db="unused.db", embedder=EmbedderSettings(provider="e5-small"))
    embedder, encoder = make_embedder(settings), make_sparse(settings)
    qtexts = sorted({q["text"] for q in queries})
    models = {"model_id": meta["embedder_model"], "dimension": int(meta["embedder_dimension"]),
              "sparse_model": meta.get("sparse_model"),
              "vocab_hash": meta.get("sparse_vocab"),
              "query_vectors": {t: embedder.embed_query(t).astype("float32").tobytes()
                                for t in qtexts},
              "query_sparse": {t: encoder.encode_query(t) for t in qtexts}}
    assert encoder.model_id == models["sparse_model"] and embedder.model_id == models["model_id"]
    path = work / "models.pickle"
    with open(path, "wb") as fh:
        pickle.dump(models, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return path, {"vectors": vectors, "sparse": sparse}


# ----------------------------------------------------------------------------- measurements


def writers(location: str, parts: list[list[dict]], models: Path | None,
            docs: dict[str, Any] | None, batch: int, work: Path, label: str) -> dict[str, Any]:
    """Start one writer process per part; all begin together; events/s over the wall time
    from the start signal to the last writer's end."""
    start = work / f"start-{label}"
    procs = []
    for k, part in enumerate(parts):
        events = work / f"events-{label}-{k}.pickle"
        with open(events, "wb") as fh:
            pickle.dump(part, fh, protocol=pickle.HIGHEST_PROTOCOL)
        own = work / f"docs-{label}-{k}.pickle"
        if docs is not None:
            texts = {e["content"]["text"] for e in part}
            with open(own, "wb") as fh:
                pickle.dump({key: {t: docs[key][t] for t in texts if t in docs[key]}
                             for key in ("vectors", "sparse")}, fh,
                            protocol=pickle.HIGHEST_PROTOCOL)
        procs.append(run_child("writer", {"location": location, "events": str(events),
                                          "models": str(models) if models else None,
                                          "docs": str(own) if docs is not None else None,
                                          "batch": batch, "start": str(start),
                                          "ready": str(work / f"ready-{label}-{k}")},
                               work, f"writer-{label}-{k}"))
    # the children open the database and load the models first
    while not all((work / f"ready-{label}-{k}").exists() for k in range(len(parts))):
        if any(p.poll() is not None for p in procs):
            for p in procs:  # the others would wait for the start file for ever
                p.kill()
            raise SystemExit(f"a writer of {label} ended before the start")
        time.sleep(0.05)
    t0 = time.time()
    start.touch()
    results = [child_result(p) for p in procs]
    wall = max(r["end"] for r in results) - t0
    total = sum(r["events"] for r in results)
    out = {"writers": len(parts), "events": total, "seconds": wall, "events_per_s": total / wall,
           "batch": batch, "busy_retries": sum(r["busy"] for r in results),
           "batch_ms_p50": perf.pct([r["batch_ms"]["p50"] for r in results], 50),
           "batch_ms_p95_max": max(r["batch_ms"]["p95"] for r in results)}
    log(f"  {label}: {total} events by {len(parts)} writers in {wall:.1f}s = "
        f"{out['events_per_s']:.0f}/s")
    return out


def by_tenant(events: list[dict]) -> list[list[dict]]:
    parts: dict[str, list[dict]] = {}
    for e in events:
        parts.setdefault(e["tenant_id"], []).append(e)
    return [parts[k] for k in sorted(parts)]


def round_robin(events: list[dict], n: int) -> list[list[dict]]:
    """Whole sessions dealt to n writers (a session's turns stay in order in one writer)."""
    sessions: dict[str, list[dict]] = {}
    for e in events:
        sessions.setdefault(e["session_id"], []).append(e)
    parts: list[list[dict]] = [[] for _ in range(n)]
    for turns in sessions.values():
        min(parts, key=len).extend(turns)
    return parts


def pg_size(dsn: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")  # what autovacuum does in time; sizes and plans settle
        memories = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
        database = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        rels = conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'm')"
            " ORDER BY 2 DESC").fetchall()
        indexes = conn.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind = 'i' ORDER BY 2 DESC LIMIT 8").fetchall()
    tables = sum(b for _, b in rels)
    return {"memories": memories, "bytes": database, "bytes_per_memory": database / memories,
            "tables_bytes": tables, "tables_bytes_per_memory": tables / memories,
            "largest": [(n, int(b)) for n, b in rels[:8]],
            "largest_indexes": [(n, int(b)) for n, b in indexes]}


def explain(dsn: str, server_log: Path, queries: list[dict], models: Path | None,
            work: Path) -> list[dict[str, Any]]:
    """Plans of every statement of one user-scoped and one tenant-wide query, logged by
    auto_explain in a child that runs them (then switched off again)."""
    import psycopg

    name = dsn.rsplit("/", 1)[1]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {name} SET session_preload_libraries = 'auto_explain'")
        conn.execute(f"ALTER DATABASE {name} SET auto_explain.log_min_duration = 0")
    mark = server_log.stat().st_size
    q = queries[-1]
    spec = {"location": dsn, "models": str(models) if models else None, "warmup": 0,
            "queries": [q]}
    child_result(run_child("query", spec, work, "explain"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {name} RESET ALL")
    with open(server_log, encoding="utf-8", errors="replace") as fh:
        fh.seek(mark)
        text = fh.read()
    return report.parse_plans(text)


def reference_process() -> float:
    runs = [time_process([sys.executable, "-c", "pass"], dict(os.environ))[0]
            for _ in range(7)]
    return perf.pct(runs[2:], 50)


def load_run(name: str, location: str, events: list[dict], batch: int, models: Path | None,
             docs: dict[str, Any] | None, work: Path, count: int = WRITERS) -> dict[str, Any]:
    """The load, one writer per tenant (with fewer writers than tenants, tenants dealt to them)."""
    tenants = by_tenant(events)
    parts = [[e for part in tenants[k::count] for e in part] for k in range(count)]
    log(f"{name}: load {len(events)} events, {count} writers ({len(tenants)} tenants)")
    return {"load": writers(location, parts, models, docs, batch, work, f"{name}-load")}


def measure_run(name: str, location: str, append: int, batch: int, queries: list[dict],
                warmup: int, models: Path | None, docs: dict[str, Any] | None, work: Path,
                count: int = WRITERS) -> dict[str, Any]:
    out: dict[str, Any] = {}
    spread = sup.extra_events(append, copy=1, tenant=None)
    out["append 8 tenants"] = writers(location, round_robin(spread, count), models, docs, batch,
                                      work, f"{name}-8t")
    one = sup.extra_events(append, copy=2, tenant="t0")
    out["append 1 tenant"] = writers(location, round_robin(one, count), models, docs, batch,
                                     work, f"{name}-1t")
    out["size"] = db_size(Path(location)) if name == "sqlite" else pg_size(location)
    if name == "sqlite":
        page_cache_warm(Path(location))
    log(f"{name}: {out['size']['bytes_per_memory']:.0f} bytes/memory; queries")
    spec = {"location": location, "models": str(models) if models else None,
            "warmup": warmup, "queries": queries}
    out["query"] = child_result(run_child("query", spec, work, f"query-{name}"))
    for scope in ("user", "tenant"):
        q = out["query"][scope]
        log(f"  query {scope}: p50 {q['p50']:.1f} ms, p95 {q['p95']:.1f} ms")
    return out


def server_settings(dsn: str) -> dict[str, str]:
    """The throw-away server's settings that bear on the figures."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        return dict(admin.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN ('shared_buffers',"
            " 'work_mem', 'fsync', 'synchronous_commit', 'server_version')").fetchall())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--append", type=int, default=4000, help="events per append run")
    parser.add_argument("--batch", type=int, default=100, help="events per ingest call")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--source", type=Path, default=SOURCE,
                        help="perf's 100k database (stored encodings)")
    parser.add_argument("--workdir", type=Path, default=None, help="for the SQLite file")
    parser.add_argument("--writers", type=int, default=WRITERS,
                        help="concurrent writer processes of the load and the appends")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--render", type=Path, help="only render a results JSON again")
    parser.add_argument("--name", default="pg-scale",
                        help="results file name in bench/results (without .md/.json)")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return sup.child_main(*args.child)
    if args.render:
        res = json.loads(args.render.read_text())
        (RESULTS / f"{args.name}.md").write_text(report.render(res))
        return 0
    if args.quick:
        # A smoke: every phase and check runs once at a small size (it measures nothing).
        args.events, args.append, args.queries = 400, 160, 10  # 160: a batch per writer
        args.writers = 2  # concurrent writers all the same, at a quarter of the processes
    from tests.support.pg import running_server

    revision = report.git_revision()  # at start: the code measured is the code imported now
    work = Path(tempfile.mkdtemp(prefix="memcli-pgscale-", dir=args.workdir))
    started = time.time()
    try:
        events = sup.corpus(args.events)
        warmup = 20 if not args.quick else 5
        queries = perf.generate_queries(args.queries + warmup, sup.scopes())
        models, docs = (None, None) if args.quick else build_models(
            events + sup.extra_events(args.append, 1, None)
            + sup.extra_events(args.append, 2, "t0"), queries, args.source, work)
        res: dict[str, Any] = {"events": args.events,
                               "users": sup.USERS,
                               "tenants": sup.TENANTS, "quick": args.quick,
                               "revision": revision, "machine": report.machine(),
                               "queries": args.queries, "batch": args.batch,
                               "writers": args.writers,
                               "started": datetime.now(UTC).isoformat(timespec="seconds")}
        res["python -c pass ms"] = reference_process()
        engines = args.engines.split(",")
        with contextlib.ExitStack() as stack:
            locations = {}
            if "sqlite" in engines:
                locations["sqlite"] = str(work / "scale.db")
            if "postgresql" in engines:
                server = stack.enter_context(running_server())
                res["postgres_settings"] = server_settings(server.dsn)
                locations["postgresql"] = create_database(server.dsn, "memcli_scale")
            for name, loc in locations.items():
                res[name] = load_run(name, loc, events, args.batch, models, docs, work,
                                     args.writers)
            for name, loc in locations.items():
                res[name].update(measure_run(name, loc, args.append, args.batch, queries, warmup,
                                             models, docs, work, args.writers))
                if name == "postgresql":
                    res[name]["server_rss_mb"] = report.server_rss_mb(server)
                save(res, args.quick, args.name)
                if name == "postgresql":
                    res[name]["plans"] = explain(loc, server.folder / "server.log", queries,
                                                 models, work)
                else:
                    for suffix in ("", "-wal", "-shm"):
                        Path(f"{loc}{suffix}").unlink(missing_ok=True)
        res["seconds"] = time.time() - started
        res["load_avg"] = perf.loadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save(res, args.quick, args.name)
    print(report.render(res))
    return 0


def save(res: dict[str, Any], quick: bool, name: str = "pg-scale") -> None:
    """The results so far (a long run that fails late keeps what it measured)."""
    if quick:
        return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=1) + "\n")
    (RESULTS / f"{name}.md").write_text(report.render(res))


if __name__ == "__main__":
    sys.exit(main())
