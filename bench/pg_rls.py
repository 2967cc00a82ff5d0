"""What row-level security costs a tenant role's queries on PostgreSQL (design (c) of
docs/design/postgresql.md).

A throw-away PostgreSQL 18 (tests/support/pg.py). One database, tenants `a` (the big one),
`b`, `c`; users u0..u24 per tenant; the hash embedder, no SPLADE. The same queries run through
memcli (`Memory.query`) as the schema owner (not bound by RLS) and as a login role bound to
tenant `a` (`memcli pg grant-tenant`), scoped to one user and tenant-wide. Reported: p50/p95 ms
per mode and scope, and which indexes the legs' plans use in each mode (auto_explain, plans
only; the bound session is the superuser's connection after SET SESSION AUTHORIZATION, so that
auto_explain can be loaded first).

    python -m bench.pg_rls                 # ~12k memories, writes bench/results/pg-rls.md
    python -m bench.pg_rls --quick         # CI smoke: 600 memories, prints only
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.pg_bench_support import scratch_database
from memcli.operations.memory import Memory
from memcli.providers.embedders import HashEmbedder
from memcli.retrieval.text import lexical_query
from memcli.store import search_sql as search
from memcli.store.postgres import tenants

REPO_ROOT = Path(__file__).resolve().parents[1]


WORDS = ("deploy", "release", "invoice", "garden", "quince", "lisbon", "piano", "tennis",
         "budget", "kernel", "sailing", "recipe", "museum", "train", "coffee", "printer")
QUERIES = ("deploy release budget", "garden quince recipe", "piano museum lisbon",
           "kernel printer coffee", "tennis sailing train")
INDEXES = ("memories_fts", "memories_trgm", "memory_vectors_hnsw", "memories_scope",
           "memory_vectors_scope", "memories_pkey")


def records(tenant: str, count: int) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        words = " ".join(WORDS[(i * k + len(tenant)) % len(WORDS)] for k in (1, 3, 7))
        out.append({"event_id": f"{tenant}-{i}", "tenant_id": tenant, "user_id": f"u{i % 25}",
                    "session_id": f"{tenant}-s{i % 100}", "ts": f"2025-01-01T00:00:{i % 60:02d}Z",
                    "content": {"text": f"note {i} of {tenant}: {words} at step {i % 97}"
                                        + (" 東京の駅で会う" if i % 10 == 0 else "")}})
    return out


def build(url: str, sizes: dict[str, int]) -> None:
    with Memory.open(url, embedder=HashEmbedder(64)) as memory:
        for tenant, count in sizes.items():
            batch = records(tenant, count)
            for start in range(0, len(batch), 500):
                memory.ingest(batch[start:start + 500])
        memory.db.execute("ANALYZE")


def timings(urls: dict[str, str], tenant: str, repeat: int) -> dict[str, dict[str, Any]]:
    """p50/p95 ms per (mode, scope); the modes alternate query by query, so a change of the
    machine's load (other processes share its 2 cores) falls on both alike."""
    memories = {mode: Memory.open(url, embedder=HashEmbedder(64)) for mode, url in urls.items()}
    out: dict[str, dict[str, Any]] = {mode: {} for mode in urls}
    try:
        for scope, extra in (("one user", {"user_id": "u3"}), ("tenant-wide", {})):
            filters = {m: mem.filters(tenant_id=tenant, **extra) for m, mem in memories.items()}
            times: dict[str, list[float]] = {mode: [] for mode in urls}
            for i in range(repeat + len(QUERIES)):
                for mode, memory in memories.items():
                    t = time.perf_counter()
                    memory.query(QUERIES[i % len(QUERIES)], filters=filters[mode],
                                 record_access=False)
                    if i >= len(QUERIES):  # the first round warms caches
                        times[mode].append((time.perf_counter() - t) * 1000)
            for mode, values in times.items():
                values.sort()
                out[mode][scope] = {"p50": statistics.median(values),
                                    "p95": values[min(len(values) - 1, int(len(values) * 0.95))]}
    finally:
        for memory in memories.values():
            memory.close()
    return out


def leg_timings(urls: dict[str, str], tenant: str, repeat: int) -> dict[str, dict[str, float]]:
    """p50 ms of the lexical and dense legs alone, per (mode, scope), modes alternating."""
    from memcli.store.postgres.connection import PgDatabase

    embedder = HashEmbedder(64)
    memories = {mode: Memory(PgDatabase(url), tenant=tenant) for mode, url in urls.items()}
    out: dict[str, dict[str, float]] = {}
    try:
        for scope, extra in (("one user", {"user_id": "u3"}), ("tenant-wide", {})):
            for leg in ("lexical", "dense"):
                times: dict[str, list[float]] = {mode: [] for mode in urls}
                for i in range(repeat):
                    q = QUERIES[i % len(QUERIES)]
                    blob = embedder.embed_query(q).astype("float32").tobytes()
                    for mode, memory in memories.items():
                        filters = memory.filters(tenant_id=tenant, **extra)
                        t = time.perf_counter()
                        if leg == "lexical":
                            search.lexical(memory.db, lexical_query(q), filters, 200)
                        else:
                            scope_rows = search.estimate_scope(memory.db, filters,
                                                                cap=search.SCOPE_COUNT_CAP)
                            search.dense(memory.db, blob, filters, 200, scope_rows)
                        times[mode].append((time.perf_counter() - t) * 1000)
                for mode, values in times.items():
                    out.setdefault(mode, {})[f"{leg}, {scope}"] = statistics.median(values)
    finally:
        for memory in memories.values():
            memory.close()
    return out


