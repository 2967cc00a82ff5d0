"""Context-bundle benchmark: `acb build` latency at 10k and 100k memories, 65K-token budget.

    python -m bench.acb              # 10k and 100k memories: the numbers in bench/results/acb.md
    python -m bench.acb --quick      # 2k memories, fewer runs, < 60 s: a CI smoke test
    python -m bench.acb --rebuild    # ignore the cached databases in bench/.cache/
    python -m bench.acb --models     # the default models (e5-small + SPLADE-tiny) on copies of
                                     # bench/perf.py's databases (run that first)

What it measures, how, and the results: bench/README.md, "Context bundle latency".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# The thread settings `memcli` and `Memory.configured` use, before anything imports numpy.
from memcli.config import thread_defaults

thread_defaults()

from bench.perf_data import generate_events, generate_queries, loadavg, pct  # noqa: E402
from bench.perf_query import page_cache_warm  # noqa: E402 - after the thread settings

REPO_ROOT = Path(__file__).resolve().parents[1]

CACHE_DIR = REPO_ROOT / "bench" / ".cache"
RESULTS = REPO_ROOT / "bench" / "results" / "acb.md"
MODEL_RESULTS = REPO_ROOT / "bench" / "results" / "acb-models.md"
# --models: open databases with the default models instead of the hash embedder.
MODELS = {"on": False}
DATA_VERSION = 1  # bump when the database recipe changes: cached databases are rebuilt
BUDGET = 65000
DIM = 64
LEDGER_USERS = 20


def log(msg: str) -> None:
    print(f"[acb {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def open_memory(path: Path) -> Any:
    from memcli import Memory
    from memcli.providers.embedders import HashEmbedder

    if MODELS["on"]:
        from memcli.providers.embedders import get_embedder
        from memcli.providers.splade import SpladeEncoder

        return Memory.open(path, embedder=get_embedder("e5-small"), sparse=SpladeEncoder())
    return Memory.open(path, embedder=HashEmbedder(DIM))


def add_ledger(memory: Any, scopes: list[tuple[str, str]]) -> None:
    """3 decisions and 2 tasks for each of LEDGER_USERS random users."""
    from memcli.ledger import entries as ledger

    rng = random.Random(7)
    for tenant, user in rng.sample(scopes, min(LEDGER_USERS, len(scopes))):
        for i in range(3):
            ledger.add_decision(
                memory,
                f"Decision {i} for {user}: ship the {rng.choice(['atlas', 'orion'])} "
                f"release behind a feature flag",
                rationale=["lower risk", "easy rollback"],
                tenant_id=tenant,
                user_id=user,
            )
        for i in range(2):
            ledger.add_task(
                memory,
                f"Task {i} for {user}: review the migration plan",
                tenant_id=tenant,
                user_id=user,
                status=("open", "doing")[i],
            )


def model_db(name: str, events: int) -> tuple[Path, dict[str, Any]]:
    """A copy of bench/perf.py's database of this size, with the ledger items added."""
    import shutil

    source = CACHE_DIR / f"perf-{events}-e5-small-splade.db"
    path = CACHE_DIR / f"acb-models-{name}.db"
    meta_path = Path(str(path) + ".json")
    if not source.exists():
        raise SystemExit(f"{source} is missing: run `python -m bench.perf` first")
    if path.exists() and meta_path.exists():
        log(f"reusing {path.name}")
        return path, json.loads(meta_path.read_text())
    log(f"copying {source.name} to {path.name} and adding the ledger items")
    shutil.copyfile(source, path)
    with open_memory(path) as memory:
        # perf.py's cached files may predate tables added to schema version 1 before release
        # (decisions, tasks, ...): schema.sql only creates what is missing.
        from memcli.store.sqlite.migrations import schema_sql

        with memory.db.transaction():
            memory.db.execute(schema_sql())
        scopes = [(t, u) for t, u in memory.db.execute(
            "SELECT DISTINCT tenant_id, user_id FROM memories ORDER BY 1, 2")]
        add_ledger(memory, scopes)
        memories = int(memory.db.scalar("SELECT count(*) FROM memories"))
    meta = {"data_version": DATA_VERSION, "events": events, "memories": memories,
            "source": source.name,
            "built_at": datetime.now(UTC).isoformat(timespec="seconds"), "load": loadavg()}
    meta_path.write_text(json.dumps(meta, indent=1))
    return path, meta


