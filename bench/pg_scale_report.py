"""bench/pg_scale.py's report: auto_explain plans parsed into indexes per statement, the
server's memory, and the Markdown tables of bench/results/pg-scale.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
INDEX_RE = re.compile(r"(Index Only Scan|Index Scan|Bitmap Index Scan)(?: Backward)? "
                      r"(?:using|on) (\S+)(?: on (\S+))?")
SEQ_RE = re.compile(r"Seq Scan on (\S+)")
# Which leg (or step) a statement belongs to, by a fragment only its SQL has; first match wins.
KINDS = (("INSERT INTO request_metrics", "request metrics"),
         ("sparse_postings", "sparse leg"), ("inner_product(s.vec", "sparse leg"),
         ("<=>", "dense leg"), ("<#>", "dense leg"),
         ("bm25", "lexical leg"), ("fts @@", "lexical leg"), ("@@", "lexical leg"),
         ("LIKE", "trigram leg"), ("entit", "entity leg"), ("UPDATE memories", "record access"),
         ("INSERT", "write (metrics/access)"), ("FROM memories", "rank / load rows"))


def git_revision() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()

    rev = git("rev-parse", "--short", "HEAD")
    return rev + ("+dirty" if git("status", "--porcelain", "--", "memcli", "bench") else "")


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": sys.version.split()[0],
            "load_avg_at_start": " ".join(f"{x:.1f}" for x in os.getloadavg())}


def server_rss_mb(server: Any) -> dict[str, float]:
    """The server's processes: private memory summed, shared memory (buffers) once."""
    from tests.support.pg import server_processes

    anon = shmem = 0
    pids = server_processes(server.bin_dir / "postgres", server.pid)
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        anon += int(fields.get("RssAnon", "0 kB").split()[0])
        shmem = max(shmem, int(fields.get("RssShmem", "0 kB").split()[0]))
    return {"processes": len(pids), "private_mb": anon / 1024, "shared_mb": shmem / 1024}


def kind_of(sql: str) -> str:
    for fragment, kind in KINDS:
        if fragment in sql:
            return kind
    return "other"


def parse_plans(log: str) -> list[dict[str, Any]]:
    """auto_explain's entries in a server log: statement kind, first line, indexes used."""
    out = []
    query = 1
    for entry in re.split(r"\n(?=\S)", log):
        if "plan:" not in entry or "Query Text:" not in entry:
            continue
        body = entry.split("Query Text:", 1)[1]
        lines = body.splitlines()
        split = next((i for i, line in enumerate(lines) if "(cost=" in line), len(lines))
        sql = " ".join(" ".join(lines[:split]).split())
        plan = lines[split:]
        indexes = sorted({m.group(2) for line in plan for m in [INDEX_RE.search(line)] if m})
        seqs = sorted({m.group(1) for line in plan for m in [SEQ_RE.search(line)] if m})
        top = plan[0].strip().split("  (cost=")[0] if plan else ""
        kind = kind_of(sql)
        if kind != "other":  # not the catalog and meta reads of opening the database
            out.append({"query": query, "kind": kind, "sql": sql[:160], "top": top,
                        "indexes": indexes, "seq_scans": seqs,
                        "plan": [line.rstrip() for line in plan][:40]})
        if kind == "request metrics":  # the last statement of a Memory.query
            query += 1
    return out


