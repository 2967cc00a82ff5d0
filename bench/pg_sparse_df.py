"""What keeping `sparse_df` costs a PostgreSQL writer, three ways, A/B in one run (schema 4).

    python -m bench.pg_sparse_df [--memories 3000] [--batch 50] [--rounds 3]

The sparse writes of ingest (`memcli.store.sparse.insert_postings`: one transaction per batch
of memories, as ingest writes a batch) and of purge (`delete_postings`), timed with sparse_df
kept by:
- `statement`: schema 4's definer statement triggers on memory_sparse (transition tables:
  one upsert per statement), what memcli runs;
- `row`: the same counting as a FOR EACH ROW definer trigger (one upsert per memory);
- `python`: no trigger, the pre-schema-4 path: counts summed in Python, one upsert per 500
  terms (the function SQLite still uses).
Each variant has its own database on one server; they alternate batch by batch in the same
minute (the machine's load moves all three alike). The SPLADE vectors are the real model's,
of bench/perf_data's synthetic chat turns. After each round's writes every variant's counts
are checked against a count of the vectors. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path

from bench.perf_data import generate_events
from bench.pg_bench_support import create_database, running_server

TS = "2025-01-01T00:00:00Z"
STATEMENT = ("memory_sparse_df_insert", "memory_sparse_df_update", "memory_sparse_df_delete")
ROW_FUNCTION = """
CREATE FUNCTION bench_sparse_df_row() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    gone integer[];
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO sparse_df (term_id, df)
            SELECT t, 1 FROM memcli_sparse_term_ids(NEW.vec::text) t ORDER BY t
            ON CONFLICT (term_id) DO UPDATE SET df = sparse_df.df + 1;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        WITH kept AS (
            UPDATE sparse_df SET df = df - 1
            WHERE term_id IN (SELECT memcli_sparse_term_ids(OLD.vec::text))
            RETURNING term_id, df)
        SELECT array_agg(term_id) INTO gone FROM kept WHERE df <= 0;
        IF gone IS NOT NULL THEN
            DELETE FROM sparse_df WHERE term_id = ANY (gone);
        END IF;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER bench_sparse_df_row AFTER INSERT OR UPDATE OR DELETE ON memory_sparse
    FOR EACH ROW EXECUTE FUNCTION bench_sparse_df_row();
"""


def _configure(db, variant: str) -> None:
    """Make `variant` this database's way of keeping sparse_df (once: DDL between batches
    would throw away every cached plan, the triggers' included)."""
    with db.transaction():
        db.conn.execute(ROW_FUNCTION)
        for name in STATEMENT:
            if variant != "statement":
                db.execute(f"ALTER TABLE memory_sparse DISABLE TRIGGER {name}")
        if variant != "row":
            db.execute("ALTER TABLE memory_sparse DISABLE TRIGGER bench_sparse_df_row")


def _write(db, variant: str, docs: list[tuple[int, dict[int, float]]]) -> None:
    from memcli.store import sparse as sparse_sql
    from memcli.store.postgres import sparse as pg_sparse
    from memcli.store.sqlite.sparse import _add_df

    if variant != "python":
        sparse_sql.insert_postings(db, docs)
        return
    scaled = [(m, {t: max(1, round(w * sparse_sql.SCALE)) for t, w in v.items()})
              for m, v in docs]
    pg_sparse.write(db, scaled)
    _add_df(db, Counter(t for _, v in scaled for t in v))


def _delete(db, variant: str, ids: list[int]) -> None:
    from memcli.store.postgres import sparse as pg_sparse
    from memcli.store.sqlite.sparse import _add_df

    if variant != "python":
        pg_sparse.delete(db, ids)
        return
    stored = pg_sparse.terms(db, ids)
    pg_sparse.delete(db, ids)
    _add_df(db, Counter({t: -n for t, n in Counter(
        t for ts in stored.values() for t in ts).items()}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from memcli.providers.splade import SpladeEncoder
    from memcli.store.location import open_database

    texts = [e["content"]["text"] for e in generate_events(args.memories)]
    t0 = time.perf_counter()
    vectors = SpladeEncoder().encode_documents(texts)
    encode_s = time.perf_counter() - t0
    terms = statistics.mean(len(v) for v in vectors)
    variants = ("statement", "row", "python")
    times: dict[str, dict[str, list[float]]] = {v: {"write": [], "delete": []}
                                                 for v in variants}
    n = args.memories
    with running_server() as server:
        dbs = {v: open_database(create_database(server.dsn, f"bench_sparse_df_{v}"))
               for v in variants}
        try:
            for variant, db in dbs.items():
                _configure(db, variant)
                with db.transaction():
                    db.execute("INSERT INTO memories (id, content, tenant_id, event_time,"
                               " created_at, updated_at) SELECT i, 'x', 't', ?, ?, ?"
                               " FROM generate_series(1, ?) i", (TS, TS, TS, n))
            for _ in range(args.rounds):
                for what, step in (("write", _write), ("delete", _delete)):
                    for start in range(0, n, args.batch):
                        ids = list(range(start + 1, min(n, start + args.batch) + 1))
                        for variant, db in dbs.items():  # alternate batch by batch
                            arg = ([(i, vectors[i - 1]) for i in ids] if what == "write"
                                   else ids)
                            with db.transaction():
                                t = time.perf_counter()
                                step(db, variant, arg)
                                times[variant][what].append(time.perf_counter() - t)
                    if what == "write":  # every variant's counts are exact
                        want = dict(Counter(t for v in vectors for t in v))
                        for variant, db in dbs.items():
                            kept = dict(db.execute("SELECT term_id, df FROM sparse_df"))
                            assert kept == want, f"{variant}: counts differ from a recount"
                for variant, db in dbs.items():
                    assert db.scalar("SELECT count(*) FROM sparse_df") == 0, variant
        finally:
            for db in dbs.values():
                db.close()
    out = {"memories": args.memories, "batch": args.batch, "rounds": args.rounds,
           "mean_terms_per_memory": round(terms, 1), "encode_seconds": round(encode_s, 1),
           "load": Path("/proc/loadavg").read_text().split()[:3]}
    for variant in variants:
        for what in ("write", "delete"):
            ms = [s * 1000 for s in times[variant][what]]
            out[f"{variant}_{what}_ms_per_batch_median"] = round(statistics.median(ms), 2)
            out[f"{variant}_{what}_ms_total"] = round(sum(ms), 1)
    for what in ("write", "delete"):
        base = out[f"python_{what}_ms_total"]
        out[f"{what}_ratio_statement_row_python"] = [
            round(out[f"{v}_{what}_ms_total"] / base, 2) for v in variants]
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