# ----------------------------------------------------------------------------- the databases
def build_db(path: Path, events: int, rebuild: bool) -> dict[str, Any]:
    meta_path = Path(str(path) + ".json")
    if not rebuild and path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("data_version") == DATA_VERSION and meta.get("events") == events:
            log(f"reusing {path.name} (built {meta['built_at']}; --rebuild to build again)")
            return meta
    for suffix in ("", "-wal", "-shm", ".json"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    records = generate_events(events)
    log(f"building {path.name}: {events} events, defer_embed, then hash vectors")
    t0 = time.perf_counter()
    with open_memory(path) as memory:
        for start in range(0, len(records), 500):
            report = memory.ingest(records[start : start + 500], defer_embed=True)
            if report.rejected:
                raise SystemExit(f"ingest rejected records: {report.rejected[:3]}")
        ingest_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        memory.embed_pending(batch_size=1000)
        embed_s = time.perf_counter() - t1
        add_ledger(memory, sorted({(r["tenant_id"], r["user_id"]) for r in records}))
        memories = int(memory.db.scalar("SELECT count(*) FROM memories"))
    meta = {
        "data_version": DATA_VERSION,
        "events": events,
        "memories": memories,
        "ingest_s": round(ingest_s, 1),
        "embed_s": round(embed_s, 1),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "load": loadavg(),
    }
    meta_path.write_text(json.dumps(meta, indent=1))
    log(f"built {path.name}: {memories} memories, ingest {ingest_s:.0f} s, embed {embed_s:.0f} s")
    return meta


def requests_for(path: Path, n: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(fast, retrieval) requests on random sessions of the data, deterministic per seed."""
    import apsw

    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    sessions = list(
        conn.execute(
            "SELECT tenant_id, user_id, session_id FROM sessions ORDER BY tenant_id, session_id"
        )
    )
    conn.close()
    rng = random.Random(seed)
    by_user: dict[tuple[str, str], list[str]] = {}
    for tenant, user, session in sessions:
        by_user.setdefault((tenant, user), []).append(session)
    queries = generate_queries(n, sorted(by_user), seed=seed)
    fast, slow = [], []
    for q in queries:
        session = rng.choice(by_user[(q["tenant_id"], q["user_id"])])
        base = {
            "tenant_id": q["tenant_id"],
            "user_id": q["user_id"],
            "session_id": session,
            "budget_tokens": BUDGET,
        }
        fast.append(base)
        slow.append({**base, "query": q["text"]})
    return fast, slow


# ----------------------------------------------------------------------------- measurements
def summary(ms: list[float]) -> dict[str, float]:
    return {
        "n": len(ms),
        "p50": round(pct(ms, 50), 2),
        "p95": round(pct(ms, 95), 2),
        "mean": round(statistics.fmean(ms), 2),
    }


def library_latency(path: Path, requests: list[dict], warmup: int) -> dict[str, Any]:
    from memcli.acb.build import AcbRequest, build_acb

    times, cpu, tokens, items = [], [], [], []
    with open_memory(path) as memory:
        for req in requests[:warmup]:
            build_acb(memory, AcbRequest.model_validate(req))
        for req in requests[warmup:]:
            c0, t0 = time.process_time(), time.perf_counter()
            # validated in the timed call, as `memcli acb build` does
            bundle = build_acb(memory, AcbRequest.model_validate(req))
            times.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
            if bundle["token_used"] > BUDGET:
                raise SystemExit(f"budget exceeded: {bundle['token_used']} > {BUDGET}")
            tokens.append(bundle["token_used"])
            items.append(sum(len(s["items"]) for s in bundle["sections"]))
    return {
        **summary(times),
        "cpu": summary(cpu),
        "tokens_mean": round(statistics.fmean(tokens)),
        "items_mean": round(statistics.fmean(items), 1),
    }


def process_latency(path: Path, requests: list[dict], runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.yaml"
        config.write_text(
            "retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0, entity: 0.5, trigram: 0.5}\n"
        )
        env = {
            **os.environ,
            "MEMCLI_DB": str(path),
            "MEMCLI_EMBEDDER": "hash",
            "MEMCLI_EMBED_DIMENSION": str(DIM),
            "MEMCLI_CONFIG": str(config),
            "XDG_CONFIG_HOME": tmp,
            "XDG_DATA_HOME": tmp,
        }
        if MODELS["on"]:  # the defaults: e5-small and SPLADE, no config file
            for var in ("MEMCLI_EMBEDDER", "MEMCLI_EMBED_DIMENSION", "MEMCLI_CONFIG"):
                env.pop(var)
        times = []
        for i, req in enumerate(requests[: runs + 2]):
            args = [sys.executable, "-m", "memcli", "acb", "build", "-", "--json"]
            t0 = time.perf_counter()
            done = subprocess.run(
                args, input=json.dumps(req), env=env, capture_output=True, text=True, check=False
            )
            elapsed = (time.perf_counter() - t0) * 1000
            if done.returncode != 0:
                raise SystemExit(f"memcli acb build failed: {done.stderr.strip()}")
            if i >= 2:
                times.append(elapsed)
    return summary(times)


def measure(path: Path, meta: dict[str, Any], runs: int, process_runs: int) -> dict[str, Any]:
    fast, slow = requests_for(path, runs + 20, seed=11)
    out: dict[str, Any] = {"memories": meta["memories"], "build": meta}
    page_cache_warm(path)  # steady state: the file in the OS page cache
    log(f"{path.name}: library fast path ({runs} builds)")
    out["library_fast"] = library_latency(path, fast, 20)
    log(f"{path.name}: library retrieval path ({runs} builds)")
    out["library_retrieval"] = library_latency(path, slow, 20)
    log(f"{path.name}: whole process ({process_runs} runs each)")
    out["process_fast"] = process_latency(path, fast, process_runs)
    out["process_retrieval"] = process_latency(path, slow, process_runs)
    return out


# ----------------------------------------------------------------------------- report
def report(results: dict[str, Any], quick: bool) -> str:
    lines = [
        "# `acb build` latency" + (" (quick smoke run)" if quick else ""),
        "",
        f"Measured {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}, load average "
        f"{loadavg()} on {os.cpu_count()} cores (shared with other benchmarks: wall times are "
        "comparable within one run only; the CPU columns count this process's CPU time, which a "
        "busy machine inflates much less). Budget 65,000 tokens (cl100k_base), "
        + ("the default models: e5-small and SPLADE-tiny, all five legs (databases: copies of "
           "bench/perf.py's)" if MODELS["on"] else f"hash embedder ({DIM}-d), SPLADE leg off")
        + ". See bench/README.md.",
        "",
        "| memories | path | library p50 ms | library p95 ms | target p95 | library CPU p50 / "
        "p95 ms | process p50 ms | tokens used (mean) | items (mean) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, r in results.items():
        for path_name, target in (("fast", 15), ("retrieval", 50)):
            lib, proc = r[f"library_{path_name}"], r[f"process_{path_name}"]
            ok = "ok" if lib["p95"] <= target else "MISSED"
            lines.append(
                f"| {r['memories']:,} ({size}) | {path_name} | {lib['p50']} | "
                f"{lib['p95']} | {target} ({ok}) | {lib['cpu']['p50']} / {lib['cpu']['p95']} | "
                f"{proc['p50']} | "
                f"{lib['tokens_mean']:,} | {lib['items_mean']} |"
            )
    lines += ["", "Databases (built once, cached):", ""]
    for size, r in results.items():
        b = r["build"]
        made = (f"a copy of {b['source']} (e5-small and SPLADE, see bench/results/perf.md) "
                "with the ledger items added" if "source" in b else
                f"ingest with defer_embed {b['ingest_s']} s, hash vectors {b['embed_s']} s")
        lines.append(
            f"- {size}: {b['events']:,} events -> {b['memories']:,} memories; {made} "
            f"(built {b['built_at']}, load {b['load']})"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2k memories, fewer runs (< 60 s)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the cached databases")
    ap.add_argument("--runs", type=int, default=None, help="library builds per path")
    ap.add_argument("--models", action="store_true",
                    help="e5-small + SPLADE on copies of bench/perf.py's databases")
    args = ap.parse_args(argv)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    MODELS["on"] = args.models
    sizes = {"2k": 2000} if args.quick else {"10k": 10_000, "100k": 100_000}
    runs = args.runs or (60 if args.quick else 300)
    process_runs = 4 if args.quick else 10
    results = {}
    for name, events in sizes.items():
        if args.models:
            path, meta = model_db(name, events)
        else:
            path = CACHE_DIR / f"acb-{name}.db"
            meta = build_db(path, events, args.rebuild)
        results[name] = measure(path, meta, runs, process_runs)
    text = report(results, args.quick)
    print(text)
    if not args.quick:
        out = MODEL_RESULTS if args.models else RESULTS
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
