"""PostgreSQL's sparse leg for a big scope: every vector of the scope scored (the plan before
schema 5), schema 5's GIN index over the vectors' term ids (every tenant's), and schema 6's over
(tenant_id, term ids), in the same run on the same rows.

    python -m bench.pg_sparse_gin --memories 100000 --queries 40 [--rounds 3] [--source DB]

Loads the first N memories of perf's 100k database (bench/.cache, made by bench/perf.py) and
their stored SPLADE weights into a throw-away server as 1,000 users in 8 tenants (as
bench/pg_sparse.py does), through memcli's store; without that database, perf's corpus with
SPLADE weights encoded here (bench/pg_sparse_corpus.py, the same 10k-vector base perf's 100k
database copies). Both indexes are built after the load (build time and size reported):
schema 6's as memcli makes it, schema 5's over a twin of the term function (the same body
under another name), so that each statement can only use its own index. Each of perf's
queries, encoded by the real SPLADE model and pruned as the leg prunes them, runs one-user and
tenant-wide through four statements alternating (the order flipped each round): "scan" (every
vector in the scope, the plan for a small scope), "terms" (schema 5: only memories sharing a
term, any tenant's), "tenant" (schema 6: only the scope's tenant's memories sharing a term,
`sparse.search`'s big-scope plan) and "picked" (what `sparse.search` runs: scan when the
scope estimate is small, tenant otherwise). The top 10s are compared with each other and with
the exact dot product in Python. Prints a markdown section and, with --explain, the plans.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import (
    perf,
    pg_sparse_corpus,
)
from bench import pg_scale_support as sup
from bench import pg_sparse as bench_sparse

BENCH = Path(__file__).resolve().parent

ARMS = ("scan", "terms", "tenant", "picked")
# Schema 5's index, over a twin of the term function (the planner matches an index
# expression by its text: the "terms" statement names the twin, the others the real one).
TWIN = "bench_sparse_term_array"


def log(msg: str) -> None:
    print(f"[pg_sparse_gin {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load(db: Any, rows: list[tuple], weights: dict[int, dict[int, int]]) -> dict[str, float]:
    """Memories by COPY, the vectors through memcli's store, both GIN indexes after them."""
    from memcli.store import sparse as sparse_sql
    from memcli.store.postgres import migrations

    ts = "2025-01-01T00:00:00Z"
    with db.conn.cursor().copy("COPY memories (id, content, tenant_id, user_id, session_id,"
                               " event_time, created_at, updated_at) FROM STDIN") as copy:
        for mid, content, tenant, user, session in rows:
            copy.write_row([mid, content, tenant, user, session, ts, ts, ts])
    db.execute(f"DROP INDEX {migrations.SPARSE_TERMS_INDEX_NAME}")
    docs = [(mid, {t: w / sparse_sql.SCALE for t, w in weights[mid].items()})
            for mid, *_ in rows if mid in weights]
    for start in range(0, len(docs), 2000):
        with db.transaction():
            sparse_sql.insert_postings(db, docs[start:start + 2000])
    body = db.scalar("SELECT prosrc FROM pg_proc WHERE proname = 'memcli_sparse_term_array'")
    db.execute(f"CREATE FUNCTION {TWIN}(v sparsevec) RETURNS integer[] LANGUAGE sql IMMUTABLE"
               f" PARALLEL SAFE STRICT AS $body${body}$body$")
    timing = {}
    for name, statement in (
            ("tenant", migrations.SPARSE_TERMS_INDEX),
            ("terms", f"CREATE INDEX bench_sparse_terms ON memory_sparse USING gin ({TWIN}(vec))")):
        t = time.perf_counter()
        db.execute(statement)
        timing[name] = time.perf_counter() - t
    for table in ("memories", "memory_sparse", "sparse_df"):
        db.execute(f"VACUUM ANALYZE {table}")
    return timing


