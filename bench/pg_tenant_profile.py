"""Where a tenant-wide query's time goes on PostgreSQL: each leg's SQL and each Python step.

    python -m bench.pg_tenant_profile build --memories 250000 --state /tmp/pgprof   # keeps
        # the server running until interrupted (Ctrl-C / SIGTERM stops and removes it)
    python -m bench.pg_tenant_profile profile --state /tmp/pgprof --name pg-tenant-profile-250k

`build` makes the database bench/pg_scale.py measures, at a size built in minutes: 10,000
events of its corpus (1,000 users in 8 tenants) ingested through `Memory.ingest` by 8
writers with the replayed models (`--source`: a database with the texts' stored encodings,
as pg_scale's), copied up to `--memories` by bench/pg_scale_bulk.py, then VACUUM ANALYZE.

`profile` runs pg_scale's queries (same generator and seed) in a warm process, each twice:
one user and tenant-wide, and splits each query's wall time into the steps of
`Memory.query` (memcli/operations/memory.py): the legs (memcli.retrieval.search.run_legs's
own per-leg timings), fusion and the ranking stages (`rank`), the rows of the kept hits
(`load_rows`), the hits' text (`_hit`: decryption of sealed rows) and the access/metrics
write. Then auto_explain logs EXPLAIN (ANALYZE, BUFFERS) of every statement of one
tenant-wide query, written to the results as they came.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench import perf
from bench import pg_scale as scale
from bench import pg_scale_bulk as bulk
from bench import pg_scale_support as sup

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
BASE = 10_000
_VECTOR = re.compile(r"\[-?[0-9][-0-9.e,]{200,}\]")
WARMUP = 20


def log(msg: str) -> None:
    print(f"[pg_tenant_profile {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build(args: argparse.Namespace) -> int:
    from tests.support.pg import running_server

    state = args.state
    state.mkdir(parents=True, exist_ok=True)
    events = sup.corpus(BASE)
    queries = perf.generate_queries(args.queries + WARMUP, sup.scopes())
    models, docs = scale.build_models(events, queries, args.source, state)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    with running_server() as server:
        scale.create_database(server.dsn, "memcli_scale")
        dsn = server.dsn.rsplit("/", 1)[0] + "/memcli_scale"
        t0 = time.time()
        scale.load_run("postgresql", dsn, events, 100, models, docs, state)
        copied = bulk.replicate(dsn, args.memories)
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        (state / "state.json").write_text(json.dumps({
            "dsn": dsn, "models": str(models), "log": str(server.folder / "server.log"),
            "queries": queries, "memories": copied["memories"],
            "build_seconds": time.time() - t0}))
        log(f"ready: {copied['memories']} memories in {time.time() - t0:.0f}s; {dsn}")
        try:
            while not stop["now"]:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


def one_query(memory: Any, text: str, filters: Any) -> dict[str, float]:
    """Memory.query's steps for a search without a session (no widening), each timed."""
    from memcli.retrieval import search
    from memcli.retrieval.stages import RankContext

    steps: dict[str, float] = {}
    t0 = time.perf_counter()
    legs_ms: dict[str, float] = {}
    legs = search.run_legs(memory.db, memory.embedder, text, filters, memory.retrieval,
                           timings=legs_ms, sparse=memory.sparse, reader=memory.reader())
    t1 = time.perf_counter()
    steps["legs (wall)"] = (t1 - t0) * 1000
    steps.update({f"leg {k}": v for k, v in legs_ms.items()})
    ranked = search.rank(RankContext(memory.db, filters, text, memory.retrieval), legs)
    t2 = time.perf_counter()
    steps["fuse + rank stages"] = (t2 - t1) * 1000
    kept = search.load_rows(memory.db, ranked[:10])
    t3 = time.perf_counter()
    steps["load rows"] = (t3 - t2) * 1000
    hits = [memory._hit(c, "full", "all") for c in kept]
    t4 = time.perf_counter()
    steps["hits (decrypt, text)"] = (t4 - t3) * 1000
    memory._after_read([h.id for h in hits], {
        "command": "query", "tenant_id": filters.tenant_id, "user_id": filters.user_id,
        "session_id": None, "lexical_hits": len(legs.get("lexical", [])),
        "sparse_hits": len(legs.get("sparse", [])), "vector_hits": len(legs.get("dense", [])),
        "entity_hits": len(legs.get("entity", [])), "retrieval_path": "all", "fallbacks": 0,
        "items": len(hits), "tokens_used": 0, "truncated": 0, "latency_ms": 0.0})
    t5 = time.perf_counter()
    steps["access + metrics write"] = (t5 - t4) * 1000
    steps["total"] = (t5 - t0) * 1000
    return steps


