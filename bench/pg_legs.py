"""The retrieval legs on PostgreSQL beside SQLite, on LoCoMo.

    python -m bench.pg_legs [--conversations N] [--data PATH]

The LoCoMo database is bench/locomo.py's cached one (e5-small + SPLADE, built first if missing).
A throw-away PostgreSQL 18 (tests/support/pg.py) gets memcli's own schema (its migrations, then
the vector dimension and HNSW index as the first ingest sets them), the variants' extra index and
columns on top (VARIANT_DDL in bench/pg_legs_variants.py, an `english` tsvector here), and the
same memories, float vectors and SPLADE weights (same ids; tests/support/pg_legs.py). Every
question with evidence is asked inside its conversation's tenant, as bench/locomo.py does, with
the query terms, CJK grams, query vector and SPLADE query terms memcli computes, once per leg
and engine:

- per leg (lexical, dense, sparse; trigram has no LoCoMo query): recall@k of the evidence turns
  in the leg's own list (k = 1, 5, 10, 25), overlap@10 with SQLite's list, latency p50/p95, for
  each PostgreSQL variant (bench/pg_legs_variants.py);
- fused: memcli's own `rank` (z-score fusion and the ranking stages, rows read from SQLite)
  over the SQLite legs, then over the PostgreSQL legs in their place (the entity leg, portable
  SQL, is SQLite's in both): end-to-end recall@k, the number that must stay within 1 point;
- a CJK check (LoCoMo has none): a few Chinese texts from the test suite, FTS5's trigram leg
  against the PostgreSQL trigram variants;
- query plans (EXPLAIN) of the chosen legs and of the `IS NOT DISTINCT FROM` filter form.

Results: bench/results/pg-legs.{md,json} (only for the full 10 conversations).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench/locomo.py

from bench import locomo
from bench import pg_legs_variants as var
from bench.pg_bench_support import create_database, running_server
from memcli.config import RetrievalSettings
from memcli.entities.extraction import query_entity_keys
from memcli.providers.embedders import get_embedder
from memcli.retrieval import search
from memcli.retrieval import text as qtext
from memcli.retrieval.stages import RankContext
from memcli.store import search_sql as sql
from memcli.store import sparse as sparse_sql
from memcli.store.filters import Filters
from tests.support.pg_legs import PgAdapter, apply_schema, copy_from_sqlite

REPO_ROOT = Path(__file__).resolve().parents[1]

KS = (1, 5, 10, 25)
TOP_K = 50
RESULTS = REPO_ROOT / "bench" / "results"
VECTOR_IN_PLAN = re.compile(r"'\[[-0-9.e,]+\]'")  # the query vector, as EXPLAIN prints it
# `english`: the built-in configuration (snowball english WITH its stopword list, no unaccent),
# as a second generated column beside the schema's `memcli` one.
ENGLISH_DDL = """
ALTER TABLE memories ADD COLUMN fts_en tsvector GENERATED ALWAYS AS (
    CASE WHEN sensitivity = 'high' THEN ''::tsvector
         ELSE setweight(to_tsvector('english'::regconfig, content), 'A')
              || setweight(to_tsvector('english'::regconfig, context), 'B') END) STORED;
