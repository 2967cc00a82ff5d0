"""`memcli import --from chatgpt` of a synthetic 10,000-message export, timed as whole
processes against `python -c pass` in the same run, then a query for a planted message.

What it measures, how, and the results: bench/README.md, "Importing".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.perf_data import REPO_ROOT, generate_events

RESULTS = REPO_ROOT / "bench" / "results"
PLANTED = "The zanzibar lighthouse keeper brews rooibos with cardamom every dusk."
MODES = {"defer": ("hash", ["--defer-embed"]), "hash-nosparse": ("hash", []),
         "hash": ("hash", []), "default": ("e5-small", []), "daemon": ("e5-small", [])}
SLOW = {"hash", "default", "daemon"}  # a real model encodes every memory: one run of these
NO_SPARSE = "retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0, entity: 0.5, trigram: 0.5}\n"


def chatgpt_export(messages: int) -> list[dict[str, Any]]:
    """`messages` kept messages (plus the edited-away ones), grouped by session."""
    conversations: dict[str, list[dict[str, Any]]] = {}
    for event in generate_events(messages):
        conversations.setdefault(event["session_id"], []).append(event)
    out = []
    for number, (session, events) in enumerate(conversations.items()):
        mapping: dict[str, Any] = {"root": {"id": "root", "parent": None, "children": [],
                                            "message": None}}
        parent = "root"
        for turn, event in enumerate(events):
            node_id = f"{session}-{turn}"
            when = datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()
            role = "user" if event["actor"]["type"] == "human" else "assistant"
            text = PLANTED if (number, turn) == (7, 3) else event["content"]["text"]
            if turn % 10 == 5:  # an edit: the first try stays in the tree, off the kept branch
                _add(mapping, f"{node_id}-old", parent, role, "an earlier try, " + text, when)
            _add(mapping, node_id, parent, role, text, when)
            parent = node_id
        out.append({"title": f"Conversation {number}", "conversation_id": session,
                    "create_time": mapping[f"{session}-0"]["message"]["create_time"],
                    "mapping": mapping, "current_node": parent})
    return out


def _add(mapping: dict[str, Any], node_id: str, parent: str, role: str, text: str,
         when: float) -> None:
    mapping[parent]["children"].append(node_id)
    mapping[node_id] = {"id": node_id, "parent": parent, "children": [], "message": {
        "id": node_id, "author": {"role": role}, "create_time": when,
        "content": {"content_type": "text", "parts": [text]}, "metadata": {}}}


def _env(embedder: str, config: str = "/nonexistent/memcli.yaml") -> dict[str, str]:
    env = dict(os.environ)
    env.update({"MEMCLI_EMBEDDER": embedder, "MEMCLI_CONFIG": config,
                "MEMCLI_NO_DAEMON": "1", "PYTHONPATH": str(REPO_ROOT)})
    env.pop("MEMCLI_DB", None)
    return env


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, str, float]:
    """(wall seconds, stdout, CPU seconds of the child: the machine is shared, so wall time
    includes waiting for a core)."""
    seconds, out, cpu, _ = _run_rss(argv, env)
    return seconds, out, cpu


def _run_rss(argv: list[str], env: dict[str, str]) -> tuple[float, str, float, float]:
    """`_run`, and the child's peak resident memory in MB (its own rusage, from wait4)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed ({proc.returncode}): {stderr[-600:]}")
    return seconds, stdout, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure(export: Path, mode: str, runs: int, work: Path) -> dict[str, Any]:
    if mode == "daemon":
        return measure_daemon(export, work)
    embedder, flags = MODES[mode]
    config = work / "no-sparse.yaml"
    config.write_text(NO_SPARSE)
    env = _env(embedder, str(config)) if mode == "hash-nosparse" else _env(embedder)
    times, cpus, peaks, report, found = [], [], [], {}, False
    for run in range(1 if mode in SLOW else runs):
        db = work / f"{mode}-{run}.db"
        seconds, out, cpu, peak = _run_rss([sys.executable, "-m", "memcli", "--db", str(db),
                                            "import", "--from", "chatgpt", str(export),
                                            "--json", *flags], env)
        times.append(seconds)
        cpus.append(cpu)
        peaks.append(peak)
        report = json.loads(out)
        if run == 0:
            _, hits, _ = _run([sys.executable, "-m", "memcli", "--db", str(db), "query",
                               "lighthouse keeper rooibos", "--json", "-k", "3"], env)
            found = any("zanzibar" in h["text"] for h in json.loads(hits))
    return {"mode": mode, "embedder": embedder, "flags": flags, "runs": times, "cpu": cpus,
            "median_s": statistics.median(times), "cpu_median_s": statistics.median(cpus),
            "peak_rss_mb": max(peaks), "added": report.get("added"),
            "conversations": report.get("conversations"), "query_finds_planted": found}


