"""What an agent gets from the warm daemon: whole-process latency of `memcli query` and `memcli
acb build` through it, and the memory its processes hold.

    python -m bench.service                   # 10k and 100k memories, the default models
    python -m bench.service --quick           # CI smoke: 1k memories, hash embedder, few runs
    python -m bench.service --sizes 10000 --against DIR    # DIR's memcli beside this one
    python -m bench.service --memory          # PSS of the daemons, 1 then 5 databases
    python -m bench.service --memory --against DIR

What it measures, how, and the results: bench/README.md, "The service".
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.perf_data import CACHE_DIR, generate_events, generate_queries, loadavg, pct, users
from bench.perf_ingest import build_embedded_db
from bench.service_support import (
    auto_env,
    cli_env,
    daemon_processes,
    process_ms,
    pss_mb,
    stop_daemons,
)
from memcli.service.daemon import paths
from tests.support.sockets import answers

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "bench" / "results"
TARGETS = {"query": (100.0, 150.0), "acb build": (150.0, None)}
# p50 over `python -c pass`'s p50 in the same run, through a warm daemon (at 10k memories).
RATIO_TARGETS = {"query": 4.0, "acb build": 5.0}
FIRST_TARGET = 1.3  # the first command's p50 over the in-process p50
MEMORY_TARGET = 1.3  # the daemons' PSS with 5 databases open over that with 1
FIRST = "first (starts the daemon)"
READY = "until its daemon answers"
LATER = "next, through it"
BESIDE = "in-process, beside the first"  # the same minutes as FIRST: its target's denominator
PASS = "python -c pass"
PY = sys.executable


def log(msg: str) -> None:
    print(f"[service {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def database(size: int, quick: bool) -> Path:
    """A private copy of perf.py's database of this size (quick: a fresh 1k hash database)."""
    path = CACHE_DIR / f"service-{size}{'-quick' if quick else ''}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    if quick:
        events = generate_events(size)
        build_embedded_db(path, events, "hash", False, rebuild=True)
        return path
    source = CACHE_DIR / f"perf-{size}-e5-small-splade.db"
    if not source.exists() and size <= 10_000:  # perf.py's first step, alone (~10 min)
        build_embedded_db(source, generate_events(size), "e5-small", True, rebuild=False)
    if not source.exists():
        raise SystemExit(f"{source} is missing: run `python -m bench.perf` first")
    log(f"copying {source.name} to {path.name}")
    shutil.copyfile(source, path)
    return path


def commands(path: Path, queries: list[dict]) -> list[tuple[str, list[str], str | None]]:
    """(label, argv after `memcli`, stdin) for one round, cycling through the queries."""
    out = []
    for q in queries:
        scope = ["--db", str(path), "--tenant-id", q["tenant_id"], "--user-id", q["user_id"]]
        request = {"tenant_id": q["tenant_id"], "user_id": q["user_id"],
                   "session_id": f"bench-{q['user_id']}", "query": q["text"]}
        out.append(("query", ["query", q["text"], *scope, "--json"], None))
        out.append(("acb build", ["acb", "build", "-", "--db", str(path), "--json"],
                    json.dumps(request)))
    return out


def check(label: str, stdout: str) -> None:
    payload = json.loads(stdout)
    ok = isinstance(payload, list) if label == "query" else "sections" in payload
    if not ok:
        raise SystemExit(f"{label}: not its JSON output: {stdout[:300]}")


def tree_env(env: dict[str, str], tree: Path, run_dir: Path, idle_min: float) -> dict[str, str]:
    """The environment of `tree`'s memcli with warm by default on, in a runtime folder where
    no daemon runs yet (`run_dir`, also how its daemons are found and stopped)."""
    return {**auto_env(env, run_dir), "PYTHONPATH": str(tree),
            "MEMCLI_DAEMON_IDLE_EXIT": f"{idle_min:g}"}