CREATE INDEX memories_fts_en ON memories USING gin (tenant_id, fts_en);
"""

LEXICAL = {
    "bm25-sql": var.bm25_sql_leg,
    "bm25-sql-lexemes": var.bm25_variant(doc_length="lexemes"),
    "bm25-sql-english": var.bm25_variant("fts_en", "english"),
    "bm25-python": var.PythonBm25(),
    "ts_rank_cd": var.ts_rank_leg("ts_rank_cd"),
    "ts_rank": var.ts_rank_leg("ts_rank"),
    "ts_rank_cd-english": var.ts_rank_leg("ts_rank_cd", "fts_en", "english"),
}
DENSE = {
    "exact": var.dense_exact,
    "hnsw-ef40": var.dense_knn(40, iterative=False),
    "hnsw-ef40-iterative": var.dense_knn(40, iterative=True),
    "hnsw-ef100-iterative": var.dense_knn(100, iterative=True),
    "bits-hnsw-ef100-iterative+rerank": var.dense_knn(100, iterative=True, bits=True),
}
SPARSE = {"sparsevec": var.sparse_vectors}  # SQLite's postings: the SQLite side
TRIGRAM = {
    "ilike+grams-found": var.trigram_chosen,
    "ilike+similarity": var.trigram_similarity("similarity"),
    "ilike+word_similarity": var.trigram_similarity("word_similarity"),
}
CHOSEN = {"lexical": "bm25-sql", "dense": "exact", "sparse": "sparsevec",
          "trigram": "ilike+grams-found"}


# --------------------------------------------------------------------------- SQLite side

def sqlite_legs(db: Any, q: var.Query, filters: Filters, s: RetrievalSettings,
                times: dict[str, float]) -> dict[str, list[tuple[int, float]]]:
    """memcli's legs on SQLite as `run_legs` runs them (same order, plans and limits), from
    precomputed query vectors."""
    n = s.candidates_per_leg
    legs: dict[str, list[tuple[int, float]]] = {}

    def timed(name: str, fn: Any) -> None:
        t = time.perf_counter()
        legs[name] = fn()
        times[name] = (time.perf_counter() - t) * 1000

    query = qtext.lexical_query(q.text)
    if query.terms:
        timed("lexical", lambda: sql.lexical(db, query, filters, n, s.context_weight))
    if query.grams:
        timed("trigram", lambda: sql.trigram(db, query, filters, n))
    keys = query_entity_keys(q.text)
    scope_rows = sql.estimate_scope(db, filters, cap=sql.SCOPE_COUNT_CAP)
    small = scope_rows <= sql.SMALL_SCOPE
    if keys:
        timed("entity", lambda: sql.entity(db, keys, filters, n, small_scope=small))
    total = int(db.scalar("SELECT coalesce(max(id), 0) FROM memories"))
    max_df = max(s.sparse_max_df, int(s.sparse_max_df_ratio * total))
    timed("sparse", lambda: sparse_sql.search(db, q.sparse, filters, n, max_df, small_scope=small))
    timed("dense", lambda: sql.dense(db, q.vector, filters, n, scope_rows=scope_rows))
    return legs


def encode_queries(texts: list[str], embedder: Any, sparse: Any) -> dict[str, tuple[bytes, dict]]:
    """Query vectors, cached in bench/.cache by model ids (the models are most of the time)."""
    path = locomo.CACHE_DIR / f"pg-legs-queries-{embedder.model_id.replace('/', '_')}.json"
    key = f"{embedder.model_id}|{sparse.model_id}"
    cached: dict[str, Any] = {}
    if path.exists():
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored.get("key") == key:
            cached = stored["queries"]
    out = {}
    for text in texts:
        if text not in cached:
            vec = embedder.embed_query(text).astype("float32").tobytes()
            cached[text] = [base64.b64encode(vec).decode(),
                            {str(t): w for t, w in sparse.encode_query(text).items()}]
        blob, weights = cached[text]
        out[text] = (base64.b64decode(blob), {int(t): w for t, w in weights.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "queries": cached}), encoding="utf-8")
    return out


# --------------------------------------------------------------------------- measuring

def recalls(ids: list[int], dia: dict[int, str], evidence: set[str]) -> dict[str, float]:
    ranked = [dia.get(i) for i in ids]
    return {f"r@{k}": len(evidence & set(ranked[:k])) / len(evidence) for k in KS}


def pct(values: list[float]) -> float:
    return round(100 * statistics.fmean(values), 1) if values else float("nan")


def latency(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    return {"p50": round(v[len(v) // 2], 2), "p95": round(v[max(0, int(0.95 * len(v)) - 1)], 2)}


class Tally:
    """Per (leg, engine/variant): recall rows, overlap@10 with SQLite, latencies."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict[str, list[float]]] = {}

    def add(self, leg: str, name: str, r: dict[str, float], ms: float | None,
            ov: float | None = None) -> None:
        row = self.rows.setdefault((leg, name), {"ms": [], "overlap@10": []})
        for k, v in r.items():
            row.setdefault(k, []).append(v)
        if ms is not None:
            row["ms"].append(ms)
        if ov is not None:
            row["overlap@10"].append(ov)

    def summary(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for (leg, name), row in self.rows.items():
            entry: dict[str, Any] = {f"r@{k}": pct(row[f"r@{k}"]) for k in KS}
            entry["n"] = len(row["r@1"])
            if row["overlap@10"]:
                entry["overlap@10"] = pct(row["overlap@10"])
            if row["ms"]:
                entry["latency_ms"] = latency(row["ms"])
            out.setdefault(leg, {})[name] = entry
        return out


def run_locomo(memory: Any, pg: PgAdapter, qs: list[dict[str, Any]],
               encoded: dict[str, tuple[bytes, dict]]) -> dict[str, Any]:
    db = memory.db
    settings = RetrievalSettings()
    n = settings.candidates_per_leg
    dia = {int(i): locomo.dia_id_of(e, e.split(":", 1)[0]) for i, e in
           db.execute("SELECT id, event_id FROM memories")}
    now = datetime.now(UTC)  # one clock for both rankings (the recency stage reads it)
    tally = Tally()
    fused = Tally()
    checked = 0
    for number, q in enumerate(qs, start=1):
        vec, sparse_q = encoded[q["question"]]
        query = var.Query(q["question"], var.lexical_terms(q["question"]),
                          var.cjk_grams(q["question"]), vec, sparse_q)
        filters = memory.filters(tenant_id=q["sample_id"])
        evidence = set(q["evidence"])
        times: dict[str, float] = {}
        lite = sqlite_legs(db, query, filters, settings, times)
        if checked < 10:  # the mirror is memcli's own run_legs (same lists)
            real = search.run_legs(db, memory.embedder, q["question"], filters, settings,
                                   sparse=memory.sparse)
            assert {k: [i for i, _ in v] for k, v in real.items()} == \
                {k: [i for i, _ in v] for k, v in lite.items()}, q["question"]
            checked += 1
        for leg, variants in (("lexical", LEXICAL), ("dense", DENSE), ("sparse", SPARSE)):
            base = [i for i, _ in lite.get(leg, [])]
            tally.add(leg, "sqlite", recalls(base, dia, evidence), times.get(leg))
            for name, fn in variants.items():
                t = time.perf_counter()
                hits = fn(pg, query, filters, n, settings)
                ms = (time.perf_counter() - t) * 1000
                ids = [i for i, _ in hits]
                tally.add(leg, name, recalls(ids, dia, evidence), ms,
                          var.overlap(base, ids, 10))
                if name == CHOSEN[leg]:
                    q.setdefault("pg", {})[leg] = hits
                if leg == "lexical":
                    q.setdefault("lexical_variants", {})[name] = hits
        ranked = search.rank(RankContext(db, filters, q["question"], settings, now=now), lite)
        base_ids = [c.id for c in ranked[:TOP_K]]
        fused.add("fused", "sqlite", recalls(base_ids, dia, evidence), None)
        for name, lexical_hits in q.pop("lexical_variants").items():
            legs = dict(lite)
            if "lexical" in legs:
                legs["lexical"] = lexical_hits
            for leg in ("sparse", "dense"):
                legs[leg] = q["pg"][leg]
            ranked = search.rank(RankContext(db, filters, q["question"], settings, now=now),
                                 legs)
            ids = [c.id for c in ranked[:TOP_K]]
            fused.add("fused", f"postgresql ({name})", recalls(ids, dia, evidence), None,
                      var.overlap(base_ids, ids, 10))
        q.pop("pg")
        if number % 200 == 0:
            print(f"  {number}/{len(qs)} questions", file=sys.stderr)
    return {"legs": tally.summary(), "fused": fused.summary()["fused"]}


# --------------------------------------------------------------------------- CJK check

CJK_TEXTS = [  # from tests/retrieval/test_query.py, test_cli.py, test_purge.py, test_embedders.py
    "我们上周在市场买了很多水果其中有芒果干和别的东西",
    "芒果干芒果干",
    "我们在成都吃了火锅 🥘",
    "alpha note qxalphaword 阿尔法标记 with Alfredo Quasimodo",
    "bravo note qxbravoword 布拉沃标记 with Bronislava Ekwueme",
    "北京今天晴天，最高气温二十五度，适合户外活动。",
    "番茄炒蛋的做法：先把鸡蛋打散炒熟，再加入番茄翻炒，最后加盐调味。",
    "公司第三季度的营业收入同比增长了百分之十二。",
    "我喜欢在北京喝茶",
    "东京是日本的首都，也是最大的城市。",
    # Partial overlaps, so that the rankings can differ:
    "北京烤鸭和北京炸酱面都是北京的名菜",
    "北京烤鸭",
    "昨天我们去了一家很有名的餐厅吃烤鸭，味道不错，下次还想去北京看看",
]
CJK_QUERIES = ["芒果干", "成都火锅", "阿尔法标记", "北京", "番茄炒鸡蛋", "今天北京的天气怎么样",
               "营业收入", "东京", "标记", "北京烤鸭", "烤鸭", "北京的名菜"]


def run_cjk(dsn: str) -> dict[str, Any]:
    from memcli import Memory

    with tempfile.TemporaryDirectory(prefix="memcli-pglegs-") as tmp:
        embedder = get_embedder("hash")
        memory = Memory.open(Path(tmp) / "cjk.db", embedder=embedder)
        memory.ingest([{"text": t, "event_id": f"e{i}", "session_id": f"s{i}"}
                       for i, t in enumerate(CJK_TEXTS)])
        conn = database(dsn, "cjk", len(embedder.embed_query("x")))
        copy_from_sqlite(memory.db, conn)
        pg = PgAdapter(conn)
        filters = memory.filters()
        rows: list[dict[str, Any]] = []
        for text in CJK_QUERIES:
            query = qtext.lexical_query(text)
            lite = ([i for i, _ in sql.trigram(memory.db, query, filters, 10)]
                    if query.grams else [])
            row: dict[str, Any] = {"query": text, "sqlite": lite}
            query = var.Query(text, [], var.cjk_grams(text), b"", {})
            for name, fn in TRIGRAM.items():
                row[name] = [i for i, _ in fn(pg, query, filters, 10, RetrievalSettings())]
            rows.append(row)
        conn.close()
        memory.close()
    return {"texts": CJK_TEXTS, "queries": rows}


# --------------------------------------------------------------------------- plans

def plans(pg: PgAdapter, tenant: str, terms: list[str], vector: bytes) -> dict[str, list[str]]:
    """EXPLAIN of the chosen legs for one question, and of the user filter in both forms."""
    from memcli.store.postgres import legs

    filters = Filters(tenant_id=tenant, user_id=tenant)
    where, params = filters.sql()
    out: dict[str, list[str]] = {}

    literal = legs.vector_literal(vector)

    def explain(name: str, text: str, args: list) -> None:
        out[name] = [VECTOR_IN_PLAN.sub("'[...]'", r[0])
                     for r in pg.execute(f"EXPLAIN {text}", args)]

    explain("lexical (bm25)", legs.bm25_sql(len(terms), where),
            [*terms, " ".join(terms), 0.5, *params, 200])
    explain("dense (exact)", f"SELECT m.id, 1.0 - (v.embedding <=> ?::vector) AS s FROM memories"
            f" m JOIN memory_vectors v ON v.memory_id = m.id WHERE {where}"
            f" ORDER BY s DESC, m.id LIMIT 200", [literal, *params])
    knn, inner, outer = legs.knn_sql(where, filters, len(vector) // 4)
    knn_args = [*inner, literal, 400, literal, *outer, 200]
    explain("dense (knn_sql, the large-scope plan, as planned here)", knn, knn_args)
    pg.execute("SET enable_sort = off")
    explain("dense (knn_sql, enable_sort off: the HNSW walk the variants measure)", knn, knn_args)
    pg.execute("RESET enable_sort")
    pg.execute("SET enable_seqscan = off")  # which indexes the planner *can* use
    for form in ("m.user_id = ?", "m.user_id IS NOT DISTINCT FROM ?"):
        explain(f"filter {form} (enable_seqscan off)",
                f"SELECT count(*) FROM memories m WHERE m.tenant_id = ? AND {form}",
                [tenant, tenant])
    pg.execute("RESET enable_seqscan")
    return out


# --------------------------------------------------------------------------- report

def _row(name: str, e: dict[str, Any], base: dict[str, Any] | None) -> str:
    cells = [f"{e[f'r@{k}']:.1f}" + (f" ({e[f'r@{k}'] - base[f'r@{k}']:+.1f})" if base else "")
             for k in KS]
    ov = f"{e['overlap@10']:.1f}" if "overlap@10" in e else "-"
    lat = e.get("latency_ms")
    ms = f"{lat['p50']:.2f} / {lat['p95']:.2f}" if lat else "-"
    return f"| {name} | {' | '.join(cells)} | {ov} | {ms} |"


def render(r: dict[str, Any]) -> str:
    head = "| engine (variant) | " + " | ".join(f"R@{k}" for k in KS) + \
        " | overlap@10 with SQLite | ms p50 / p95 |"
    sep = "|---" * (len(KS) + 3) + "|"
    mb, ma = r["machine_before"], r["machine_after"]
    lines = [
        "# Retrieval legs on PostgreSQL beside SQLite (LoCoMo)", "",
        f"Revision {r['revision']}; {r['questions']} questions of {r['conversations']}"
        f" conversations; {r['copied']['memories']} memories copied to PostgreSQL 18.6"
        f" ({r['copied']['vectors']} vectors, {r['copied']['postings']} sparse postings) in"
        f" {r['copy_s']} s; run {r['run_s']} s. Machine: {mb['cpus']} CPUs, load"
        f" {mb['load_avg_1m']} -> {ma['load_avg_1m']}, `python -c pass`"
        f" {mb['python_c_pass_ms']} -> {ma['python_c_pass_ms']} ms.", "",
        "Recall in % of the evidence turns (difference to SQLite in brackets); latency of the"
        " leg's SQL as called from Python (parameters, rows back), one connection, no other"
        " load of ours. Chosen for memcli/store/postgres/legs.py: "
        + ", ".join(f"{k} `{v}`" for k, v in r["chosen"].items()) + ".", "",
        "## End to end (memcli's fusion and ranking stages over each engine's legs)", "",
        head, sep,
    ]
    fused = r["fused"]
    base = fused["sqlite"]
    lines.append(_row("SQLite", base, None))
    for name, e in fused.items():
        if name != "sqlite":
            lines.append(_row(name, e, base))
    for leg, variants in r["legs"].items():
        lines += ["", f"## Leg: {leg}", "", head, sep]
        base = variants["sqlite"]
        lines.append(_row("SQLite", base, None))
        lines += [_row(name, e, base) for name, e in variants.items() if name != "sqlite"]
    lines += ["", "## CJK check (trigram leg; LoCoMo has no CJK)", "",
              f"Texts (ids 1-{len(r['cjk']['texts'])} in this order): "
              + " / ".join(r["cjk"]["texts"]), "",
              "| query | SQLite FTS5 trigram | " + " | ".join(TRIGRAM) + " |",
              "|---" * (len(TRIGRAM) + 2) + "|"]
    for row in r["cjk"]["queries"]:
        cells = [" ".join(map(str, row[k])) or "-" for k in ("sqlite", *TRIGRAM)]
        lines.append(f"| {row['query']} | " + " | ".join(cells) + " |")
    lines += ["", "## Query plans (first question)", ""]
    for name, plan in r["plans"].items():
        lines += [f"{name}:", "```", *plan, "```"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- main

def database(dsn: str, name: str, dim: int) -> Any:
    import psycopg

    conn = psycopg.connect(create_database(dsn, name, replace=True), autocommit=True)
    apply_schema(conn, dim)  # memcli's migrations: the real schema
    var.apply_variants(conn, dim)  # the variants' index and columns on top
    return conn


def machine() -> dict[str, Any]:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return {"load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
            "python_c_pass_ms": round((time.perf_counter() - t) * 1000, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(locomo.DEFAULT_DATA))
    parser.add_argument("--conversations", type=int, default=10,
                        help="the first N conversations' questions (results written for 10)")
    args = parser.parse_args(argv)
    revision = locomo.git_revision()  # at start: the code measured is the code imported now
    data_path = Path(args.data)
    data = json.loads(data_path.read_text(encoding="utf-8"))
    embedder = get_embedder("e5-small")
    sparse = locomo.default_sparse()
    db_path, ingest = locomo.cached_database(data_path, embedder, sparse, "e5-small", data, False)
    ingested = {s["sample_id"]: {t["dia_id"] for _, turns in locomo.sessions(s["conversation"])
                                 for t in turns} for s in data}
    qs, counts = locomo.questions(data[: args.conversations], ingested)
    print(f"{len(qs)} questions", file=sys.stderr)
    encoded = encode_queries([q["question"] for q in qs], embedder, sparse)
    before = machine()
    with running_server() as server, locomo.open_memory(db_path, embedder, sparse) as memory:
        dim = len(next(iter(encoded.values()))[0]) // 4
        conn = database(server.dsn, "locomo", dim)
        conn.execute(ENGLISH_DDL)
        t = time.perf_counter()
        copied = copy_from_sqlite(memory.db, conn)
        copy_s = round(time.perf_counter() - t, 1)
        pg = PgAdapter(conn)
        first = qs[0]
        plan = plans(pg, first["sample_id"], var.lexical_terms(first["question"]),
                     encoded[first["question"]][0])
        t = time.perf_counter()
        result = run_locomo(memory, pg, qs, encoded)
        run_s = round(time.perf_counter() - t, 1)
        cjk = run_cjk(server.dsn)
        conn.close()
    report = {
        "revision": revision, "questions": len(qs),
        "conversations": args.conversations, "counts": counts, "ingest_cached": ingest["cached"],
        "copied": copied, "copy_s": copy_s, "run_s": run_s, "machine_before": before,
        "machine_after": machine(), "chosen": CHOSEN, **result, "cjk": cjk, "plans": plan,
    }
    text = render(report)
    print(text)
    if args.conversations == 10:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "pg-legs.json").write_text(json.dumps(report, indent=2, ensure_ascii=False),
                                              encoding="utf-8")
        (RESULTS / "pg-legs.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