def fmt(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def render(res: dict[str, Any]) -> str:
    engines = [e for e in ("sqlite", "postgresql") if e in res]
    measured = [e for e in engines if "query" in res[e] and "size" in res[e]]
    head = "| | " + " | ".join(engines) + " |\n|---|" + "---:|" * len(engines)
    command = f"--events {res['events']}"
    lines = [
        f"# PostgreSQL beside SQLite at scale ({res['events']:,} events)",
        "",
        f"`python -m bench.pg_scale {command}` at {res['revision']}, "
        f"{res['started']}; {res['users']:,} users in {res['tenants']} tenants; "
        f"{res['machine']['cpus']} CPUs shared with other work (load at start "
        f"{res['machine']['load_avg_at_start']}, at the end {res.get('load_avg', 'n/a')}); "
        f"total {res.get('seconds', 0) / 60:.0f} min. Reference: `python -c pass` "
        f"{res['python -c pass ms']:.0f} ms.",
        "",
        f"## Ingest: {res.get('writers', 8)} concurrent writer processes (`Memory.ingest`, "
        f"{res['batch']} events a call)",
        "",
        head,
    ]
    for run in ("load", "append 8 tenants", "append 1 tenant"):
        cells = []
        for e in engines:
            r = res[e].get(run)
            if r is None:  # not measured (yet)
                cells.append("n/a")
                continue
            n = r.get("busy_retries", 0)
            busy = f"; {n} busy {'retry' if n == 1 else 'retries'}" if n else ""
            cells.append(f"{fmt(r['events_per_s'], 0)} events/s ({r['events']:,} in "
                         f"{fmt(r['seconds'])} s; call p50 {fmt(r['batch_ms_p50'], 0)} ms{busy})")
        label = {"load": "load (each writer one tenant)"}.get(run, run)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if not measured:  # a partial save: queries and size are not measured yet
        return "\n".join(lines) + "\n"
    if measured != engines:
        engines = measured
        head = "| | " + " | ".join(engines) + " |\n|---|" + "---:|" * len(engines)
    lines += ["", f"## Query: `Memory.query`, default legs, warm process "
              f"({res['queries']} queries, p50 / p95 ms)", "", head]
    for scope, label in (("user", "one user"), ("tenant", "tenant-wide (125 users)")):
        cells = [f"{fmt(res[e]['query'][scope]['p50'])} / {fmt(res[e]['query'][scope]['p95'])}"
                 for e in engines]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| query process peak RSS | " + " | ".join(
        f"{fmt(res[e]['query']['rss_mb'], 0)} MB" if res[e]["query"].get("rss_mb") else "n/a"
        for e in engines) + " |")
    if "postgresql" in res and "server_rss_mb" in res["postgresql"]:
        s = res["postgresql"]["server_rss_mb"]
        lines.append(f"| server memory | | {fmt(s['private_mb'], 0)} MB private in "
                     f"{s['processes']} processes + {fmt(s['shared_mb'], 0)} MB shared |")
    lines += ["", "## Size", "", head]
    lines.append("| bytes per memory | " + " | ".join(
        fmt(res[e]["size"]["bytes_per_memory"], 0) for e in engines) + " |")
    lines.append("| total | " + " | ".join(
        f"{res[e]['size']['bytes'] / 2**20:,.0f} MiB ({res[e]['size']['memories']:,} memories)"
        for e in engines) + " |")
    for e in engines:
        largest = ", ".join(f"{n} {b / 2**20:,.0f}" for n, b in res[e]["size"]["largest"])
        lines += ["", f"{e} largest (MiB): {largest}"]
        if res[e]["size"].get("wal_bytes_before_checkpoint"):
            lines[-1] += (f"; the WAL before the final checkpoint: "
                          f"{res[e]['size']['wal_bytes_before_checkpoint'] / 2**20:,.0f} MiB")
        if "largest_indexes" in res[e]["size"]:
            idx = ", ".join(f"{n} {b / 2**20:,.0f}" for n, b in
                            res[e]["size"]["largest_indexes"])
            lines.append(f"; indexes: {idx}")
    if res["events"] < 1_000_000 and not res.get("quick"):
        lines += ["", "## What the 1M run needs (extrapolated linearly from this run)", ""]
        for e in engines:
            rate = res[e]["load"]["events_per_s"]
            bpm = res[e]["size"]["bytes_per_memory"]
            lines.append(f"- {e}: the load at this run's rate {1e6 / rate / 3600:.1f} h (a lower "
                         f"bound: writes slow down as indexes grow), {bpm * 1e6 / 2**30:.1f} GiB "
                         "of database" + (", plus the WAL the writers keep from resetting"
                                          if e == "sqlite" else ""))
        lines.append("- the benchmark's own processes: the corpus (1M event dicts, ~2 GB) and the "
                     "replayed encodings of all 97k distinct texts (~1.5 GB) in the parent, each "
                     "writer its tenant's events and their texts' encodings (~1.5 GB each, 8 "
                     "writers).")
    plans = res.get("postgresql", {}).get("plans")
    if plans:
        lines += ["", "## PostgreSQL plans at this size (auto_explain, one user-scoped and "
                  "one tenant-wide query)", "",
                  "| query | statement | top node | indexes | seq scans |",
                  "|---|---|---|---|---|"]
        for p in plans:
            scope = {1: "user", 2: "tenant"}.get(p["query"], str(p["query"]))
            lines.append(f"| {scope} | {p['kind']} | {p['top']} | "
                         f"{', '.join(p['indexes']) or '-'} | "
                         f"{', '.join(p['seq_scans']) or '-'} |")
    if res.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"