def until_served(env: dict[str, str], cwd: Path, db: list[str], timeout: float = 300) -> None:
    """Until a daemon started by a command in `env`'s runtime folder answers commands for the
    database (`db`: `--db X`, or none for MEMCLI_DB): a socket there accepts (a cheap probe
    that leaves the cores to its warm-up), then `serve status` (which waits for the warm-up)
    comes from an auto-started daemon. The socket's name is not assumed (one per database or
    one per user)."""
    folder = Path(paths.runtime_dir(env))
    deadline = time.monotonic() + timeout
    while not any(answers(str(s)) for s in folder.glob("*.sock") if ".http." not in s.name):
        if time.monotonic() > deadline:
            logs = [p.read_text()[-800:] for p in folder.glob("*.log")]
            raise SystemExit(f"no daemon answers in {folder}: {logs}")
        time.sleep(0.01)
    while True:
        done = subprocess.run([PY, "-m", "memcli", "serve", "status", *db], env=env, cwd=cwd,
                              capture_output=True, text=True, check=False)
        if done.returncode == 0 and '"auto_started": true' in done.stdout:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"serve status not from an auto-started daemon: {done.stdout}"
                             f"{done.stderr}")
        time.sleep(0.1)


def add(rows: dict[str, list[float]], cpu: dict[str, list[float]], key: str,
        timed: tuple[float, float, str]) -> None:
    rows.setdefault(key, []).append(timed[0])
    cpu.setdefault(key, []).append(timed[1])


def measure(path: Path, queries: list[dict], runs: int, env: dict[str, str],
            trees: dict[str, Path], first_runs: int = 0) -> dict[str, Any]:
    """Each round, every command through each checkout's warm daemon (auto-started in a
    runtime folder of its own, on a copy of the database of its own) and in-process, then
    `python -c pass`; the checkouts' order alternates round by round."""
    rows: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    work = commands(path, queries)
    base = Path(env["XDG_RUNTIME_DIR"]).parent
    dbs = {name: path if name == "this" else base / f"{name}-{path.name}" for name in trees}
    served = {}
    with contextlib.ExitStack() as stack:
        for name, tree in trees.items():
            if dbs[name] != path:
                shutil.copyfile(path, dbs[name])
            warm = tree_env(env, tree, base / f"warm-{name}", 30)
            stack.callback(stop_daemons, warm["XDG_RUNTIME_DIR"])
            label, args, stdin = work[0]
            check(label, process_ms([PY, "-m", "memcli", *retarget(args, path, dbs[name])],
                                    warm, stdin, tree)[2])
            until_served(warm, tree, ["--db", str(dbs[name])])
            served[name] = warm
        for i in range(runs + 2):  # two warm-up rounds (page cache, the daemon's first calls)
            order = list(trees) if i % 2 == 0 else list(trees)[::-1]
            for label, args, stdin in work[2 * (i % len(queries)):][:2]:
                for name in order:
                    for way, flags in (("daemon", []), ("in-process", ["--no-daemon"])):
                        argv = [PY, "-m", "memcli", *flags, *retarget(args, path, dbs[name])]
                        timed = process_ms(argv, served[name], stdin, trees[name])
                        check(label, timed[2])
                        if i >= 2:
                            add(rows, cpu, f"{name} | {label} | {way}", timed)
            timed = process_ms([PY, "-c", "pass"], env, None)
            if i >= 2:
                add(rows, cpu, PASS, timed)
            if i % 10 == 1:
                log(f"round {i + 1} of {runs + 2}, load {loadavg()}")
        answered = {name: status(dbs[name], served[name], trees[name]).get("requests")
                    for name in trees}
    if first_runs:
        first_commands(path, dbs, work, first_runs, env, trees, rows, cpu)
    out: dict[str, Any] = {k: {"n": len(v), "p50": pct(v, 50), "p95": pct(v, 95),
                               "cpu_p50": pct(cpu[k], 50) if k in cpu else None}
                           for k, v in rows.items()}
    out["_served"] = answered
    return out


def retarget(args: list[str], path: Path, db: Path) -> list[str]:
    return [str(db) if a == str(path) else a for a in args]


