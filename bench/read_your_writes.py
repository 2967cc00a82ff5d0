"""Read your own writes through `memcli serve`: write-then-query pairs on each path, counted.

    python -m bench.read_your_writes            # 1,000 pairs per path, idle then 10 agents
    python -m bench.read_your_writes --quick    # CI smoke: 10 pairs per path, 2 agents, no file
    python -m bench.read_your_writes --cli-pairs 200    # fewer CLI pairs (two processes each)
    python -m bench.read_your_writes --paths cli --pairs 300    # one path: its own file

What it measures, how, and the results: bench/README.md, "The service".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.service_support import Daemon, cli_env

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "bench" / "results" / "read-your-writes.md"
WORDS = ("deploy", "budget", "lisbon", "postgres", "review", "invoice", "migration", "roadmap")
PATHS = ("cli", "http", "mcp")


def note(tag: str, i: int) -> tuple[str, str]:
    """(text, the word a query for it asks): a word no other note holds."""
    word = f"{tag}{i}x{WORDS[i % len(WORDS)]}"
    return f"note {i}: the {WORDS[i % len(WORDS)]} item {word} is due soon", word


def chatter(n: int, i: int) -> str:
    """Agent `n`'s `i`th event: nothing like the probes' notes. Agents writing the probes'
    template (the same number, word and pieces of the probe's word) made thousands of
    near-copies that the dense and sparse legs rank above an older probe note: a ranking
    contest, not visibility (docs/design/read-your-writes.md, "Misses that were not")."""
    return f"agent {n} heartbeat {i}: queue length {i % 17}, all workers alive"


def tool_name(names: list[str], short: str) -> str:
    """The MCP tool `short`, whichever separator the server's names use."""
    return next(n for n in names if n.replace(".", "_") in (f"memory_{short}", short))


def record_args(schema: dict[str, Any], text: str, **extra: Any) -> dict[str, Any]:
    """The record-event tool's arguments for `text` (flat `text`, or a content object)."""
    props = schema.get("properties", {})
    return {**({"text": text} if "text" in props else {"content": {"text": text}}), **extra}


def brief(hits: list[dict[str, Any]] | None, top: int = 5) -> list[dict[str, Any]]:
    """The first `top` hits as a miss record keeps them: text, fused score, each leg's rank."""
    return [
        {
            "id": h.get("id"),
            "text": h.get("text"),
            "score": h.get("score"),
            "legs": {leg: (v or {}).get("rank") for leg, v in (h.get("scores") or {}).items()},
        }
        for h in (hits or [])[:top]
    ]


class Tally:
    def __init__(self) -> None:
        self.pairs = 0
        self.misses = 0
        self.legs: Counter[str] = Counter()  # found hits by the legs that found them
        self.ms: list[float] = []
        self.sample: str | None = None
        self.missed: list[dict[str, Any]] = []  # each miss: the write's answer and the hits

    def add(
        self, found: list[dict[str, Any]] | None, text: str, ms: float, wrote: Any = None
    ) -> None:
        self.pairs += 1
        self.ms.append(ms)
        hit = next((h for h in found or [] if h.get("text") == text), None)
        if hit is None:
            self.misses += 1
            self.sample = self.sample or text
            self.missed.append(
                {"text": text, "write": wrote, "hits": len(found or []), "top": brief(found)}
            )
        else:
            self.legs["+".join(sorted(hit.get("scores") or {})) or "?"] += 1


async def memcli(env: dict[str, str], argv: list[str]) -> tuple[int, Any, int]:
    """(exit code, parsed stdout, tries) of one forwarded command; a busy answer (75) is
    retried as a script would, up to 5 times."""
    for tries in range(1, 6):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "memcli",
            *argv,
            env=env,
            cwd=REPO_ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        if proc.returncode == 75 and tries < 5:
            await asyncio.sleep(0.2)
            continue
        if proc.returncode != 0:
            raise SystemExit(f"memcli {argv[0]} exit {proc.returncode}: {err.decode()[-400:]}")
        return proc.returncode, json.loads(out), tries
    raise AssertionError("unreachable")


async def cli_pairs(env: dict[str, str], db: Path, n: int, tally: Tally, tag: str) -> None:
    for i in range(n):
        text, word = note(tag, i)
        t0 = time.perf_counter()
        _, wrote, tries = await memcli(
            env, ["ingest", "--text", text, "--user-id", "probe", "--db", str(db)]
        )
        _, found, _ = await memcli(env, ["query", word, "--db", str(db), "--json"])
        ms = (time.perf_counter() - t0) * 1000
        write = {
            "tries": tries,
            **{
                k: wrote.get(k)
                for k in ("created", "memory_ids", "skipped", "rejected", "deferred_embedding")
            },
        }
        tally.add(found, text, ms, write)
        if tally.missed and tally.missed[-1]["text"] == text and "later" not in tally.missed[-1]:
            # The same query a second later: a gap closes, a lost or hidden write does not.
            await asyncio.sleep(1.0)
            _, again, _ = await memcli(env, ["query", word, "--db", str(db), "--json"])
            tally.missed[-1]["later"] = {
                "found": any(h.get("text") == text for h in again),
                "top": brief(again, 3),
            }


async def http_pairs(url: str, n: int, tally: Tally, tag: str) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for i in range(n):
            text, word = note(tag, i)
            t0 = time.perf_counter()
            wrote = await client.post(
                "/api/v1/events",
                json={
                    "user_id": "probe",
                    "kind": "message",
                    "actor": {"type": "human", "id": "probe"},
                    "content": {"text": text},
                },
            )
            wrote.raise_for_status()
            found = await client.post("/api/v1/query", json={"query": word})
            found.raise_for_status()
            tally.add(
                found.json(),
                text,
                (time.perf_counter() - t0) * 1000,
                {"status": wrote.status_code, "answer": wrote.json()},
            )


def mcp_client(url: str, user: str) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    return Client(
        streamable_http_client(
            f"{url}/mcp",
            http_client=httpx2.AsyncClient(headers={"X-Memcli-User": user}, timeout=120),
        ),
        mode="legacy",
    )


async def mcp_pairs(url: str, n: int, tally: Tally, tag: str) -> None:
    async with mcp_client(url, "probe") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        record, query = tool_name(list(tools), "record_event"), tool_name(list(tools), "query")
        for i in range(n):
            text, word = note(tag, i)
            t0 = time.perf_counter()
            wrote = await client.call_tool(record, record_args(tools[record].input_schema, text))
            if wrote.is_error:
                raise SystemExit(f"MCP record_event: {wrote.content[0].text}")
            found = await client.call_tool(query, {"query": word})
            if found.is_error:
                raise SystemExit(f"MCP query: {found.content[0].text}")
            answer = json.loads(found.content[0].text)
            hits = answer.get("result", answer) if isinstance(answer, dict) else answer
            tally.add(
                hits if isinstance(hits, list) else [],
                text,
                (time.perf_counter() - t0) * 1000,
                {"answer": wrote.content[0].text},
            )


async def writer(n: int, url: str, stop: asyncio.Event, written: list[int]) -> None:
    """One agent writing events back to back until `stop` (even: HTTP, odd: MCP)."""
    i = 0
    if n % 2 == 0:
        import httpx

        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            while not stop.is_set():
                text = chatter(n, i)
                r = await client.post(
                    "/api/v1/events",
                    json={
                        "user_id": f"agent{n}",
                        "kind": "message",
                        "actor": {"type": "human", "id": f"agent{n}"},
                        "content": {"text": text},
                    },
                )
                written[0] += r.status_code == 200
                i += 1
        return
    async with mcp_client(url, f"agent{n}") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        record = tool_name(list(tools), "record_event")
        while not stop.is_set():
            text = chatter(n, i)
            result = await client.call_tool(record, record_args(tools[record].input_schema, text))
            written[0] += not result.is_error
            i += 1


async def run_path(
    path: str, agents: int, pairs: int, url: str, env: dict[str, str], db: Path
) -> tuple[Tally, int]:
    tally, stop, written = Tally(), asyncio.Event(), [0]
    load = [asyncio.create_task(writer(n, url, stop, written)) for n in range(agents)]
    # Each phase writes notes of its own: a loaded phase re-writing the idle phase's texts
    # would measure duplicates (found because they were there before), not fresh writes.
    tag = f"{path[0]}{agents}a"
    try:
        if path == "cli":
            await cli_pairs(env, db, pairs, tally, tag)
        elif path == "http":
            await http_pairs(url, pairs, tally, tag)
        else:
            await mcp_pairs(url, pairs, tally, tag)
    finally:
        stop.set()
        await asyncio.gather(*load)
    return tally, written[0]


def seed(env: dict[str, str], db: Path, count: int) -> None:
    """`count` notes the probes' queries share words with (their dense and sparse legs match
    them), written before the daemon starts, with their vectors."""
    import subprocess

    lines = "".join(
        json.dumps({"text": note("s", i)[0], "user_id": "seed"}) + "\n" for i in range(count)
    )
    subprocess.run(
        [sys.executable, "-m", "memcli", "ingest", "-", "--db", str(db)],
        env=env,
        input=lines,
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    )


def pct(values: list[float], q: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))] if ordered else 0.0


