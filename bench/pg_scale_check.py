"""The check of bench/pg_scale_bulk.py's copies (bench/pg_scale.py --bulk-base).

`verify`: row counts K x the base's; a sample of copied memories fills the same columns as the
ingest-written memories they copy (events, history, postings by key, vectors, entities, lexical
rows, vec0); PostgreSQL's `lexical_stats` equals the memories' own count and tokens; the CLI's
`memcli query` finds copies in their user's scope as it finds their originals; `memcli doctor`
finds nothing it did not find on the ingest-written base (`doctor`, run before the copies).
"""

from __future__ import annotations

import json
import random
import time
from typing import Any


def _count(db: Any, table: str) -> int:
    return int(db.scalar(f"SELECT count(*) FROM {table}"))

def _filled(row: dict[str, Any] | None) -> list[str]:
    return sorted(k for k, v in (row or {}).items() if v not in (None, "", b""))


def doctor(location: str, env: dict[str, str]) -> list[str]:
    """`memcli doctor`'s checks that are not ok (integrity quick_check, schema, indexes against
    memories, models), as "check: detail"."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "memcli", "doctor", "--db", location, "--json"],
                          capture_output=True, text=True, env=env, timeout=3600)
    try:
        checks = json.loads(proc.stdout)["checks"]
    except (ValueError, KeyError):
        return [f"doctor exit {proc.returncode}: {proc.stderr.strip()[:300]}"]
    return [f"{c['check']}: {c.get('detail')}" for c in checks
            if c["status"] not in ("ok", "info")]


def verify(location: str, base_memories: int, copies: int, env: dict[str, str],
           before: list[str], samples: int = 20) -> dict[str, Any]:
    """Bulk rows against the ingest-written rows they copy; counts; the CLI finds them; doctor
    finds nothing it did not find on the ingest-written base (`before`)."""
    import sys

    from memcli.store.location import open_database

    engine = "postgresql" if location.startswith("postgresql") else "sqlite"
    memcli = [sys.executable, "-m", "memcli"]
    db = open_database(location)
    problems: list[str] = []
    m = int(db.scalar("SELECT max(id) FROM memories WHERE id <= ?", (base_memories,)))
    counts = {}
    for table in ("memories", "events", "history", "memory_vectors", "memory_sparse",
                  "sessions", "threads", "change_log"):
        counts[table] = n = _count(db, table)
        base_n = int(db.scalar(f"SELECT count(*) FROM {table} WHERE {_base_where(table, m)}"))
        if n != base_n * copies:
            problems.append(f"{table}: {n} rows, expected {base_n} x {copies}")
    if engine == "postgresql" and db.scalar("SELECT to_regclass('lexical_stats')") is not None:
        stats = db.query("SELECT docs, tokens FROM lexical_stats")[0]
        real = db.query("SELECT count(*) AS docs, sum(fts_tokens) AS tokens FROM memories")[0]
        if (int(stats["docs"]), int(stats["tokens"])) != (int(real["docs"]), int(real["tokens"])):
            problems.append(f"lexical_stats {stats} vs memories {real}")
    rng = random.Random(5)
    sample = [(i, i + rng.randrange(1, copies) * m) for i in rng.sample(range(1, m + 1),
                                                                        min(samples, m))]
    for old, new in sample:
        a, b = (db.query("SELECT * FROM memories WHERE id = ?", (x,))[0] for x in (old, new))
        checks = {
            "memories": (_filled(a), _filled(b)),
            "events": tuple(_filled(_one(db, "SELECT * FROM events WHERE event_id = ?",
                                         r["event_id"])) for r in (a, b)),
            "history": tuple(_filled(_one(db, "SELECT * FROM history WHERE memory_id = ?", x))
                             for x in (old, new)),
            "postings": tuple(_postings(db, x) for x in (old, new)),
            "vector": tuple(db.scalar("SELECT count(*) FROM memory_vectors WHERE"
                                      " memory_id = ?", (x,)) for x in (old, new)),
            "entities": tuple(bool(db.scalar("SELECT count(*) FROM memory_entities WHERE"
                                             " memory_id = ?", (x,))) for x in (old, new)),
        }
        if engine == "sqlite":
            checks["fts"] = tuple(db.scalar("SELECT count(*) FROM memories_fts WHERE rowid = ?",
                                            (x,)) for x in (old, new))
            if db.vec_enabled:
                checks["vec0"] = tuple(db.scalar("SELECT count(*) FROM vec_memories WHERE"
                                                 " memory_id = ?", (x,)) for x in (old, new))
        else:
            checks["fts"] = tuple(db.scalar("SELECT fts <> ''::tsvector FROM memories WHERE"
                                            " id = ?", (x,)) for x in (old, new))
        for name, (x, y) in checks.items():
            if x != y:
                problems.append(f"memory {new} (copy of {old}): {name} {y!r} vs {x!r}")
    # memcli query (the CLI, the user's scope) finds copied memories by their own words as it
    # finds the ingest-written originals (a 30-word OR query need not rank its source first)
    found = {"copies": 0, "originals": 0}
    for old, new in sample[:5]:
        hit = {}
        for label, memory_id in (("originals", old), ("copies", new)):
            hit[label] = _found(db, memcli, location, env, memory_id)
            found[label] += hit[label]
        if hit["originals"] and not hit["copies"]:
            problems.append(f"memcli query found memory {old} but not its copy {new}")
    db.close()
    t0 = time.perf_counter()
    after = doctor(location, env)
    new = sorted({a.split(": ")[0] for a in after} - {b.split(": ")[0] for b in before})
    if new:
        problems.append(f"memcli doctor: {new} (before the copies: {before})")
    return {"counts": counts, "sampled": len(sample), "query_found": found,
            "doctor": {"before": before, "after": after, "seconds": time.perf_counter() - t0},
            "problems": problems}


def _found(db: Any, memcli: list[str], location: str, env: dict[str, str],
           memory_id: int) -> bool:
    """`memcli query <its text> --user <its user>` has the memory among its 50 hits."""
    import subprocess

    row = db.query("SELECT content, tenant_id, user_id FROM memories WHERE id = ?",
                   (memory_id,))[0]
    proc = subprocess.run(
        [*memcli, "query", row["content"], "--tenant", row["tenant_id"], "--user",
         row["user_id"], "--top-k", "50", "--db", location, "--json"],
        capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"bulk check: memcli query failed: {proc.stderr.strip()[:300]}")
    out = json.loads(proc.stdout)
    hits = out.get("hits", []) if isinstance(out, dict) else out
    return any(h.get("id") == memory_id for h in hits)


def _postings(db: Any, memory_id: int) -> tuple[int, int]:
    """(terms stored for the memory, of them the leg can find): on SQLite, posting rows by
    primary key (a scan by memory_id would read every posting); PostgreSQL's sparsevec is the
    memory's one row."""
    terms = db.backend.sparse_terms(db, [memory_id]).get(memory_id, [])
    if "sparse_postings" not in db.backend.sparse_tables:
        return len(terms), len(terms)
    found = sum(db.scalar("SELECT count(*) FROM sparse_postings WHERE term_id = ? AND"
                          " memory_id = ?", (t, memory_id)) for t in terms)
    return len(terms), found


def _base_where(table: str, m: int) -> str:
    if table in ("memories",):
        return f"id <= {m}"
    if table in ("memory_vectors", "memory_sparse"):
        return f"memory_id <= {m}"
    if table == "history":
        return f"memory_id <= {m}"
    if table == "change_log":
        return f"memory_id <= {m}"
    if table in ("events",):
        return f"event_id IN (SELECT event_id FROM memories WHERE id <= {m})"
    if table in ("sessions",):
        return "session_id LIKE 'c0%'"
    return "thread_key LIKE '%/c0%'"


def _one(db: Any, sql: str, value: Any) -> dict[str, Any] | None:
    rows = db.query(sql, (value,))
    return rows[0] if rows else None