def status(db: Path, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run([PY, "-m", "memcli", "serve", "status", "--db", str(db)], env=env,
                          cwd=cwd, capture_output=True, text=True, check=False)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def first_commands(path: Path, dbs: dict[str, Path],
                   work: list[tuple[str, list[str], str | None]], runs: int,
                   env: dict[str, str], trees: dict[str, Path], rows: dict[str, list[float]],
                   cpu: dict[str, list[float]]) -> None:
    """Warm by default, `runs` rounds of each command and checkout: in a runtime folder where
    no daemon runs, the first command (it starts one and answers in-process), the time from
    its start until that daemon answers a command (`until_served`), and the two commands
    after it (through the daemon); then the daemon is stopped. The in-process and `python -c
    pass` processes of the same minutes are measured beside them (the ratios' denominators)."""
    base = Path(env["XDG_RUNTIME_DIR"]).parent
    for i in range(runs):
        log(f"first commands, round {i + 1} of {runs}, load {loadavg()}")
        for label, args, stdin in work[2 * (i % (len(work) // 2)):][:2]:
            for name in list(trees) if i % 2 == 0 else list(trees)[::-1]:
                tree, argv = trees[name], [PY, "-m", "memcli", *retarget(args, path, dbs[name])]
                first_env = tree_env(env, tree, base / f"a-{name}-{i}-{label[0]}", 2)
                t0 = time.perf_counter()
                try:
                    timed = process_ms(argv, first_env, stdin, tree)
                    check(label, timed[2])
                    add(rows, cpu, f"{name} | {label} | {FIRST}", timed)
                    until_served(first_env, tree, ["--db", str(dbs[name])])
                    rows.setdefault(f"{name} | {label} | {READY}", []).append(
                        (time.perf_counter() - t0) * 1000)
                    for _ in range(2):
                        timed = process_ms(argv, first_env, stdin, tree)
                        check(label, timed[2])
                        add(rows, cpu, f"{name} | {label} | {LATER}", timed)
                finally:
                    stop_daemons(first_env["XDG_RUNTIME_DIR"])
                add(rows, cpu, f"{name} | {label} | {BESIDE}",
                    process_ms([argv[0], *argv[1:3], "--no-daemon", *argv[3:]], first_env,
                               stdin, tree))
        add(rows, cpu, PASS, process_ms([PY, "-c", "pass"], env, None))


def memory(tree: Path, name: str, env: dict[str, str], base: Path, n_dbs: int,
           settle: float) -> dict[str, Any]:
    """A user with a memory per project: `n_dbs` projects opened in turn (`MEMCLI_DB=
    ./.memcli/memory.db` in each), warm by default on; in each a `remember` (the first may
    start a daemon), then, through the daemon, another `remember` and a `query`. With the
    first database open, then with all: the PSS of every process of every daemon
    (`footprint`)."""
    run_dir = base / f"mem-{name}"
    # Idle exit far beyond the run: the daemons are measured, then stopped here.
    menv = {**tree_env(env, tree, run_dir, 60), "MEMCLI_DB": "./.memcli/memory.db"}
    projects: list[Path] = []
    out: dict[str, Any] = {}
    try:
        for i in range(n_dbs):
            projects.append(base / f"{name}-project-{i}")
            (projects[-1] / ".memcli").mkdir(parents=True)
            text = f"project {i} builds with tool{i} and deploys on day {i}"
            cli = [PY, "-m", "memcli"]
            process_ms([*cli, "remember", text, "--json"], menv, None, projects[-1])
            until_served(menv, projects[-1], [])
            process_ms([*cli, "remember", f"tool{i} needs flag {i}", "--json"], menv, None,
                       projects[-1])
            check("query", process_ms([*cli, "query", f"tool{i}", "--json"], menv, None,
                                      projects[-1])[2])
            if i + 1 in (1, n_dbs):
                log(f"{name}: {i + 1} database(s) open, measuring")
                out[str(i + 1)] = footprint(run_dir, projects, menv, settle)
    finally:
        stop_daemons(run_dir)
    return out


def footprint(run_dir: Path, projects: list[Path], env: dict[str, str], settle: float
              ) -> dict[str, Any]:
    """PSS of the daemons' processes once every database's backlog is drained (read from the
    database: `stats --no-daemon`), then again `settle` s later (an idle indexer has exited)."""
    for project in projects:
        deadline = time.monotonic() + 300
        while json.loads(process_ms([PY, "-m", "memcli", "--no-daemon", "stats", "--json"],
                                    env, None, project)[2]).get("backlog", {}).get("waiting"):
            if time.monotonic() > deadline:
                raise SystemExit(f"the backlog of {project} did not drain in 300 s")
            time.sleep(0.5)
    out = {"drained": pss_by_daemon(run_dir), "load_drained": loadavg()}
    if not out["drained"]:
        raise SystemExit(f"no `memcli serve` process has {run_dir} as its runtime folder")
    time.sleep(settle)
    out.update(settled=pss_by_daemon(run_dir), waited_s=settle, load_settled=loadavg())
    return out


def pss_by_daemon(run_dir: Path) -> dict[str, list[float]]:
    """{a daemon's main pid: PSS MB of each of its processes, the main one first}."""
    return {str(root): [round(pss_mb(pid), 1) for pid in tree]
            for root, tree in daemon_processes(run_dir).items()}


def describe(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %s"],
                          capture_output=True, text=True, check=False)
    return f"`{tree}` at {done.stdout.strip()[:70] or 'an unknown commit'}"


def render(results: dict[str, Any], quick: bool) -> str:
    trees = results["trees"]
    lines = ["# memcli through its warm daemon: whole-process latency", "",
             f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores"
             f"{' (quick smoke)' if quick else ''}; load average before/after: "
             f"{results['load_before']} / {results['load_after']}. "
             + "; ".join(f"{name}: {text}" for name, text in trees.items()) + ".", "",
             "Wall ms per process (p50 / p95), the child's CPU ms p50 (its rusage), and the "
             "ratio of p50 to `python -c pass` in the same run; the change is `this` over "
             "`against`, the targets are checked on `this`.", ""]
    for size, rows in results["sizes"].items():
        base = rows[PASS]["p50"]
        served = ", ".join(f"{k} {v}" for k, v in rows["_served"].items())
        head = "".join(f" {n} p50 / p95 | CPU | / pass |" for n in trees)
        lines += [f"## {int(size):,} memories (requests answered by the warm daemons: "
                  f"{served}; `python -c pass` p50 {base:.1f} ms, CPU "
                  f"{rows[PASS]['cpu_p50']:.1f} ms)", "",
                  f"| command | way |{head}{' change of p50 |' if len(trees) > 1 else ''}"
                  " target |", "|---" * (3 + 3 * len(trees) + (len(trees) > 1)) + "|"]
        for label in ("query", "acb build"):
            for way in ("daemon", "in-process", FIRST, READY, LATER, BESIDE):
                got = [rows.get(f"{name} | {label} | {way}") for name in trees]
                if got[0] is None:
                    continue
                cells = "".join(f" {r['p50']:.1f} / {r['p95']:.1f} | {cpu_cell(r)} | "
                                f"{r['p50'] / base:.1f}x |" if r else " | | |" for r in got)
                if len(got) > 1:
                    cells += (f" {100 * (got[0]['p50'] / got[1]['p50'] - 1):+.0f} % |"
                              if got[1] else " |")
                lines.append(f"| {label} | {way} |{cells} {target(rows, label, way, base)} |")
        lines.append("")
    return "\n".join(lines)


def cpu_cell(row: dict[str, Any]) -> str:
    return "" if row["cpu_p50"] is None else f"{row['cpu_p50']:.1f}"


def target(rows: dict[str, Any], label: str, way: str, base: float) -> str:
    row = rows[f"this | {label} | {way}"]
    if way == "daemon":
        p50_t, p95_t = TARGETS[label]
        ok = row["p50"] <= p50_t and (p95_t is None or row["p95"] <= p95_t)
        ratio = row["p50"] / base <= RATIO_TARGETS[label]
        return (f"p50 <= {p50_t:.0f}" + (f", p95 <= {p95_t:.0f}" if p95_t else "")
                + (" ok" if ok else " MISSED")
                + f"; <= {RATIO_TARGETS[label]:g}x" + (" ok" if ratio else " MISSED"))
    if way == FIRST:
        local = rows[f"this | {label} | {BESIDE}"]["p50"]
        return (f"{row['p50'] / local:.2f}x in-process p50 beside it (<= {FIRST_TARGET:g}x"
                + (" ok)" if row["p50"] <= FIRST_TARGET * local else " MISSED)"))
    return ""


def render_memory(results: dict[str, Any]) -> str:
    lines = [f"# The warm daemons' memory: one database, then {results['databases']}", "",
             f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores; "
             + "; ".join(f"{name}: {text}" for name, text in results["trees"].items()) + ".",
             "", "PSS in MB (/proc/PID/smaps_rollup) of every process of every daemon the "
             "commands started (a daemon: its main process first, then the processes it "
             "forked), summed per daemon and overall, with the load average at the moment.", "",
             "| checkout | databases | when | load | daemons: PSS of each process | total |",
             "|---|---|---|---|---|---|"]
    ratios = []
    for name, phases in results["memory"].items():
        for n, phase in phases.items():
            for when, load, label in (
                    ("drained", "load_drained", "backlog drained"),
                    ("settled", "load_settled", f"{phase['waited_s']:g} s later")):
                daemons = phase[when]
                each = "; ".join(" + ".join(f"{mb:.0f}" for mb in v) + f" = {sum(v):.0f}"
                                 for v in daemons.values()) or "none"
                total = sum(sum(v) for v in daemons.values())
                lines.append(f"| {name} | {n} | {label} | {phase[load]} | {len(daemons)}: "
                             f"{each} | {total:.0f} |")
        totals = [sum(sum(v) for v in phase["settled"].values()) for phase in phases.values()]
        if len(totals) == 2 and totals[0]:
            ratio = totals[1] / totals[0]
            ratios.append(f"{name} {totals[1]:.0f} / {totals[0]:.0f} MB = **{ratio:.2f}x** "
                          f"({'ok' if ratio <= MEMORY_TARGET else 'MISSED'})")
    lines += ["", f"Last databases over first, once settled (target <= {MEMORY_TARGET:g}x): "
              + "; ".join(ratios) + "."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1k hash database, 4 runs, no file")
    ap.add_argument("--sizes", default=None, help="comma-separated sizes (default 10000,100000)")
    ap.add_argument("--runs", type=int, default=None, help="measured rounds per size (30)")
    ap.add_argument("--first-runs", type=int, default=None, help="rounds of the first "
                    "command with no daemon running (warm by default; 10, quick: 1)")
    ap.add_argument("--against", type=Path, default=None, help="another memcli checkout, "
                    "measured in the same run, interleaved (a before/after on a busy machine)")
    ap.add_argument("--memory", action="store_true", help="the daemons' memory (PSS), not "
                    "the latency")
    ap.add_argument("--databases", type=int, default=None, help="with --memory: how many "
                    "(5, quick: 2)")
    ap.add_argument("--settle", type=float, default=None, help="with --memory: seconds to "
                    "wait after the backlog drains for an idle indexer to exit (120, quick: 0)")
    ap.add_argument("--out", default=None, help="results file name in bench/results "
                    "(default service, service-memory)")
    args = ap.parse_args(argv)
    trees = {"this": REPO_ROOT, **({"against": args.against.resolve()} if args.against else {})}
    for tree in trees.values():
        # What an installed memcli has: current bytecode (a shell with PYTHONDONTWRITEBYTECODE
        # set would otherwise have every process compile the modules changed since the last
        # write).
        compileall.compile_dir(tree / "memcli", quiet=1)
    results: dict[str, Any] = {"load_before": loadavg(),
                               "trees": {name: describe(tree) for name, tree in trees.items()}}
    with tempfile.TemporaryDirectory(prefix="memcli-bench-") as tmp:
        env = cli_env(Path(tmp), hash_embedder=args.quick)
        if args.memory:
            settle = args.settle if args.settle is not None else (0 if args.quick else 120)
            results["databases"] = args.databases or (2 if args.quick else 5)
            results["memory"] = {name: memory(tree, name, env, Path(tmp),
                                              results["databases"], settle)
                                 for name, tree in trees.items()}
        else:
            measure_sizes(args, env, trees, results)
    results["load_after"] = loadavg()
    text = render_memory(results) if args.memory else render(results, args.quick)
    print(text)
    if not args.quick:
        out = RESULTS / f"{args.out or ('service-memory' if args.memory else 'service')}.md"
        out.write_text(text + "\n")
        out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


def measure_sizes(args: argparse.Namespace, env: dict[str, str], trees: dict[str, Path],
                  results: dict[str, Any]) -> None:
    sizes = [int(s) for s in (args.sizes or ("1000" if args.quick else "10000,100000")).split(",")]
    runs = args.runs or (4 if args.quick else 30)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    results["sizes"] = {}
    for size in sizes:
        path = database(size, args.quick)
        queries = generate_queries(max(runs, 10), users(), seed=7)
        log(f"{size:,} memories: {runs} rounds")
        first = args.first_runs if args.first_runs is not None else (1 if args.quick else 10)
        results["sizes"][str(size)] = measure(path, queries, runs, env, trees, first)


if __name__ == "__main__":
    raise SystemExit(main())
