"""PostgreSQL's lexical leg, tenant-wide: the full BM25 statement against the pruned one
(memcli/store/postgres/lexical.py, MaxScore) on the same database, in the same run.

    python -m bench.pg_tenant_profile build --memories 250000 --state /tmp/pgprof  # keeps running
    python -m bench.pg_lexical_maxscore --state /tmp/pgprof --name pg-lexical-maxscore-250k

For each of bench/pg_scale.py's queries (the profile's set, after its warm-up ones), in its
tenant: the leg's time both ways (alternating, each `--runs` times, the median kept), whether
the results are identical (ids and order; scores within 1e-9), the plan taken, and the matches
each way scores: every match of the OR of the terms in the tenant (the full statement) against
those the MaxScore statements score (the essential lexemes' matches; when the first split's
check fails, also the matches the second statement adds). One user's scope is timed too: the
store runs the full statement there, unchanged. `python -c pass` is the reference process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import perf
from bench import pg_scale as scale
from bench import pg_scale_support as sup
from bench.pg_tenant_profile import RESULTS, WARMUP

LIMIT = 200  # the leg's `limit` in a query (RetrievalSettings' candidates per leg)


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return (time.perf_counter() - t0) * 1000, out


def same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return (len(a) == len(b) and [i for i, _ in a] == [i for i, _ in b]
            and all(abs(x - y) <= 1e-9 * max(1.0, abs(y))
                    for (_, x), (_, y) in zip(a, b, strict=True)))


def measure(db: Any, terms: list[str], filters: Any, runs: int,
            factor: float | None = None) -> dict[str, Any]:
    from memcli.store.postgres import legs, lexical

    full_ms, pruned_ms = [], []
    first = (None if factor is None
             else factor * lexical.guess(lexical.query_lexemes(db, terms)))
    trace: dict[str, Any] = {}
    for _ in range(runs):
        ms, full = timed(legs.lexical, db, terms, filters, LIMIT)
        full_ms.append(ms)
        trace = {}
        ms, got = timed(lexical.search, db, terms, filters, LIMIT, trace=trace, first=first)
        pruned_ms.append(ms)
    splits = trace["splits"]
    everything = lexical.match_counts(db, terms, filters)
    if trace["plan"] == "full":
        scored = everything
    else:
        scored = lexical.match_counts(db, terms, filters, list(splits[0].essential))
        if trace["plan"] == "two":
            scored += lexical.match_counts(db, terms, filters, trace["added"],
                                           list(splits[0].essential))
    return {"full_ms": statistics.median(full_ms), "pruned_ms": statistics.median(pruned_ms),
            "same": same(got, full), "plan": trace["plan"], "matches": everything,
            "scored": scored, "terms": len(terms),
            # the limit-th best score, and the lexemes' df and idf (to replay other splits)
            "theta": full[-1][1] if len(full) == LIMIT else None,
            "lexemes": [[x.lexeme, x.df, x.idf] for x in lexical.query_lexemes(db, terms)],
            "splits": [[len(c.essential), len(c.common), c.common_bound] for c in splits]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from memcli.retrieval.text import lexical_query

    state = json.loads((args.state / "state.json").read_text())
    memory = sup.open_memory(state["dsn"], {"models": state["models"]})
    out: dict[str, Any] = {"memories": state["memories"], "revision": scale.report.git_revision(),
                           "load_start": perf.loadavg(), "python_pass_ms": perf.python_pass_ms(10)}
    queries = state["queries"]
    for q in queries[:WARMUP]:  # the pages of the tenants' matches, as a warm server holds them
        terms = list(lexical_query(q["text"]).terms)
        if terms:
            measure(memory.db, terms, memory.filters(tenant_id=q["tenant_id"]), 1)
    rows = []
    for q in queries[WARMUP:]:
        terms = list(lexical_query(q["text"]).terms)
        if not terms:
            continue
        row = measure(memory.db, terms, memory.filters(tenant_id=q["tenant_id"]), args.runs,
                      args.guess_factor)
        user = memory.filters(tenant_id=q["tenant_id"], user_id=q["user_id"])
        row["user_full_ms"], _ = timed(memory.db.backend.lexical, memory.db,
                                       lexical_query(q["text"]), user, LIMIT, 0.5)
        rows.append(row)
    memory.close()
    out["load_end"] = perf.loadavg()
    out["rows"] = rows
    return out


def render(out: dict[str, Any], name: str) -> str:
    rows = out["rows"]
    plans: dict[str, int] = {}
    for r in rows:
        plans[r["plan"]] = plans.get(r["plan"], 0) + 1

    def cell(key: str) -> str:
        s = perf.summary([r[key] for r in rows])
        return f"{s['p50']:.1f} / {s['p95']:.1f}"

    matches = sum(r["matches"] for r in rows)
    scored = sum(r["scored"] for r in rows)
    return "\n".join([
        f"# PostgreSQL lexical leg, tenant-wide: full statement and MaxScore"
        f" ({out['memories']:,} memories)", "",
        f"`python -m bench.pg_lexical_maxscore --name {name}`, memcli at {out['revision']};"
        f" {len(rows)} queries of bench/pg_scale.py's set in their tenant, limit {LIMIT};"
        f" load {out['load_start']} -> {out['load_end']}; `python -c pass`"
        f" {out['python_pass_ms']:.1f} ms.", "",
        "| | full statement | MaxScore |", "|---|---:|---:|",
        f"| leg ms, p50 / p95 (tenant) | {cell('full_ms')} | {cell('pruned_ms')} |",
        f"| matches scored, all queries | {matches:,} | {scored:,} |",
        f"| matches scored a query, p50 / p95 | {_pct(rows, 'matches')} | {_pct(rows, 'scored')} |",
        "", f"Identical results (ids, order, scores within 1e-9): "
        f"{sum(r['same'] for r in rows)} of {len(rows)}. Plans: "
        + ", ".join(f"{k} {v}" for k, v in sorted(plans.items())) + ".",
        f"One user (the full statement, unchanged), p50 / p95: {cell('user_full_ms')} ms.", ""])


def _pct(rows: list[dict], key: str) -> str:
    s = perf.summary([float(r[key]) for r in rows])
    return f"{s['p50']:,.0f} / {s['p95']:,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state", type=Path, required=True, help="pg_tenant_profile's build")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--name", default="pg-lexical-maxscore")
    parser.add_argument("--guess-factor", type=float, default=None,
                        help="the first split's threshold: this times the store's guess")
    args = parser.parse_args(argv)
    out = run(args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(out, indent=1) + "\n")
    text = render(out, args.name)
    (RESULTS / f"{args.name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