def render(rows: list[dict[str, Any]], quick: bool, argv: list[str]) -> str:
    command = " ".join(["python -m bench.read_your_writes", *argv])
    lines = [
        "# Read your own writes through memcli serve",
        "",
        f"Measured {time.strftime('%Y-%m-%d')}{' (quick smoke)' if quick else ''} with "
        f"`{command}`: each pair "
        "writes a note with a word of its own and at once runs the default query (top 10) "
        "for that word; a miss is a pair whose note is not among the hits. Target 0.",
        "",
        "| path | load | pairs | misses | events written by the agents meanwhile "
        "| pair p50 ms | pair p95 ms | legs that found the note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        legs = ", ".join(f"{k} {v}" for k, v in sorted(r["legs"].items()))
        lines.append(
            f"| {r['path']} | {r['load']} | {r['pairs']} | {r['misses']} | "
            f"{r['written']} | {r['p50']:.0f} | {r['p95']:.0f} | {legs} |"
        )
    for r in rows:
        for m in r["missed"]:
            top = "; ".join(f"`{h['text']}` {h['score']} {h['legs']}" for h in m["top"][:3])
            later = m.get("later")
            lines.append(
                f"- miss ({r['path']}, {r['load']}): `{m['text']}`; the write: "
                f"{json.dumps(m['write'])}; {m['hits']} hits, first: {top}"
                + (f"; a second later found: {later['found']}" if later else "")
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 pairs a path, 2 agents, no file")
    ap.add_argument("--pairs", type=int, default=None, help="pairs per path and load")
    ap.add_argument("--agents", type=int, default=None, help="agents writing under load")
    ap.add_argument(
        "--cli-pairs",
        type=int,
        default=None,
        help="pairs for the CLI path (two processes each: the slow one)",
    )
    ap.add_argument("--paths", default=",".join(PATHS), help="comma-separated: cli,http,mcp")
    ap.add_argument("--loaded-only", action="store_true", help="skip the idle phase")
    args = ap.parse_args(argv)
    # A run of some paths or one load writes beside the full run's file, never over it.
    part = (
        ""
        if args.paths == ",".join(PATHS) and not args.loaded_only
        else ("-" + args.paths.replace(",", "-") + ("-loaded" if args.loaded_only else ""))
    )
    results = RESULTS.with_name(f"read-your-writes{part}.md")
    pairs = args.pairs or (10 if args.quick else 1000)
    agents = args.agents or (2 if args.quick else 10)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="memcli-ryw-") as tmp:
        env = cli_env(Path(tmp), hash_embedder=True)
        db = Path(tmp) / "ryw.db"
        seed(env, db, 200)
        with Daemon(db, env, "--port", "0", "--no-token") as daemon:
            daemon.wait_ready()
            url = str(daemon.status()["http_url"])
            for path in args.paths.split(","):
                for load in (agents,) if args.loaded_only else (0, agents):
                    t0 = time.monotonic()
                    count = args.cli_pairs or pairs if path == "cli" else pairs
                    tally, written = asyncio.run(run_path(path, load, count, url, env, db))
                    rows.append(
                        {
                            "path": path,
                            "load": f"{load} agents writing" if load else "idle",
                            "pairs": tally.pairs,
                            "misses": tally.misses,
                            "written": written,
                            "p50": pct(tally.ms, 50),
                            "p95": pct(tally.ms, 95),
                            "legs": dict(tally.legs),
                            "sample": tally.sample,
                            "missed": tally.missed,
                            "seconds": round(time.monotonic() - t0, 1),
                        }
                    )
                    print(
                        f"{path} {rows[-1]['load']}: {tally.misses}/{tally.pairs} missed "
                        f"({rows[-1]['seconds']} s)",
                        file=sys.stderr,
                        flush=True,
                    )
    text = render(rows, args.quick, sys.argv[1:] if argv is None else argv)
    print(text)
    if not args.quick:
        results.write_text(text + "\n")
        results.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    return 1 if any(r["misses"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
