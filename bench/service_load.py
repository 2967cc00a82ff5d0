"""Load on one `memcli serve`: concurrent agents over HTTP and MCP, then an exactly-once check.

    python -m bench.service_load              # 10 agents for 60 s on a copy of perf.py's 10k db
    python -m bench.service_load --quick      # CI smoke: 4 agents for 8 s, 1k hash db, no file
    python -m bench.service_load --agents 10 --seconds 60 --size 10000
    python -m bench.service_load --think 1    # each agent pauses 1 s between rounds (its LLM call)

What it measures, how, and the results: bench/README.md, "The service".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.perf_data import loadavg, pct
from bench.service import database
from bench.service_support import Daemon, cli_env

REPO_ROOT = Path(__file__).resolve().parents[1]

RESULTS = REPO_ROOT / "bench" / "results" / "service-load.md"
TENANT = "load"
WORDS = ("deploy", "budget", "lisbon", "postgres", "review", "invoice", "migration", "roadmap")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stats:
    def __init__(self) -> None:
        self.ms: dict[str, list[float]] = {}
        self.failures: dict[str, list[str]] = {}
        self.acked: list[str] = []

    def add(self, key: str, ms: float) -> None:
        self.ms.setdefault(key, []).append(ms)

    def fail(self, key: str, why: str) -> None:
        self.failures.setdefault(key, []).append(why[:200])


def event(agent: int, i: int) -> dict[str, Any]:
    word = WORDS[(agent + i) % len(WORDS)]
    return {"event_id": f"load-{agent}-{i}", "tenant_id": TENANT, "user_id": f"agent{agent}",
            "session_id": f"load-{agent}", "kind": "message",
            "actor": {"type": "human", "id": f"agent{agent}"},
            "content": {"text": f"note {i} from agent {agent}: the {word} item is due soon"}}


async def http_agent(n: int, base: str, deadline: float, stats: Stats, think: float
                     ) -> None:
    import httpx

    headers = {"X-Memcli-Tenant": TENANT}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
        i = 0
        while time.monotonic() < deadline:
            ev = event(n, i)
            word = WORDS[(n + i) % len(WORDS)]
            calls = (
                ("record_event", "/api/v1/events", ev),
                ("build_acb", "/api/v1/acb/build",
                 {"tenant_id": TENANT, "user_id": ev["user_id"], "session_id": ev["session_id"],
                  "query": f"what about the {word} item?"}),
                ("query", "/api/v1/query",
                 {"query": f"{word} item", "filters": {"user_id": ev["user_id"]}, "top_k": 5}),
            )
            for op, path, body in calls:
                key = f"http | {op}"
                t0 = time.perf_counter()
                try:
                    r = await client.post(path, json=body)
                    stats.add(key, (time.perf_counter() - t0) * 1000)
                    if r.status_code != 200:
                        stats.fail(key, f"{r.status_code} {r.text}")
                    elif op == "record_event":
                        stats.acked.append(ev["event_id"])
                except Exception as exc:  # a failed request is a result here, not a crash
                    stats.fail(key, repr(exc))
            i += 1
            await asyncio.sleep(think)


async def mcp_agent(n: int, base: str, deadline: float, stats: Stats, think: float
                    ) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    # No X-Memcli-Agent: an agent the allowlists do not name is refused, and the load is about
    # the service, not about one agent's categories.
    headers = {"X-Memcli-Tenant": TENANT, "X-Memcli-User": f"agent{n}"}
    transport = streamable_http_client(f"{base}/mcp", http_client=httpx2.AsyncClient(
        headers=headers, timeout=60))
    async with Client(transport, mode="legacy") as client:
        i = 0
        while time.monotonic() < deadline:
            ev = event(n, i)
            word = WORDS[(n + i) % len(WORDS)]
            calls = (
                ("record_event", "memory_record_event",
                 {"text": ev["content"]["text"], "event_id": ev["event_id"],
                  "session_id": ev["session_id"]}),
                ("build_acb", "memory_build_acb",
                 {"query": f"what about the {word} item?", "session_id": ev["session_id"]}),
                ("query", "memory_query", {"query": f"{word} item", "top_k": 5}),
            )
            for op, tool, args in calls:
                key = f"mcp | {op}"
                t0 = time.perf_counter()
                try:
                    result = await client.call_tool(tool, args)
                    stats.add(key, (time.perf_counter() - t0) * 1000)
                    if result.is_error:
                        stats.fail(key, str(result.content)[:200])
                    elif op == "record_event":
                        stats.acked.append(ev["event_id"])
                except Exception as exc:
                    stats.fail(key, repr(exc))
            i += 1
            await asyncio.sleep(think)


async def run_agents(agents: int, base: str, seconds: float, think: float) -> Stats:
    stats = Stats()
    deadline = time.monotonic() + seconds
    tasks = [(http_agent if n % 2 == 0 else mcp_agent)(n, base, deadline, stats, think)
             for n in range(agents)]
    await asyncio.gather(*tasks)
    return stats


def tree_cpu_s(root: int) -> dict[str, float]:
    """CPU seconds so far (user + system) of the daemon's processes, by role, from Linux's
    /proc: its main process, the indexer (the one at nice 19) and the rest (the HTTP process)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    own: dict[int, tuple[float, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # a process that ended meanwhile
            continue
        parent[int(entry)] = int(fields[1])
        own[int(entry)] = ((int(fields[11]) + int(fields[12])) / tick, int(fields[16]))
    out = {"main": 0.0, "http": 0.0, "indexer": 0.0}
    for pid, (cpu, nice) in own.items():
        up = pid
        while up not in (root, 0, 1) and up in parent:
            up = parent[up]
        if up == root:
            out["main" if pid == root else "indexer" if nice == 19 else "http"] += cpu
    return out


def _self_cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def machine_busy() -> tuple[int, int]:
    """(all, idle) jiffies of every core since boot (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return sum(ticks), ticks[3] + ticks[4]


def cpu_use(before: dict[str, float], after: dict[str, float], wall: float) -> dict[str, float]:
    """Cores busy on average over `wall` seconds, per role."""
    return {k: round((after[k] - before[k]) / wall, 2) for k in before}


def exactly_once(db: Path, acked: list[str]) -> dict[str, int]:
    import apsw

    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        counts = dict(conn.execute(
            "SELECT event_id, count(*) FROM events WHERE tenant_id = ? AND event_id LIKE 'load-%'"
            " GROUP BY event_id", (TENANT,)))
        with_memory = {row[0] for row in conn.execute(
            "SELECT DISTINCT e.event_id FROM events e JOIN memories m ON m.event_id = e.event_id "
            "AND m.tenant_id = e.tenant_id WHERE e.tenant_id = ? AND e.event_id LIKE 'load-%'",
            (TENANT,))}
    finally:
        conn.close()
    return {"acknowledged": len(acked), "acknowledged twice": len(acked) - len(set(acked)),
            "found once": sum(1 for e in set(acked) if counts.get(e) == 1),
            "missing": sum(1 for e in set(acked) if e not in counts),
            "duplicated": sum(1 for n in counts.values() if n > 1),
            "without a memory": sum(1 for e in set(acked) if e not in with_memory)}


def render(res: dict[str, Any], quick: bool) -> str:
    lines = ["# memcli serve under load: agents over HTTP and MCP", "",
             f"Measured {time.strftime('%Y-%m-%d')}{' (quick smoke)' if quick else ''}: "
             f"{res['agents']} agents for {res['seconds']:.0f} s against one daemon on a "
             f"{res['size']:,}-memory database, pausing {res['think']:g} s between rounds; "
             f"{res['rate']:.1f} requests answered a second; load average before/after "
             f"{res['load_before']} / {res['load_after']}.", "",
             "| transport | operation | requests | p50 ms | p95 ms | failed |",
             "|---|---|---|---|---|---|"]
    for key, row in sorted(res["ops"].items()):
        transport, op = key.split(" | ")
        lines.append(f"| {transport} | {op} | {row['n']} | {row['p50']:.1f} | {row['p95']:.1f} "
                     f"| {row['failed']} |")
    lines += ["", "Events: " + ", ".join(f"{k} {v}" for k, v in res["events"].items()) + "."]
    if "cpu" in res:
        c = res["cpu"]
        lines += ["", f"Cores busy on average during the run (of {os.cpu_count()}): the daemon's "
                  f"HTTP process {c['http']}, its indexer {c['indexer']}, its main process "
                  f"{c['main']}; this load generator {c['load generator']}; the whole machine "
                  f"{c['machine']}."]
    for key, why in res["failure_samples"].items():
        lines.append(f"- first failure of {key}: `{why}`")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 agents, 8 s, 1k hash db, no file")
    ap.add_argument("--agents", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--size", type=int, default=None, help="database size (perf.py's)")
    ap.add_argument("--think", type=float, default=0.0, help="seconds each agent pauses a round")
    args = ap.parse_args(argv)
    agents = args.agents or (4 if args.quick else 10)
    seconds = args.seconds or (8.0 if args.quick else 60.0)
    size = args.size or (1000 if args.quick else 10000)
    res: dict[str, Any] = {"agents": agents, "seconds": seconds, "size": size, "think": args.think,
                           "load_before": loadavg()}
    with tempfile.TemporaryDirectory(prefix="memcli-load-") as tmp:
        env = cli_env(Path(tmp), hash_embedder=args.quick)
        db = database(size, args.quick)
        port = free_port()
        with Daemon(db, env, "--port", str(port), "--no-token") as daemon:
            daemon.wait_ready()
            assert daemon.proc is not None
            # Where the 2 cores go during the run: the daemon's processes, this load
            # generator (the agents' clients run here), and the machine as a whole.
            cpu0, self0, machine0 = (tree_cpu_s(daemon.proc.pid), _self_cpu_s(),
                                     machine_busy())
            t0 = time.monotonic()
            stats = asyncio.run(run_agents(agents, f"http://127.0.0.1:{port}", seconds,
                                           args.think))
            wall = time.monotonic() - t0
            cpu = cpu_use(cpu0, tree_cpu_s(daemon.proc.pid), wall)
            cpu["load generator"] = round((_self_cpu_s() - self0) / wall, 2)
            machine1 = machine_busy()
            all_, idle = machine1[0] - machine0[0], machine1[1] - machine0[1]
            cpu["machine"] = round((os.cpu_count() or 1) * (1 - idle / all_), 2)
            res["cpu"] = cpu
        res["events"] = exactly_once(db, stats.acked)
    res["load_after"] = loadavg()
    res["ops"] = {k: {"n": len(v), "p50": pct(v, 50), "p95": pct(v, 95),
                      "failed": len(stats.failures.get(k, []))} for k, v in stats.ms.items()}
    res["failure_samples"] = {k: v[0] for k, v in stats.failures.items()}
    res["rate"] = sum(len(v) for v in stats.ms.values()) / seconds
    text = render(res, args.quick)
    print(text)
    if not args.quick:
        out = RESULTS.with_name(f"service-load{f'-think{args.think:g}' if args.think else ''}.md")
        out.write_text(text + "\n")
        out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    failed = sum(len(v) for v in stats.failures.values())
    ev = res["events"]
    bad = ev["missing"] + ev["duplicated"] + ev["without a memory"]
    return 1 if failed or bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