def statement(kind: str, query: dict[int, float], filters: Any) -> tuple[str, list]:
    """The leg's statement: "scan" and "tenant" as `sparse.search` writes them (small and big
    scope), "terms" as it was at schema 5 (over the twin function)."""
    from memcli.store.postgres import sparse as pg_sparse

    where, params = filters.sql()
    shared, extra = "", []
    if kind == "terms":
        shared, extra = f" AND {TWIN}(s.vec) && ?::integer[]", [sorted(query)]
    elif kind == "tenant":
        shared = " AND s.tenant_id = ? AND memcli_sparse_term_array(s.vec) && ?::integer[]"
        extra = [filters.tenant_id, sorted(query)]
    sql = f"""SELECT id, score FROM (
        SELECT m.id, inner_product(s.vec, q.v) / 100.0 AS score
        FROM (SELECT ?::sparsevec AS v) q, memories m JOIN memory_sparse s ON s.memory_id = m.id
        WHERE {where}{shared} ORDER BY score DESC, m.id LIMIT 10) best
        WHERE score > 0 ORDER BY score DESC, id"""
    return sql, [pg_sparse.literal(query), *params, *extra]


def explain(db: Any, kind: str, query: dict[int, float], filters: Any) -> str:
    sql, params = statement(kind, query, filters)
    return "\n".join(r[0] for r in db.execute(
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--source", type=Path, default=bench_sparse.SOURCE)
    parser.add_argument("--explain", action="store_true", help="print the plans of query 1")
    args = parser.parse_args()

    from memcli.config import RetrievalSettings, Settings
    from memcli.operations.memory import make_sparse
    from memcli.store import search_sql as store_search
    from memcli.store.filters import Filters
    from memcli.store.postgres import connect
    from memcli.store.postgres import sparse as pg_sparse
    from tests.support.pg import running_server

    if args.source.exists():
        rows, weights = bench_sparse.read_source(args.source, args.memories)
        origin = f"perf's database ({args.source.name})"
    else:
        rows, weights = pg_sparse_corpus.corpus(args.memories)
        origin = (f"perf's corpus, {pg_sparse_corpus.BASE:,} texts SPLADE-encoded and their"
                  " vectors repeated (bench/pg_sparse_corpus.py)")
    queries = perf.generate_queries(args.queries, sup.scopes())
    encoder = make_sparse(Settings(db="unused.db"))
    encoded = [encoder.encode_query(q["text"]) for q in queries]
    settings = RetrievalSettings()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    plans: list[str] = []
    with running_server() as server:
        db = connect(server.dsn)
        try:
            t0 = time.perf_counter()
            timing = load(db, rows, weights)
            log(f"loaded {len(rows)} memories in {time.perf_counter() - t0:.0f} s")
            heap = int(db.scalar("SELECT pg_total_relation_size('memory_sparse')"))
            sizes = {name: int(db.scalar("SELECT pg_relation_size(?::regclass)", (index,)))
                     for name, index in (("tenant", "memory_sparse_tenant_terms"),
                                         ("terms", "bench_sparse_terms"))}
            df, max_df, members = bench_sparse.pruning_and_scopes(db, rows, settings)
            times: dict[tuple[str, str], list[float]] = {}
            verdicts: dict[tuple[str, str], list[str]] = {}
            same: dict[str, int] = {}
            picked: dict[str, int] = {}
            slow: dict[tuple[int, str], list[float]] = {}
            for rnd in range(args.rounds):
                for qi, (q, vec) in enumerate(zip(queries, encoded, strict=True)):
                    kept = {t: w for t, w in vec.items() if df.get(t, 0) <= max_df}
                    for scope, user in (("one user", q["user_id"]), ("tenant-wide", None)):
                        filters = Filters(tenant_id=q["tenant_id"], user_id=user)
                        small = store_search.estimate_scope(
                            db, filters, store_search.SCOPE_COUNT_CAP) <= store_search.SMALL_SCOPE
                        if rnd == 0:
                            picked[scope] = picked.get(scope, 0) + (not small)
                        if args.explain and rnd == 0 and qi == 0 and kept:
                            for kind in ARMS[:3]:
                                plans.append(f"{scope}, {kind}:\n"
                                             + explain(db, kind, kept, filters))

                        def run(kind: str, f: Any = filters, k: dict = kept) -> list:
                            if not k:
                                return []
                            if kind == "terms":
                                sql, params = statement(kind, k, f)
                                return [(int(i), float(sc)) for i, sc in db.execute(sql, params)]
                            return pg_sparse.search(db, k, f, 10, kind == "scan")
                        arms = [("scan", lambda: run("scan")), ("terms", lambda: run("terms")),
                                ("tenant", lambda: run("tenant")),
                                ("picked", lambda s=small: run("scan" if s else "tenant"))]
                        if rnd % 2:
                            arms.reverse()
                        got = {}
                        for name, fn in arms:
                            t = time.perf_counter()
                            got[name] = fn()
                            times.setdefault((scope, name), []).append(
                                (time.perf_counter() - t) * 1000)
                            if scope == "tenant-wide":
                                slow.setdefault((qi, name), []).append(times[(scope, name)][-1])
                        if rnd == 0:
                            truth = bench_sparse.exact(vec, weights,
                                                    members.get((q["tenant_id"], user), []),
                                                    df, max_df, 10)
                            for name in ARMS:
                                verdicts.setdefault((scope, name), []).append(
                                    bench_sparse.why(got[name], truth))
                            same[scope] = same.get(scope, 0) + (
                                got["scan"] == got["terms"] == got["tenant"])
        finally:
            db.close()

    n = len(rows)
    print(f"\n## {started[:10]}, the sparse leg's term index by tenant ({n:,} memories)\n")
    print(f"`python -m bench.pg_sparse_gin --memories {args.memories} --queries {args.queries}"
          f" --rounds {args.rounds}`, started {started}; {origin}; 1,000 users in 8 tenants;"
          " the four statements alternating per query (the order flipped each round), one"
          " server.\n")
    print(f"memory_sparse (table + its indexes) {heap / 2**20:,.0f} MiB ({heap / n:,.0f}"
          f" B/memory). GIN (tenant_id, term ids) {sizes['tenant'] / 2**20:,.1f} MiB"
          f" ({sizes['tenant'] / n:,.0f} B/memory, built in {timing['tenant']:.1f} s);"
          f" GIN (term ids), schema 5's, {sizes['terms'] / 2**20:,.1f} MiB"
          f" ({sizes['terms'] / n:,.0f} B/memory, {timing['terms']:.1f} s). Scopes above"
          f" {store_search.SMALL_SCOPE:,} memories picked the index plan: "
          f"{picked.get('one user', 0)} of {len(queries)} one-user, "
          f"{picked.get('tenant-wide', 0)} of {len(queries)} tenant-wide.\n")
    print("| sparse leg, p50 / p95 | scan | terms (schema 5) | tenant (schema 6) | picked |"
          " terms / tenant (p50) |")
    print("|---|---:|---:|---:|---:|---:|")
    for scope in ("one user", "tenant-wide"):
        cells = [f"{statistics.median(times[(scope, a)]):.1f} /"
                 f" {perf.pct(times[(scope, a)], 95):.1f} ms" for a in ARMS]
        ratio = statistics.median(times[(scope, "terms")]) / statistics.median(
            times[(scope, "tenant")])
        print(f"| {scope} | {' | '.join(cells)} | {ratio:.2f}x |")
    for scope in ("one user", "tenant-wide"):
        cells = []
        for name in ARMS:
            counted: dict[str, int] = {}
            for v in verdicts[(scope, name)]:
                counted[v] = counted.get(v, 0) + 1
            cells.append(", ".join(f"{v} {c}" for v, c in sorted(counted.items())))
        print(f"| top 10 against the exact dot product, {scope} | {' | '.join(cells)} | |")
    print(f"\nscan, terms and tenant return the same top 10 (ids and scores): {same['one user']}"
          f" of {len(queries)} one-user, {same['tenant-wide']} of {len(queries)} tenant-wide.")
    worst = sorted(range(len(queries)), key=lambda i: -statistics.median(slow[(i, "terms")]))[:5]
    print("\nslowest tenant-wide queries under schema 5's index (median ms scan / terms /"
          " tenant; sum of the kept terms' df, every tenant):")
    for i in worst:
        kept_df = sum(df.get(t, 0) for t in encoded[i] if df.get(t, 0) <= max_df)
        print(f"- query {i}: {statistics.median(slow[(i, 'scan')]):.0f} /"
              f" {statistics.median(slow[(i, 'terms')]):.0f} /"
              f" {statistics.median(slow[(i, 'tenant')]):.0f} ms; df sum {kept_df:,}")
    for p in plans:
        print(f"\n```\n{p}\n```")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
