"""What the optional reranker adds to a query besides the model's own time: the round trip.

    python -m bench.rerank_latency [--rounds 200]

What it measures, how, and the results: bench/README.md, "The reranker's round trip".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "bench" / "results" / "rerank-latency.md"
SIZES = (20, 50)
LENGTHS = {"turn (130 chars)": 130, "chunk (2,000 chars)": 2000}
WIRES = ("tei", "cohere")
QUERY = "what did Caroline say about the adoption agency interview"
WORDS = (
    "adoption",
    "agency",
    "interview",
    "painting",
    "camping",
    "support",
    "group",
    "school",
    "family",
    "beach",
    "music",
    "friends",
    "weekend",
    "career",
    "counselling",
    "garden",
)


def texts(count: int, length: int) -> list[str]:
    """`count` distinct texts of about `length` characters."""
    out = []
    for i in range(count):
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(length // 6 + 1)]
        out.append(f"{i}: " + " ".join(words)[: length - 4])
    return out


def serve() -> None:
    """The stub in this process until stdin closes (the bench's server process)."""
    from tests.support.rerankstub import RerankStub

    with RerankStub(scores={"adoption": 2.0, "interview": 1.0}) as stub:
        print(stub.url, flush=True)
        sys.stdin.read()


def cold(url: str, wire: str, n: int, length: int) -> tuple[float, float, float]:
    """A new process's first call, in ms: `import httpx`, then connect and one round trip,
    and what an https endpoint would add (a client that loads the CA bundle). The interpreter's
    start and memcli's own imports, which any command pays, are not counted."""
    code = (
        "import time\n"
        "from bench.rerank_latency import texts\n"
        "from memcli.providers.reranker import HttpReranker\n"
        f"batch = texts({n}, {length})\n"
        "t0 = time.perf_counter()\n"
        "import httpx\n"
        "t1 = time.perf_counter()\n"
        f"HttpReranker({url!r}, wire={wire!r}, model='m').score({QUERY!r}, batch)\n"
        "t2 = time.perf_counter()\n"
        "httpx.Client().close()\n"  # what an https endpoint adds: the CA bundle loaded
        "print((t1 - t0) * 1000, (t2 - t1) * 1000, (time.perf_counter() - t2) * 1000)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    imported, first, tls = out.stdout.split()
    return float(imported), float(first), float(tls)


def warm(url: str, rounds: int) -> dict[tuple[str, str, int], list[float]]:
    from memcli.providers.reranker import HttpReranker

    clients = {wire: HttpReranker(url, wire=wire, model="m") for wire in WIRES}
    cases = [(wire, name, n) for wire in WIRES for name in LENGTHS for n in SIZES]
    times: dict[tuple[str, str, int], list[float]] = {case: [] for case in cases}
    for client in clients.values():
        client.score(QUERY, texts(2, 10))  # connect once, as a long-lived process has
    for _ in range(rounds):
        for wire, name, n in cases:
            batch = texts(n, LENGTHS[name])
            t0 = time.perf_counter()
            clients[wire].score(QUERY, batch)
            times[(wire, name, n)].append((time.perf_counter() - t0) * 1000)
    for client in clients.values():
        client.close()
    return times


def end_to_end(url: str, rounds: int) -> dict[int, tuple[float, float]]:
    """Per N: median ms of Memory.query without and with the reranker."""
    from memcli import Memory
    from memcli.config import RerankSettings, Settings
    from memcli.providers.embedders import HashEmbedder
    from memcli.providers.reranker import make_reranker

    folder = Path(tempfile.mkdtemp(prefix="rerank-bench-"))
    settings = Settings(db=str(folder / "m.db"))
    settings.retrieval.leg_weights.pop("sparse")
    out: dict[int, tuple[float, float]] = {}
    with Memory.open(settings.db, embedder=HashEmbedder(64), settings=settings) as memory:
        memory.ingest(
            [
                {"text": t, "session_id": f"s{i // 20}", "user_id": "u"}
                for i, t in enumerate(texts(2000, 130))
            ]
        )
        filters = memory.filters(user_id="u")
        for n in SIZES:
            reranker = make_reranker(RerankSettings(url=url, top_n=n))
            runs: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(rounds):
                for on in (False, True):
                    memory.reranker = reranker if on else None
                    t0 = time.perf_counter()
                    memory.query(QUERY, filters=filters, record_access=False)
                    runs[on].append((time.perf_counter() - t0) * 1000)
            assert reranker is not None
            reranker.close()
            out[n] = (statistics.median(runs[False]), statistics.median(runs[True]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve()
        return 0
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.rerank_latency", "--serve"],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        times = warm(url, args.rounds)
        colds = {}
        for name in LENGTHS:
            for n in SIZES:
                runs = [cold(url, "cohere", n, LENGTHS[name]) for _ in range(5)]
                colds[(n, name)] = tuple(statistics.median(r[i] for r in runs) for i in range(3))
        e2e = end_to_end(url, max(20, args.rounds // 4))
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=10)
    report(times, colds, e2e, args.rounds)
    return 0


def report(
    times: dict[tuple[str, str, int], list[float]],
    colds: dict[tuple[int, str], tuple[float, ...]],
    e2e: dict[int, tuple[float, float]],
    rounds: int,
) -> None:
    lines = [
        "# The reranker's round trip (scripted server on 127.0.0.1)",
        "",
        f"`python -m bench.rerank_latency --rounds {rounds}`: memcli's side and the HTTP "
        "round trip only; a real server adds its model's time. ms, on "
        f"{os.cpu_count()} cores at a load average of {os.getloadavg()[0]:.1f}.",
        "",
        "| format | texts | N | warm p50 | warm p95 |",
        "|---|---|---|---|---|",
    ]
    for (wire, name, n), values in times.items():
        p95 = statistics.quantiles(values, n=20)[-1]
        lines.append(f"| {wire} | {name} | {n} | {statistics.median(values):.2f} | {p95:.2f} |")
    lines += [
        "",
        "A new process's first call (cohere format, median of 5 processes): `import httpx`; "
        "then the client made (what it imports on first use: httpcore, h11, anyio), the "
        "connection and one round trip to the http endpoint; and what an https endpoint adds "
        "(a second client, which loads the CA bundle):",
        "",
        "| texts | N | import httpx | first call | + https client |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {n} | {imp:.1f} | {first:.1f} | {tls:.1f} |"
        for (n, name), (imp, first, tls) in colds.items()
    ]
    lines += [
        "",
        "`Memory.query` (2,000 memories of 130 chars, hash embedder, top_k 10), median:",
        "",
        "| N | reranker off | on | added |",
        "|---|---|---|---|",
    ]
    lines += [f"| {n} | {off:.2f} | {on:.2f} | {on - off:.2f} |" for n, (off, on) in e2e.items()]
    RESULTS.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(json.dumps({"written": str(RESULTS.relative_to(REPO_ROOT))}))


if __name__ == "__main__":
    raise SystemExit(main())
