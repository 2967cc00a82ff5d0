"""SPLADE on PostgreSQL: one sparsevec per memory (memcli's store) against the postings table it
replaced, at scale, in one database, the two statements alternating.

    python -m bench.pg_sparse --memories 54000 --queries 40 [--source PERF_DB]

Loads the first N memories of perf's 100k database (bench/.cache, made by bench/perf.py) and
their stored SPLADE weights into a throw-away server, as 1,000 users in 8 tenants (users per
session, as bench/pg_scale_support.corpus assigns them): memcli's schema (memory_sparse.vec and
sparse_df written by memcli's own store code) plus, beside it, the old layout (`old_postings`,
the session-7 table with its primary key). Queries: perf's query set encoded by the real SPLADE
model. Each query runs one-user and tenant-wide, old and new statements alternating, `--rounds`
times; the top 10s are compared with each other and with the exact dot product in Python
(float64 over the stored integers), which says why a top 10 differs (an exact tie broken
otherwise, a near tie within float error, or a real difference). Prints a markdown section.

`--column` adds a third arm: the same vectors as a column of a copy of `memories`
(`memories_wide`, its own scope index), scored without the join, and the lexical leg's
statement on both tables (what the wider row costs other queries).
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import perf
from bench import pg_scale_support as sup

BENCH = Path(__file__).resolve().parent

SOURCE = BENCH / ".cache" / "perf-100000-e5-small-splade.db"
OLD_DDL = """CREATE TABLE old_postings (
    term_id integer NOT NULL, memory_id bigint NOT NULL, weight smallint NOT NULL,
    PRIMARY KEY (term_id, memory_id))"""


def log(msg: str) -> None:
    print(f"[pg_sparse {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def read_source(source: Path, n: int) -> tuple[list[tuple], dict[int, dict[int, int]]]:
    import apsw

    conn = apsw.Connection(f"file:{source}?mode=ro&immutable=1",
                           flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    rng = random.Random(7)
    owner: dict[str, int] = {}
    rows = []
    for mid, content, session in conn.execute(
            "SELECT id, content, session_id FROM memories ORDER BY id LIMIT ?", (n,)):
        user = owner.setdefault(session or "", rng.randrange(sup.USERS))
        rows.append((mid, content, sup.tenant_of(user), f"u{user:04d}", session))
    top = rows[-1][0]
    weights: dict[int, dict[int, int]] = {}
    for term, mid, weight in conn.execute(
            "SELECT term_id, memory_id, weight FROM sparse_postings WHERE memory_id <= ?", (top,)):
        weights.setdefault(mid, {})[term] = weight
    conn.close()
    return rows, weights


def load(db: Any, rows: list[tuple], weights: dict[int, dict[int, int]]) -> None:
    """Memories by COPY; the sparse vectors and sparse_df through memcli's store (the stored
    integers / SCALE are what ingest would pass); the old postings by COPY."""
    from memcli.store import sparse as sparse_sql

    ts = "2025-01-01T00:00:00Z"
    with db.conn.cursor().copy("COPY memories (id, content, tenant_id, user_id, session_id,"
                               " event_time, created_at, updated_at) FROM STDIN") as copy:
        for mid, content, tenant, user, session in rows:
            copy.write_row([mid, content, tenant, user, session, ts, ts, ts])
    docs = [(mid, {t: w / sparse_sql.SCALE for t, w in weights[mid].items()})
            for mid, *_ in rows if mid in weights]
    for start in range(0, len(docs), 2000):
        with db.transaction():
            sparse_sql.insert_postings(db, docs[start:start + 2000])
    db.execute(OLD_DDL)
    buf = io.StringIO()
    for mid in sorted(weights):
        for term, w in weights[mid].items():
            buf.write(f"{term}\t{mid}\t{w}\n")
    with db.conn.cursor().copy("COPY old_postings FROM STDIN") as copy:
        copy.write(buf.getvalue())
    for table in ("memories", "memory_sparse", "old_postings", "sparse_df"):
        db.execute(f"VACUUM ANALYZE {table}")


def old_search(db: Any, query: dict[int, float], filters: Any, limit: int, max_df: int,
               small: bool) -> list[tuple[int, float]]:
    """The former store/sparse.search over the postings (its statement, on old_postings)."""
    from memcli.store.postgres import legs

    marks = ",".join("?" * len(query))
    frequent = {t for (t,) in db.execute(
        f"SELECT term_id FROM sparse_df WHERE term_id IN ({marks}) AND df > ?",
        [*query, max_df])}
    kept = [(t, w) for t, w in query.items() if t not in frequent]
    if not kept:
        return []
    ctes = f"""q(term, w) AS (VALUES {",".join("(?, ?)" for _ in kept)}),
            hits AS (SELECT p.memory_id AS id, q.w * p.weight AS w
                     FROM q JOIN old_postings p ON p.term_id = q.term)"""
    scored = "SELECT id, sum(w) / 100.0 AS score FROM hits WHERE {in_scope} GROUP BY id"
    return legs.best_in_scope(db, ctes, scored, [v for p in kept for v in p], filters, limit,
                              small)


def exact(query: dict[int, float], weights: dict[int, dict[int, int]], members: list[int],
          df: dict[int, int], max_df: int, limit: int) -> list[tuple[int, float]]:
    kept = {t: w for t, w in query.items() if df.get(t, 0) <= max_df}
    scores = []
    for mid in members:
        stored = weights.get(mid, {})
        s = sum(w * stored[t] for t, w in kept.items() if t in stored) / 100
        if s > 0:
            scores.append((mid, s))
    return sorted(scores, key=lambda h: (-h[1], h[0]))[:limit]


def why(got: list[tuple[int, float]], truth: list[tuple[int, float]]) -> str:
    """'same', or how `got` differs from the exact top 10."""
    if [i for i, _ in got] == [i for i, _ in truth]:
        return "same"
    if {i for i, _ in got} == {i for i, _ in truth}:
        kind = "order"
    else:
        kind = "set"
    exact_score = dict(truth)
    for (a, _), (b, _) in zip(got, truth, strict=False):
        if a != b:
            sa, sb = exact_score.get(a), exact_score.get(b)
            if sa is not None and sa == sb:
                return f"{kind}: exact tie broken out of id order"
            if sa is not None and sb is not None and abs(sa - sb) <= 1e-6 * max(abs(sb), 1):
                return f"{kind}: near tie (within 1e-6)"
            return f"{kind}: real difference"
    return f"{kind}: length"


def add_wide(db: Any) -> None:
    """memories_wide: memories with the sparsevec as a column (the layout not chosen)."""
    db.execute("CREATE TABLE memories_wide AS SELECT m.*, s.vec FROM memories m"
               " JOIN memory_sparse s ON s.memory_id = m.id")
    db.execute("ALTER TABLE memories_wide ADD PRIMARY KEY (id)")
    db.execute("CREATE INDEX memories_wide_scope ON memories_wide"
               " (tenant_id, user_id, session_id, state)")
    db.execute("CREATE INDEX memories_wide_fts ON memories_wide USING gin (tenant_id, fts)")
    db.execute("VACUUM ANALYZE memories_wide")


def column_arms(db: Any, text: str, vec: dict[int, float], filters: Any) -> list:
    """The sparse statement over memories_wide, and the lexical leg's statement on memories
    and on memories_wide (timed only)."""
    from memcli.retrieval import text as qtext
    from memcli.store.postgres import legs
    from memcli.store.postgres import sparse as pg_sparse

    where, params = filters.sql()
    wide = f"""SELECT id, score FROM (
        SELECT m.id, inner_product(m.vec, ?::sparsevec) / 100.0 AS score FROM memories_wide m
        WHERE {where} ORDER BY score DESC, m.id LIMIT 10) b WHERE score > 0"""
    side = wide.replace("inner_product(m.vec,", "inner_product(s.vec,").replace(
        "FROM memories_wide m", "FROM memories m JOIN memory_sparse s ON s.memory_id = m.id")
    literal = pg_sparse.literal(vec)  # (no pruning in either: the two layouts alone)
    arms = [("statement, side table", lambda: db.execute(side, [literal, *params])),
            ("statement, column", lambda: db.execute(wide, [literal, *params]))]
    terms = list(qtext.lexical_query(text).terms)
    if terms:
        lexical = legs.bm25_sql(len(terms), where)
        args = [*terms, " ".join(terms), 0.5, *params, 50]
        arms += [("lexical on memories", lambda: db.execute(lexical, args)),
                 ("lexical on memories_wide", lambda: db.execute(
                     lexical.replace("FROM memories m", "FROM memories_wide m"), args))]
    return arms


def size(db: Any, table: str) -> int:
    return int(db.scalar("SELECT pg_total_relation_size(?::regclass)", (table,)))


def pruning_and_scopes(db: Any, rows: list[tuple], settings: Any
                       ) -> tuple[dict[int, int], int, dict[tuple, list[int]]]:
    """The stored document frequencies, the pruning cut `max_df` as memcli computes it, and
    the memory ids of each (tenant, user) and (tenant, None) scope of the loaded rows."""
    df = dict(db.execute("SELECT term_id, df FROM sparse_df"))
    total = int(db.scalar("SELECT max(id) FROM memories"))
    max_df = max(settings.sparse_max_df, int(settings.sparse_max_df_ratio * total))
    members: dict[tuple, list[int]] = {}
    for mid, _, tenant, user, _ in rows:
        members.setdefault((tenant, user), []).append(mid)
        members.setdefault((tenant, None), []).append(mid)
    return df, max_df, members


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=54_000)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--column", action="store_true",
                        help="also time the vectors as a column of (a copy of) memories")
    args = parser.parse_args()

    from memcli.config import RetrievalSettings, Settings
    from memcli.operations.memory import make_sparse
    from memcli.store import search_sql as store_search
    from memcli.store import sparse as sparse_sql
    from memcli.store.filters import Filters
    from memcli.store.postgres import connect
    from tests.support.pg import running_server

    rows, weights = read_source(args.source, args.memories)
    queries = perf.generate_queries(args.queries, sup.scopes())
    encoder = make_sparse(Settings(db="unused.db"))
    encoded = [encoder.encode_query(q["text"]) for q in queries]
    settings = RetrievalSettings()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with running_server() as server:
        db = connect(server.dsn)
        try:
            t0 = time.perf_counter()
            load(db, rows, weights)
            log(f"loaded {len(rows)} memories in {time.perf_counter() - t0:.0f} s")
            new_bytes, old_bytes = size(db, "memory_sparse"), size(db, "old_postings")
            wide_heap = (0, 0)
            if args.column:
                add_wide(db)
                wide_heap = tuple(int(db.scalar("SELECT pg_relation_size(?::regclass)", (t,)))
                                  for t in ("memories", "memories_wide"))
            df, max_df, members = pruning_and_scopes(db, rows, settings)
            times: dict[tuple[str, str], list[float]] = {}
            verdicts: dict[tuple[str, str], list[str]] = {}
            same: dict[str, int] = {}
            for rnd in range(args.rounds):
                for q, vec in zip(queries, encoded, strict=True):
                    for scope, user in (("one user", q["user_id"]), ("tenant-wide", None)):
                        filters = Filters(tenant_id=q["tenant_id"], user_id=user)
                        small = store_search.estimate_scope(
                            db, filters, store_search.SCOPE_COUNT_CAP) <= store_search.SMALL_SCOPE
                        arms = [("old", lambda f=filters, s=small, v=vec: old_search(
                                    db, v, f, 10, max_df, s)),
                                ("new", lambda f=filters, s=small, v=vec: sparse_sql.search(
                                    db, v, f, 10, max_df, s))]
                        if args.column:
                            arms += column_arms(db, q["text"], vec, filters)
                        if rnd % 2:
                            arms.reverse()
                        got = {}
                        for name, fn in arms:
                            t = time.perf_counter()
                            got[name] = fn()
                            times.setdefault((scope, name), []).append(
                                (time.perf_counter() - t) * 1000)
                        if rnd == 0:
                            truth = exact(vec, weights, members.get((q["tenant_id"], user), []), df,
                                          max_df, 10)
                            for name in ("old", "new"):
                                verdicts.setdefault((scope, name), []).append(
                                    why(got[name], truth))
                            same[scope] = same.get(scope, 0) + (
                                [i for i, _ in got["old"]] == [i for i, _ in got["new"]])
        finally:
            db.close()

    n = len(rows)
    print(f"\n## {started[:10]}, pgsparse: SPLADE as sparsevec against postings "
          f"({n:,} memories)\n")
    print(f"`python -m bench.pg_sparse --memories {args.memories} --queries {args.queries}"
          f" --rounds {args.rounds}{' --column' if args.column else ''}`, started {started};"
          " 1,000 users in 8 tenants; old and new "
          "statements alternating per query (the order flipped each round), one server.\n")
    print("| | postings (old) | sparsevec (new) |\n|---|---:|---:|")
    print(f"| sparse storage, table + indexes | {old_bytes / 2**20:,.0f} MiB"
          f" ({old_bytes / n:,.0f} B/memory) | {new_bytes / 2**20:,.0f} MiB"
          f" ({new_bytes / n:,.0f} B/memory) |")
    for scope in ("one user", "tenant-wide"):
        cells = []
        for name in ("old", "new"):
            values = times[(scope, name)]
            cells.append(f"{statistics.median(values):.1f} / {perf.pct(values, 95):.1f} ms")
        ratio = statistics.median(times[(scope, "old")]) / statistics.median(
            times[(scope, "new")])
        print(f"| sparse leg, {scope}, p50 / p95 | {cells[0]} | {cells[1]} ({ratio:.1f}x) |")
    if args.column:
        for scope in ("one user", "tenant-wide"):
            for name in ("statement, side table", "statement, column", "lexical on memories",
                         "lexical on memories_wide"):
                values = times.get((scope, name), [])
                if values:
                    print(f"| {name}, {scope}, p50 / p95 | | {statistics.median(values):.1f}"
                          f" / {perf.pct(values, 95):.1f} ms |")
        print(f"| heap of memories / memories_wide | | {wide_heap[0] / 2**20:,.0f} /"
              f" {wide_heap[1] / 2**20:,.0f} MiB |")
    for scope in ("one user", "tenant-wide"):
        cells = []
        for name in ("old", "new"):
            counted = {}
            for v in verdicts[(scope, name)]:
                counted[v] = counted.get(v, 0) + 1
            cells.append(", ".join(f"{v} {c}" for v, c in sorted(counted.items())))
        print(f"| top 10 against the exact dot product, {scope} | {cells[0]} | {cells[1]} |")
    print(f"| same top 10, old vs new | | {same['one user']} of {len(queries)} (one user),"
          f" {same['tenant-wide']} of {len(queries)} (tenant-wide) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
