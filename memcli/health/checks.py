"""`memcli doctor`: is this memory file sound, and if not, what to run.

Each check gives a status (`ok`, `problem`, `info`), a sentence a person understands and, for a
problem, the command that fixes it. Checks: the engine's integrity (SQLite: quick_check, `full`
runs integrity_check; PostgreSQL: amcheck when installed), a SQLite file (or its WAL and
shared-memory files) other local users may read, the schema version against this
code, the embedder and SPLADE model stored in `meta` against the configured ones, derived
rows without their memory and memories without their derived rows (full-text, trigram,
vectors, sparse terms, entity links, edges), memories whose event is gone, the engine's log
(`Backend.log_health`: SQLite's WAL size; on PostgreSQL, whose WAL is the server's, the
oldest open transaction, which keeps VACUUM from reclaiming deleted rows), and the evolution plan's
upgrade triggers over the last 7 days of `request_metrics`:

| metric (the evolution plan) | trigger | meaning |
|---|---|---|
| share of retrieving requests with < 3 full-text hits | > 30 % | lexical retrieval insufficient |
| share of requests that widened or fell back to recency | > 50 % | full text not the main path |
| share of requests that truncated items | > 40 % | context budget pressure |
| p95 latency | > 3 s | needs caching or splitting |

The metric checks need at least MIN_REQUESTS requests in the window (fewer: `info`).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from memcli.acb.stats import FULLTEXT_HIT_MIN, fulltext_hit_rate, percentile, since_timestamp
from memcli.core.locations import shown
from memcli.core.private import open_to_others
from memcli.ingest.background import queue_for
from memcli.store import doctor_sql, purge_sql
from memcli.store.acb_sql import requests_since
from memcli.store.postgres.tenant_roles import refuse_bound
from memcli.store.purge_sql import VACUUM_PENDING, checkpoint

if TYPE_CHECKING:
    from memcli.store.connection import Database

MIN_REQUESTS = 20
WINDOW = "7d"
WAL_WARN_BYTES = 64 * 1024 * 1024
# memcli's own transactions last seconds (models run before them); one open this long is a
# session left "idle in transaction" or a stuck client.
TRANSACTION_WARN_SECONDS = 15 * 60.0
FIX = "memcli doctor --fix"
REBUILD = "memcli rebuild"  # what --fix cannot repair: dropped tables, lost episodes


def check(name: str, status: str, detail: str, fix: str | None = None,
          **extra: Any) -> dict[str, Any]:
    return {"check": name, "status": status, "detail": detail, "fix": fix, **extra}


def _integrity(db: Database, full: bool) -> dict[str, Any]:
    lines = doctor_sql.integrity(db, full=full)
    name = db.backend.integrity_label(db, full)
    if lines == ["ok"]:
        return check("integrity", "ok", f"{name}: ok")
    return check("integrity", "problem", f"{name} found damage: {'; '.join(lines[:3])}",
                 db.backend.salvage_hint, errors=lines)


def _schema(db: Database) -> dict[str, Any]:
    version = doctor_sql.schema_version(db)
    latest = db.backend.schema_latest
    if version == latest:
        return check("schema", "ok", f"schema version {version} (current)")
    if version > latest:
        return check("schema", "problem", f"schema version {version} is newer than this "
                     f"memcli ({latest})", "upgrade memcli")
    return check("schema", "problem", f"schema version {version}, this memcli writes "
                 f"{latest}", "run any write command once, e.g. `memcli embed`")


def _models(db: Database, embedder: Any, sparse_model: str | None) -> list[dict[str, Any]]:
    stored = doctor_sql.stored_models(db)
    out = []
    if embedder is None:
        out.append(check("embedder", "info", "no embedder configured: vector search is off"))
    elif stored["embedder_model"] is None:
        out.append(check("embedder", "ok", f"{embedder.model_id} configured; no vectors yet"))
    elif (stored["embedder_model"], stored["embedder_dimension"]) != (
            embedder.model_id, str(embedder.dimension)):
        out.append(check(
            "embedder", "problem",
            f"vectors were made by {stored['embedder_model']} "
            f"(dimension {stored['embedder_dimension']}), the configured embedder is "
            f"{embedder.model_id} (dimension {embedder.dimension})", "memcli reindex",
            stored=stored["embedder_model"], configured=embedder.model_id))
    else:
        out.append(check("embedder", "ok", f"{embedder.model_id}, dimension {embedder.dimension}"))
    if sparse_model is None:
        out.append(check("sparse", "info", "SPLADE leg off (retrieval.leg_weights.sparse = 0)"))
    elif stored["sparse_model"] not in (None, sparse_model):
        out.append(check("sparse", "problem", f"sparse terms were made by "
                         f"{stored['sparse_model']}, the configured model is {sparse_model}",
                         "memcli reindex", stored=stored["sparse_model"],
                         configured=sparse_model))
    else:
        out.append(check("sparse", "ok", sparse_model))
    return out


def _derived(db: Database, *, vectors: bool, sparse: bool) -> list[dict[str, Any]]:
    out = []
    for table, ids in doctor_sql.orphans(db).items():
        if ids:
            out.append(check(f"orphans:{table}", "problem",
                             f"{len(ids)} {table} row(s) belong to no memory", FIX,
                             ids=ids[:20]))

    queue = queue_for(db)  # inside a `memcli serve` whose indexer writes them
    indexing = queue is not None and queue.alive()
    for table, ids in doctor_sql.missing(db, vectors=vectors, sparse=sparse).items():
        if not ids:
            continue
        fix = "memcli embed" if table in ("memory_vectors", "memory_sparse") else FIX
        what = {"memory_vectors": "have no vector", "memory_sparse": "have no sparse terms"}.get(
            table, f"are missing from {table}")
        if indexing and fix == "memcli embed":
            out.append(check(f"missing:{table}", "info", f"{len(ids)} memories {what} yet: "
                             "the daemon's indexer is writing them", ids=ids[:20]))
            continue
        out.append(check(f"missing:{table}", "problem", f"{len(ids)} memories {what}", fix,
                         ids=ids[:20]))
    lost = doctor_sql.memories_without_event(db)
    if lost:
        out.append(check("orphans:memories", "problem",
                         f"{len(lost)} memories were cut from events that no longer exist",
                         " && ".join(f"memcli purge --memory-id {i}" for i in lost[:5]),
                         ids=lost[:20]))
    if not out:
        out.append(check("derived", "ok", f"indexes, vectors and links match "
                         f"{doctor_sql.count_memories(db)} memories"))
    return out


def _rebuild_needed(db: Database) -> list[dict[str, Any]]:
    """Damage beyond `--fix`: derived tables or indexes dropped, memories cut from events
    gone."""
    tables = doctor_sql.missing_tables(db)
    if tables:
        return [check("missing:tables", "problem", f"derived tables are missing: "
                      f"{', '.join(tables)}", REBUILD, tables=tables)]
    # PostgreSQL's lexical and HNSW indexes are indexes, not tables: dropped, every query
    # still answers, scanning.
    indexes = doctor_sql.missing_indexes(db)
    if indexes:
        return [check("missing:indexes", "problem", f"indexes are missing: {', '.join(indexes)}",
                      REBUILD, indexes=indexes)]
    lost = doctor_sql.lost_episodes(db)
    if lost:
        return [check("missing:episodes", "problem", f"{len(lost)} memories cut from events "
                      "are gone (history recorded them, no purge did)", REBUILD, ids=lost[:20])]
    return []


def _log(db: Database, transaction_limit: float) -> list[dict[str, Any]]:
    """The engine's log (Backend.log_health): SQLite's WAL size, or that the check does not
    apply (PostgreSQL), and the oldest transaction where the engine shows it."""
    health = db.backend.log_health(db)
    out = []
    size = health.wal_bytes
    if size is not None and size > WAL_WARN_BYTES:
        out.append(check("wal", "problem", f"the WAL holds {size / 1e6:.0f} MB: a long-lived "
                         "reader keeps it from being reset", f"stop idle readers, then `{FIX}`",
                         bytes=size))
    elif size is not None:
        out.append(check("wal", "ok", f"WAL {size / 1e6:.1f} MB", bytes=size))
    elif health.wal_elsewhere:
        out.append(check("wal", "info", f"does not apply: {health.wal_elsewhere}"))
    age = health.oldest_transaction
    if age is not None and age > transaction_limit:
        out.append(check("transactions", "problem",
                         f"a transaction has been open for {age / 60:.0f} min ({health.holder}):"
                         " VACUUM cannot remove the rows deleted since it began (purged text "
                         "included)", "end that session or fix the client that leaves it open "
                         "(SELECT pg_terminate_backend(<pid>))", seconds=round(age, 1)))
    elif age is not None:
        detail = (f"oldest open transaction {age:.0f} s ({health.holder})" if health.holder
                  else "no other transaction open")
        out.append(check("transactions", "ok", detail, seconds=round(age, 1)))
    return out


def _metrics(db: Database) -> list[dict[str, Any]]:
    rows = requests_since(db, since_timestamp(WINDOW))
    if len(rows) < MIN_REQUESTS:
        return [check("requests", "info", f"{len(rows)} requests in the last {WINDOW}: too few "
                      f"to judge the evolution plan's upgrade triggers (needs {MIN_REQUESTS})")]
    hit_rate = fulltext_hit_rate(rows)  # the hit rate `stats --requests` reports
    low = 0.0 if hit_rate is None else round(1 - hit_rate, 4)
    fallback = sum(1 for r in rows if r["fallbacks"] > 0) / len(rows)
    truncated = sum(1 for r in rows if r["truncated"]) / len(rows)
    p95 = percentile([float(r["latency_ms"]) for r in rows if not r["error_stage"]], 95) or 0.0
    stats = f"`memcli stats --requests --since {WINDOW}`"
    triggers = [
        ("requests:fulltext", low, 0.30, f"of retrieving requests got fewer than "
         f"{FULLTEXT_HIT_MIN} full-text hits (the hit rate of `stats --requests` is "
         f"{'n/a' if hit_rate is None else hit_rate})",
         f"lexical retrieval is insufficient: keep the dense and sparse legs on and embedded "
         f"(`memcli embed`), and see {stats}"),
        ("requests:fallback", fallback, 0.50,
         "of requests widened their scope or fell back to recency",
         f"full text is no longer the main path: consolidate into user-level facts "
         f"(`memcli consolidate`), and see {stats}"),
        ("requests:truncation", truncated, 0.40, "of requests truncated items",
         f"context budget pressure: raise --budget-tokens or the acb section budgets, "
         f"consolidate (`memcli consolidate`), and see {stats}"),
    ]
    out = []
    for name, share, limit, words, fix in triggers:
        detail = f"{share:.0%} {words} (trigger > {limit:.0%})"
        out.append(check(name, "problem", detail, fix, value=round(share, 4), threshold=limit)
                   if share > limit else check(name, "ok", detail, value=round(share, 4),
                                               threshold=limit))
    detail = f"p95 latency {p95:.0f} ms (trigger > 3000 ms)"
    out.append(check("requests:latency", "problem", detail,
                     "ingest with --defer-embed and run `memcli embed` from cron; cache or "
                     f"split the store; see {stats}", value=p95, threshold=3000.0)
               if p95 > 3000 else check("requests:latency", "ok", detail, value=p95,
                                        threshold=3000.0))
    return out


def _permissions(db: Database) -> list[dict[str, Any]]:
    """A database file, WAL or shared-memory file that another local user may read (memcli
    creates them 0600; older versions, a copy or a umask of 022 may have left them 0644)."""
    if db.backend.name != "sqlite" or db.path == ":memory:":
        return []
    files = [f"{db.path}{tail}" for tail in ("", "-wal", "-shm")]
    open_ones = [f for f in files if open_to_others(f)]
    if not open_ones:
        return [check("permissions", "ok", "the database is readable by its owner only")]
    # The WAL and shared-memory files come and go with connections (this check's own holds
    # them now): a glob catches those there when the fix runs, and never names a missing one.
    fix = f"chmod 600 {shlex.quote(db.path)}*"
    return [check("permissions", "problem", f"other local users may read {', '.join(open_ones)}"
                  ": every memory not sealed as `high`", fix, files=open_ones)]


def unusable(path: Any, exc: Exception) -> dict[str, Any]:
    """The report for a database memcli will not open (another program's SQLite file, or a
    PostgreSQL schema holding another program's tables)."""
    checks = [check("schema", "problem", str(exc), "give the path of a memcli database with --db")]
    return {"db": shown(path), "healthy": False, "problems": 1, "checks": checks}


def diagnose(db: Database, *, embedder: Any = None, sparse_model: str | None = None,
             full: bool = False,
             transaction_limit: float = TRANSACTION_WARN_SECONDS) -> dict[str, Any]:
    """Every check; `healthy` is False when one has status `problem`. `transaction_limit`:
    seconds an open transaction may last before it is a problem (where the engine shows it)."""
    refuse_bound(db, "doctor")
    checks = [_integrity(db, full), _schema(db)]
    if doctor_sql.schema_version(db) == 0:
        # Not (yet) a memcli database: none of the other checks has tables to read.
        checks[1] = check("schema", "problem", "no memcli schema in this file (version 0)",
                          "give the path of a memcli database with --db")
        return {"db": db.path, "healthy": False, "problems": 1 + (checks[0]["status"] ==
                                                                   "problem"), "checks": checks}
    checks += _models(db, embedder, sparse_model)
    # A configured model whose rows are missing is a problem even when it never ran here
    # (e.g. a file written through the library without it): its leg finds nothing.
    lost = _rebuild_needed(db)
    checks += lost
    if not any(c["check"] == "missing:tables" for c in lost):  # its queries need the tables
        checks += _derived(db, vectors=embedder is not None, sparse=sparse_model is not None)
    checks += _permissions(db)
    checks += _log(db, transaction_limit)
    checks += _vacuum_pending(db)
    checks += _metrics(db)
    problems = [c for c in checks if c["status"] == "problem"]
    return {"db": db.path, "healthy": not problems, "problems": len(problems), "checks": checks}


def repair(db: Database) -> dict[str, Any]:
    """`doctor --fix`: rebuild both lexical indexes, delete derived rows without a memory, and
    checkpoint the WAL (`wal_reset`; None where memcli has no WAL of its own: PostgreSQL).
    Events and memories are never touched (embedding is `memcli embed`). A tenant role's
    purge that could not VACUUM is finished here (`vacuumed`, only when one was pending)."""
    refuse_bound(db, "doctor --fix")

    found = doctor_sql.orphans(db)
    with db.transaction():
        doctor_sql.delete_orphans(db, found)
        doctor_sql.rebuild_lexical(db)
    return {"rebuilt": list(db.backend.lexical_tables),
            "orphans_deleted": {k: len(v) for k, v in found.items() if v},
            "wal_reset": checkpoint(db) if db.backend.log_health(db).wal_bytes is not None
            else None} | _finish_vacuum(db, purge_sql)


def _finish_vacuum(db: Database, purge_sql: Any) -> dict[str, Any]:
    if db.get_meta(purge_sql.VACUUM_PENDING) is None:
        return {}
    done = purge_sql.may_erase(db) and purge_sql.erase_physically(db)
    if done:
        purge_sql.clear_vacuum_pending(db)
    return {"vacuumed": done}


def _vacuum_pending(db: Database) -> list[dict[str, Any]]:
    """A tenant role's purge deleted rows it was not allowed to VACUUM (PostgreSQL): their
    text stays in the tables' free space until the owner does."""
    since = db.get_meta(VACUUM_PENDING)
    if since is None:
        return []
    return [check("purge_vacuum", "problem", f"a tenant role purged at {since}: the text stays"
                  " in the tables' free space until their owner VACUUMs them",
                  "run `memcli doctor --fix` as the owner of memcli's tables", since=since)]