def profile(args: argparse.Namespace) -> int:
    state = json.loads((args.state / "state.json").read_text())
    dsn, queries = state["dsn"], state["queries"]
    spec = {"models": state["models"]}
    memory = sup.open_memory(dsn, spec)
    for q in queries[:WARMUP]:
        memory.query(q["text"], filters=memory.filters(tenant_id=q["tenant_id"]))
    import memcli

    code = Path(memcli.__file__).resolve().parent.parent  # PYTHONPATH may name another tree
    out: dict[str, Any] = {"memories": state["memories"], "code": str(code),
                           "revision": scale.report.git_revision(),
                           "load_start": perf.loadavg(), "queries": len(queries) - WARMUP}
    for scope in ("user", "tenant"):
        per_step: dict[str, list[float]] = {}
        full: list[float] = []
        scoped = [(q["text"], memory.filters(tenant_id=q["tenant_id"],
                                             user_id=q["user_id"] if scope == "user" else None))
                  for q in queries[WARMUP:]]
        # Memory.query as bench/pg_scale.py times it (each query once, in order), then the
        # steps in a second pass (the first pass warmed the same pages for both runs compared)
        for text, filters in scoped:
            t0 = time.perf_counter()
            memory.query(text, filters=filters)
            full.append((time.perf_counter() - t0) * 1000)
        for text, filters in scoped:
            for k, v in one_query(memory, text, filters).items():
                per_step.setdefault(k, []).append(v)
        out[scope] = {k: perf.summary(v) for k, v in per_step.items()}
        out[scope]["Memory.query"] = perf.summary(full)
        log(f"{scope}: Memory.query p50 {out[scope]['Memory.query']['p50']:.1f}"
            f" p95 {out[scope]['Memory.query']['p95']:.1f} ms")
    memory.close()
    out["plans"] = explain(dsn, Path(state["log"]), spec, queries[-args.explain:])
    out["load_end"] = perf.loadavg()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(out, indent=1) + "\n")
    (RESULTS / f"{args.name}.md").write_text(render(out, args.name))
    print(render(out, args.name))
    return 0


def explain(dsn: str, server_log: Path, spec: dict[str, Any], queries: list[dict]) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of every statement of tenant-wide queries (auto_explain in a
    fresh connection, its settings on the database for the time of the run)."""
    import psycopg

    name = dsn.rsplit("/", 1)[1]
    settings = {"session_preload_libraries": "auto_explain", "auto_explain.log_min_duration": "0",
                "auto_explain.log_analyze": "on", "auto_explain.log_buffers": "on"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for key, value in settings.items():
            conn.execute(f"ALTER DATABASE {name} SET {key} = '{value}'")
    mark = server_log.stat().st_size
    try:
        memory = sup.open_memory(dsn, spec)
        for q in queries:
            memory.query(q["text"], filters=memory.filters(tenant_id=q["tenant_id"]))
        memory.close()
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {name} RESET ALL")
    with open(server_log, encoding="utf-8", errors="replace") as fh:
        fh.seek(mark)
        text = fh.read()
    plans = [_VECTOR.sub("[...]", p.strip()) for p in text.split("LOG:  duration:")[1:]]
    # the statements of the queries, not those of opening the database
    return [p for p in plans if "Query Text" in p and p.split(" ", 1)[0] != "0.000"
            and not any(k in p for k in ("pg_tables", "to_reg", "FROM meta", "pg_type",
                                         "pg_attribute", "memcli_tenant()"))]


def render(out: dict[str, Any], name: str) -> str:
    lines = [f"# Tenant-wide query steps on PostgreSQL ({out['memories']:,} memories)", "",
             f"`python -m bench.pg_tenant_profile profile --name {name}`, memcli at"
             f" {out['revision']} ({out.get('code', '')});"
             f" {out['queries']} queries of bench/pg_scale.py's set, each one-user and"
             f" tenant-wide; load {out['load_start']} -> {out['load_end']}.", "",
             "| step (ms, p50 / p95) | one user | tenant-wide |", "|---|---:|---:|"]
    steps = list(out["tenant"])
    steps += [s for s in out["user"] if s not in steps]
    for step in steps:
        cells = [f"{out[s][step]['p50']:.1f} / {out[s][step]['p95']:.1f}" if step in out[s]
                 else "-" for s in ("user", "tenant")]
        lines.append(f"| {step} | {cells[0]} | {cells[1]} |")
    lines += ["", "Plans of the last tenant-wide queries (auto_explain, ANALYZE, BUFFERS):", ""]
    for plan in out["plans"]:
        lines += ["```", plan, "```", ""]
    return "\n".join(lines)


def compare(before: dict[str, Any], after: dict[str, Any]) -> str:
    """One table of two profiles of the same database (p50 / p95 ms, before -> after)."""
    lines = [f"Before: memcli at {before['revision']}, load {before['load_start']} ->"
             f" {before['load_end']}. After: memcli at {after['revision']}, load"
             f" {after['load_start']} -> {after['load_end']}. {after['queries']} queries,"
             f" {after['memories']:,} memories.", "",
             "| step (ms, p50 / p95) | one user, before | one user, after"
             " | tenant-wide, before | tenant-wide, after |", "|---|---:|---:|---:|---:|"]
    steps = list(after["tenant"])
    steps += [s for s in before["tenant"] if s not in steps]
    for step in steps:
        cells = []
        for scope in ("user", "tenant"):
            for run in (before, after):
                got = run[scope].get(step)
                cells.append(f"{got['p50']:.1f} / {got['p95']:.1f}" if got else "-")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("build", "profile", "compare"))
    parser.add_argument("--state", type=Path, help="build, profile: the database's folder")
    parser.add_argument("--runs", type=Path, nargs=2, help="compare: two profiles' JSON")
    parser.add_argument("--memories", type=int, default=250_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--source", type=Path, default=scale.SOURCE)
    parser.add_argument("--explain", type=int, default=1, help="tenant-wide queries explained")
    parser.add_argument("--name", default="pg-tenant-profile")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.mode == "compare":
        print(compare(*(json.loads(p.read_text()) for p in args.runs)), end="")
        return 0
    if args.state is None:
        parser.error("--state is required")
    return build(args) if args.mode == "build" else profile(args)


if __name__ == "__main__":
    sys.exit(main())
