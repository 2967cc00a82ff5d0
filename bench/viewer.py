"""Page load time of the web viewer in `memcli serve`, per page, at 10k (and 100k) memories.

    python -m bench.viewer                  # 10k memories (hash embedder), 40 rounds
    python -m bench.viewer --sizes 10000,100000
    python -m bench.viewer --quick          # CI smoke: 1k memories, 5 rounds, no file written

What it measures, how, and the results: bench/README.md, "The web pages".
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from bench.perf_data import generate_events, loadavg, pct, users
from bench.perf_ingest import build_embedded_db
from bench.service_support import Daemon, cli_env, process_ms

REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = REPO_ROOT / "bench" / ".cache"
RESULTS = REPO_ROOT / "bench" / "results" / "viewer.md"
TARGET_P95_MS = 200.0
TENANT, USER = users()[0]
QUESTION = "what did we decide about the project deadline"


def log(msg: str) -> None:
    print(f"[viewer {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def database(size: int) -> Path:
    """A private copy of the cached `viewer-<size>.db` (built on first use)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    source = CACHE_DIR / f"viewer-{size}.db"
    if not source.exists():
        log(f"building {source.name}: {size:,} events, hash embedder")
        build_embedded_db(source, generate_events(size), "hash", False, rebuild=True)
        _ledger_rows(source)
    copy = CACHE_DIR / f"viewer-{size}-run.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(copy) + suffix).unlink(missing_ok=True)
    shutil.copyfile(source, copy)
    return copy


def _ledger_rows(path: Path) -> None:
    """Decisions (one superseded), tasks in each status, and a pending proposal."""
    from memcli import Memory
    from memcli.ledger import entries as ledger
    from memcli.lifecycle.proposals import propose
    from memcli.providers.embedders import HashEmbedder

    with Memory.open(path, embedder=HashEmbedder(64)) as memory:
        old = ledger.add_decision(memory, "Ship the planner in June", tenant_id=TENANT,
                                  user_id=USER)
        ledger.supersede_decision(memory, old["id"], "Ship the planner in July",
                                  owner=memory.owner(TENANT), reason="the fleet is late")
        for i, status in enumerate(("open", "doing", "done") * 4):
            ledger.add_task(memory, f"Task {i}", status=status, tenant_id=TENANT, user_id=USER)
        with memory.db.transaction():
            propose(memory.db, tenant_id=TENANT, user_id=USER, field="city", value="Porto",
                    text=f"{USER} lives in Porto", origin="remember")


def pages(memory_id: int) -> dict[str, str]:
    """Each page's path (one of each kind the viewer serves)."""
    scope = f"tenant_id={TENANT}&user_id={USER}"
    return {
        "timeline": f"/ui/?{scope}",
        "search": f"/ui/search?{scope}&query={quote(QUESTION)}",
        "memory": f"/ui/memories/{memory_id}?tenant_id={TENANT}",
        "bundle": f"/ui/bundle?{scope}&session_id=s000001&query={quote(QUESTION)}",
        "ledger": f"/ui/ledger?tenant_id={TENANT}",
        "dashboard": "/ui/dashboard",
    }


def a_memory(db: Path) -> int:
    from memcli import Memory

    with Memory.open(db, must_exist=True) as memory:
        return int(memory.db.scalar(
            "SELECT max(id) FROM memories WHERE tenant_id = ? AND user_id = ?", (TENANT, USER)))


def measure(db: Path, runs: int, env: dict[str, str], only: list[str] | None = None
            ) -> dict[str, Any]:
    rows: dict[str, list[float]] = {}
    paths = {k: v for k, v in pages(a_memory(db)).items() if not only or k in only}
    with contextlib.ExitStack() as stack:
        daemon = stack.enter_context(Daemon(db, env, "--port", "0", "--no-token"))
        daemon.wait_ready()
        url = daemon.status()["http_url"]
        client = stack.enter_context(httpx.Client(base_url=url, timeout=60))
        for i in range(runs + 2):
            for name, path in paths.items():
                t0 = time.perf_counter()
                answer = client.get(path)
                wall = (time.perf_counter() - t0) * 1000
                if answer.status_code != 200 or "<html" not in answer.text[:400].lower():
                    raise SystemExit(f"{name} {path}: {answer.status_code} {answer.text[:300]}")
                if i >= 2:
                    rows.setdefault(name, []).append(wall)
            wall, _cpu, _ = process_ms([sys.executable, "-c", "pass"], env, None)
            if i >= 2:
                rows.setdefault("python -c pass", []).append(wall)
    return {k: {"n": len(v), "p50": pct(v, 50), "p95": pct(v, 95)} for k, v in rows.items()}


def render(results: dict[str, Any], quick: bool) -> str:
    lines = ["# The web viewer: page load time", "",
             f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores"
             f"{' (quick smoke)' if quick else ''}; load average before/after: "
             f"{results['load_before']} / {results['load_after']}. Regenerate with "
             "`python -m bench.viewer` (`--sizes 10000,100000`).", "",
             "Wall ms for one whole page over HTTP from `memcli serve --port` on 127.0.0.1 "
             f"(p50 / p95); target p95 < {TARGET_P95_MS:.0f} ms at 10k memories. "
             "`python -c pass` (a whole process) is the reference for the machine's load.", ""]
    for size, rows in results["sizes"].items():
        lines += [f"## {int(size):,} memories", "", "| page | n | p50 | p95 | target |",
                  "|---|---|---|---|---|"]
        for name, row in rows.items():
            target = ""  # the target is the 10k one; larger sizes are for the record
            if name != "python -c pass" and int(size) <= 10_000:
                target = "ok" if row["p95"] < TARGET_P95_MS else "MISSED"
            lines.append(f"| {name} | {row['n']} | {row['p50']:.1f} | {row['p95']:.1f} "
                         f"| {target} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1k memories, 5 rounds, no file")
    ap.add_argument("--sizes", default=None, help="comma-separated sizes (default 10000)")
    ap.add_argument("--runs", type=int, default=None, help="measured rounds per size (40)")
    ap.add_argument("--pages", default=None, help="comma-separated pages (default all: "
                    + ", ".join(pages(0)) + ")")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("1000" if args.quick else "10000")).split(",")]
    runs = args.runs or (5 if args.quick else 40)
    results: dict[str, Any] = {"load_before": loadavg(), "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="memcli-bench-") as tmp:
        env = cli_env(Path(tmp), hash_embedder=True)
        env["MEMCLI_CONFIG"] = str(Path(tmp) / "config.yaml")
        Path(env["MEMCLI_CONFIG"]).write_text(  # no SPLADE: the hash database has none
            "retrieval:\n  leg_weights: {lexical: 1.0, sparse: 0.0, dense: 1.0, entity: 0.5,"
            " trigram: 0.5}\n")
        for size in sizes:
            db = database(size)
            log(f"{size:,} memories: {runs} rounds of {len(pages(0))} pages")
            try:
                results["sizes"][str(size)] = measure(
                    db, runs, env, args.pages.split(",") if args.pages else None)
            finally:
                for suffix in ("", "-wal", "-shm"):
                    Path(str(db) + suffix).unlink(missing_ok=True)
    results["load_after"] = loadavg()
    text = render(results, args.quick)
    print(text)
    if not args.quick:
        RESULTS.write_text(text + "\n")
        log(f"wrote {RESULTS.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