def measure_daemon(export: Path, work: Path) -> dict[str, Any]:
    """One import through a warm `memcli serve` of a new database (its first event written
    in-process, since a daemon serves only a database that exists)."""
    from bench.service_support import Daemon, cli_env

    home = work / "daemon-home"
    home.mkdir()
    env = cli_env(home, hash_embedder=False)
    db = work / "daemon.db"
    py = [sys.executable, "-m", "memcli", "--db", str(db)]
    _run([*py, "--no-daemon", "ingest", "--text", "the first note", "--json"], env)
    with Daemon(db, env) as daemon:
        daemon.wait_ready()
        seconds, out, cpu = _run([*py, "import", "--from", "chatgpt", str(export), "--json"],
                                 env)
        report = json.loads(out)
        _, hits, _ = _run([*py, "query", "lighthouse keeper rooibos", "--json", "-k", "3"], env)
        found = any("zanzibar" in h["text"] for h in json.loads(hits))
        _, status, _ = _run([*py, "serve", "status"], env)
        waiting = (json.loads(status).get("backlog") or {}).get("waiting")
    return {"mode": "daemon", "embedder": "e5-small", "flags": [], "runs": [seconds],
            "cpu": [cpu], "median_s": seconds, "cpu_median_s": cpu,
            "added": report.get("added"), "conversations": report.get("conversations"),
            "query_finds_planted": found, "backlog_after_query": waiting}


def baseline(runs: int) -> float:
    return statistics.median(_run([sys.executable, "-c", "pass"], _env("hash"))[0]
                             for _ in range(max(5, runs)))


def write(results: dict[str, Any], name: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    base = results["python_pass_s"]
    lines = [
        "# `memcli import --from chatgpt`: a synthetic export",
        "",
        f"{results['messages']:,} kept messages in {results['conversations']:,} conversations "
        f"(plus one edited-away try in ten), {results['export_bytes'] / 1e6:.1f} MB; whole "
        f"processes, a fresh database each run, no daemon but in mode `daemon` (the "
        f"command's CPU there is the client's only). `python -c pass`: "
        f"{base * 1000:.0f} ms. {results['machine']}, shared with other work: the wall time "
        "includes waiting for a core, the CPU time (user + system of the process) does not.",
        "",
        "| mode | embedder | runs | median wall | CPU | messages/s (wall) | x `python -c pass` "
        "| peak memory (RSS) | query finds it |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results["modes"]:
        rate = (row["added"] or 0) / row["median_s"]
        lines.append(f"| {row['mode']} {' '.join(row['flags'])} | {row['embedder']} | "
                     f"{len(row['runs'])} | {row['median_s']:.2f} s | "
                     f"{row['cpu_median_s']:.2f} s | {rate:,.0f} | "
                     f"{row['median_s'] / base:.0f}x | {_peak(row)} | "
                     f"{'yes' if row['query_finds_planted'] else 'no'} |")
    lines += ["", f"Regenerate: `{results['command']}` (bench/importers.py's docstring says "
                  "what each mode measures).", ""]
    (RESULTS / f"{name}.md").write_text("\n".join(lines))


def _write_export(messages: int, path: Path) -> int:
    """The export written by a process of its own, which returns its number of conversations.
    This process stays small: a child's peak memory as the kernel reports it (ru_maxrss)
    counts the pages it shared with its parent before exec, so a parent holding a 100,000-
    message export would set every import's figure."""
    code = ("import json, sys; from bench.importers import chatgpt_export; "
            f"data = chatgpt_export({messages}); open(sys.argv[1], 'w').write(json.dumps(data)); "
            "print(len(data))")
    done = subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO_ROOT, check=True,
                          capture_output=True, text=True, env=_env("hash"))
    return int(done.stdout)


def _peak(row: dict[str, Any]) -> str:
    peak = row.get("peak_rss_mb")
    return "-" if peak is None else f"{peak:.0f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="defer,hash-nosparse,hash,default")
    parser.add_argument("--out", default="importers", help="bench/results/OUT.json and .md")
    parser.add_argument("--max-rss-mb", type=float, default=None,
                        help="fail when an import's peak resident memory is above this")
    parser.add_argument("--quick", action="store_true",
                        help="1,000 messages, defer and hash-nosparse once; checks, writes nothing")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.modes, args.runs = 1_000, "defer,hash-nosparse", 1
    with tempfile.TemporaryDirectory(prefix="memcli-import-bench-") as tmp:
        work = Path(tmp)
        export = work / "conversations.json"
        conversations = _write_export(args.messages, export)
        results: dict[str, Any] = {
            "messages": args.messages, "conversations": conversations, "runs": args.runs,
            "export_bytes": export.stat().st_size, "python_pass_s": baseline(args.runs),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                       f"Python {platform.python_version()}", "modes": [],
            "command": "python -m bench.importers " + " ".join(sys.argv[1:])}
        for mode in args.modes.split(","):
            row = measure(export, mode, args.runs, work)
            print(json.dumps(row), file=sys.stderr)
            results["modes"].append(row)
            if args.max_rss_mb is not None and row.get("peak_rss_mb", 0) > args.max_rss_mb:
                raise SystemExit(f"{mode}: peak memory {row['peak_rss_mb']:.0f} MB, above "
                                 f"{args.max_rss_mb:.0f} MB")
            if row["added"] != args.messages or not row["query_finds_planted"]:
                raise SystemExit(f"{mode}: added {row['added']} of {args.messages} messages, "
                                 f"planted message found: {row['query_finds_planted']}")
    if not args.quick:
        write(results, args.out)


if __name__ == "__main__":
    main()