def plans(url: str, role: str | None, tenant: str, details: set[str]) -> dict[str, set[str]]:
    """Index names in the plans of one query per scope, as the owner or bound `role`."""
    from memcli.store.postgres.connection import PgDatabase

    db = PgDatabase(url)
    notices: list[str] = []
    db.conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    for statement in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                      "SET auto_explain.log_level = notice", "SET client_min_messages = notice",
                      "SET auto_explain.log_nested_statements = on"):
        db.conn.execute(statement)
    if role is not None:
        db.conn.execute(f'SET SESSION AUTHORIZATION "{role}"')
    out = {}
    memory = Memory(db, embedder=HashEmbedder(64), tenant=tenant)
    try:
        for scope, extra in (("one user", {"user_id": "u3"}), ("tenant-wide", {})):
            notices.clear()
            filters = memory.filters(tenant_id=tenant, **extra)
            memory.query(QUERIES[0], filters=filters, record_access=False)
            # The lexical leg runs on a second connection (Memory.reader), which has no
            # auto_explain: run it, and the trigram leg (CJK queries only), here.
            search.lexical(db, lexical_query(QUERIES[0]), filters, 200)
            search.trigram(db, lexical_query("東京の駅"), filters, 200)
            text = "\n".join(notices)
            used = {name for name in INDEXES if re.search(rf"\b{name}\b", text)}
            if re.search(r"Seq Scan on memories\b", text):
                used.add("Seq Scan on memories")
            out[scope] = used
            # Where each leg's operator sits: an index condition or a filter after the scan.
            for line in text.splitlines():
                if re.search(r"@@|~~\*|<=>", line) and re.search(r"Cond|Filter|Order By", line):
                    where = line.strip().split(":")[0]
                    op = "@@" if "@@" in line else "ILIKE" if "~~*" in line else "<=>"
                    details.add(f"{scope}: {op} in {where}")
    finally:
        memory.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI smoke: small, prints only")
    parser.add_argument("--repeat", type=int, default=60)
    args = parser.parse_args(argv)
    sizes = ({"a": 300, "b": 150, "c": 150} if args.quick
             else {"a": 6000, "b": 3000, "c": 3000})
    import psycopg

    with tempfile.TemporaryDirectory(prefix="pgrls-"), scratch_database("rls") as (server, url):
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute('CREATE ROLE "bench_a" LOGIN')
        role_url = url.replace("://postgres@", "://bench_a@", 1)
        t = time.perf_counter()
        build(url, sizes)
        built = time.perf_counter() - t
        with Memory.open(url) as memory:
            tenants.grant(memory.db, "bench_a", "a")
        repeat = 10 if args.quick else args.repeat
        rows = timings({"owner": url, "role": role_url}, "a", repeat)
        legs = leg_timings({"owner": url, "role": role_url}, "a", repeat)
        where: dict[str, set[str]] = {"owner": set(), "role": set()}
        used = {"owner": plans(url, None, "a", where["owner"]),
                "role": plans(url, "bench_a", "a", where["role"])}
    lines = [f"memories: {sizes} (built in {built:.0f} s); {repeat} queries per row; "
             "hash embedder, no SPLADE", "",
             "| mode | scope | p50 ms | p95 ms | indexes in the plans |", "|---|---|---|---|---|"]
    for mode in ("owner", "role"):
        for scope in ("one user", "tenant-wide"):
            r = rows[mode][scope]
            lines.append(f"| {mode} | {scope} | {r['p50']:.1f} | {r['p95']:.1f} | "
                         f"{', '.join(sorted(used[mode][scope])) or '-'} |")
    lines += ["", "One leg alone (p50 ms, owner / role):"]
    for key in legs["owner"]:
        lines.append(f"- {key}: {legs['owner'][key]:.1f} / {legs['role'][key]:.1f}")
    lines += ["", "Where the legs' operators sit in the plans:"]
    for mode in ("owner", "role"):
        lines.append(f"- {mode}: " + "; ".join(sorted(where[mode])))
    report = "\n".join(lines)
    print(report)
    if not args.quick:
        out = REPO_ROOT / "bench" / "results" / "pg-rls.md"
        out.write_text("# Row-level security: a tenant role's queries (bench/pg_rls.py)\n\n"
                       + report + "\n", encoding="utf-8")
        print(f"wrote {out.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
