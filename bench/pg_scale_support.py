"""The corpus, the replayed models and the child processes of bench/pg_scale.py.

What it counts and how: bench/README.md, "PostgreSQL beside SQLite at scale".
"""

from __future__ import annotations

import json
import os
import pickle
import random
import resource
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench import perf_data as perf  # its generator, query set and percentiles
from bench.perf_ingest import batches

BENCH = Path(__file__).resolve().parent

USERS = 1000
TENANTS = 8
BASE = 100_000  # perf's largest corpus: the texts with stored encodings


def tenant_of(user: int) -> str:
    return f"t{user % TENANTS}"


def scopes() -> list[tuple[str, str]]:
    return [(tenant_of(u), f"u{u:04d}") for u in range(USERS)]


def corpus(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """n events: perf's texts with 1,000 users in 8 tenants (see the module docstring)."""
    base = perf.generate_events(min(n, BASE))
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    copy = 0
    while len(out) < n:
        owner: dict[str, int] = {}
        shift = timedelta(days=400 * copy)
        for event in base[: n - len(out)]:
            user = owner.setdefault(event["session_id"], rng.randrange(USERS))
            ts = datetime.strptime(event["ts"], "%Y-%m-%dT%H:%M:%SZ") + shift
            human = event["actor"]["type"] == "human"
            out.append({**event, "ts": ts.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "tenant_id": tenant_of(user), "user_id": f"u{user:04d}",
                        "session_id": f"c{copy}{event['session_id']}",
                        "actor": {"type": "human", "id": f"u{user:04d}"} if human
                        else event["actor"]})
        copy += 1
    return out


def extra_events(n: int, copy: int, tenant: str | None) -> list[dict[str, Any]]:
    """n more events for the append runs: copy `copy` of the first texts; all in `tenant`
    (users of that tenant) or spread over the 8 tenants."""
    events = corpus(n, seed=1000 + copy)
    rng = random.Random(copy)
    users = [u for u in range(USERS) if tenant is None or tenant_of(u) == tenant]
    owner: dict[str, int] = {}
    for event in events:
        user = owner.setdefault(event["session_id"], rng.choice(users))
        event.update(tenant_id=tenant_of(user), user_id=f"u{user:04d}",
                     session_id=f"x{copy}{event['session_id']}")
        event["ts"] = event["ts"].replace("20", "30", 1)  # another time: distinct content hashes
        if event["actor"]["type"] == "human":
            event["actor"] = {"type": "human", "id": f"u{user:04d}"}
    return events


# ----------------------------------------------------------------------------- replayed models


class ReplayEmbedder:
    """Stored document vectors and query vectors under the real model's id."""

    def __init__(self, model_id: str, dimension: int, docs: dict[str, bytes],
                 queries: dict[str, bytes]) -> None:
        self.model_id, self.dimension = model_id, dimension
        self.docs, self.queries = docs, queries

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        rows = [np.frombuffer(self.docs[t], dtype=np.float32) for t in texts]
        return np.vstack(rows) if rows else np.empty((0, self.dimension), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.frombuffer(self.queries[text], dtype=np.float32)


class ReplaySparse:
    """Stored SPLADE weights under the real encoder's model id and vocabulary hash."""

    def __init__(self, model_id: str, vocab_hash: str, docs: dict[str, dict[int, float]],
                 queries: dict[str, dict[int, float]]) -> None:
        self.model_id, self.vocab_hash = model_id, vocab_hash
        self.docs, self.queries = docs, queries

    def encode_documents(self, texts: list[str]) -> list[dict[int, float]]:
        return [self.docs[t] for t in texts]

    def encode_query(self, text: str) -> dict[int, float]:
        return self.queries[text]


def load_models(spec: dict[str, Any]) -> tuple[Any, Any]:
    """The embedder and sparse encoder a child uses: the run's query encodings and, for a
    writer, the stored encodings of its own texts only (a writer holds no more than it needs)."""
    if spec["models"] is None:  # --quick
        from memcli.providers.embedders import get_embedder

        return get_embedder("hash"), None
    with open(spec["models"], "rb") as fh:
        m = pickle.load(fh)
    docs: dict[str, Any] = {"vectors": {}, "sparse": {}}
    if spec.get("docs"):
        with open(spec["docs"], "rb") as fh:
            docs = pickle.load(fh)
    embedder = ReplayEmbedder(m["model_id"], m["dimension"], docs["vectors"],
                              m["query_vectors"])
    sparse = None
    if m.get("sparse_model"):
        sparse = ReplaySparse(m["sparse_model"], m["vocab_hash"], docs["sparse"],
                              m["query_sparse"])
    return embedder, sparse


def open_memory(location: str, spec: dict[str, Any]) -> Any:
    from memcli.config import Settings
    from memcli.operations.memory import Memory

    embedder, sparse = load_models(spec)
    return Memory.open(location, embedder=embedder, sparse=sparse,
                       settings=Settings(db=location))


def rss_mb() -> float:
    """This process's peak RSS. VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over
    exec, so a child forked from the big parent would report the parent's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ----------------------------------------------------------------------------- children


def writer_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Ingest this writer's events in batches through Memory.ingest; waits for the start
    file so that all writers begin together."""
    with open(spec["events"], "rb") as fh:
        events = pickle.load(fh)
    memory = open_memory(spec["location"], spec)
    start = Path(spec["start"])
    Path(spec["ready"]).touch()
    while not start.exists():
        time.sleep(0.005)
    from memcli.errors import DatabaseBusyError

    t0 = time.perf_counter()
    per_batch = []
    busy = 0
    for chunk in batches(events, spec["batch"]):
        b0 = time.perf_counter()
        while True:
            try:
                report = memory.ingest(list(chunk))
                break
            except DatabaseBusyError:  # exit 75 for the CLI: an agent retries, so does this
                busy += 1
        per_batch.append((time.perf_counter() - b0) * 1000)
        if report.rejected or len(report.created) != len(chunk):
            raise SystemExit(f"writer: rejected or skipped: {report.rejected[:2]}")
    seconds = time.perf_counter() - t0
    memory.close()
    return {"events": len(events), "seconds": seconds, "end": time.time(), "busy": busy,
            "batch_ms": perf.summary(per_batch)}


def query_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Memory.query latency with the default legs in a warm process: one user, one tenant."""
    memory = open_memory(spec["location"], spec)
    queries, warmup = spec["queries"], spec["warmup"]
    out: dict[str, Any] = {"rss_mb_open": rss_mb()}
    for q in queries[:warmup]:  # warm caches (OS, the server's buffers) and lazy imports
        memory.query(q["text"], filters=memory.filters(tenant_id=q["tenant_id"]))
    for name, user_scope in (("user", True), ("tenant", False)):
        times, cpus, hits = [], [], []
        for q in queries[warmup:]:
            filters = memory.filters(tenant_id=q["tenant_id"],
                                     user_id=q["user_id"] if user_scope else None)
            t0, c0 = time.perf_counter(), time.process_time()
            result = memory.query(q["text"], filters=filters)
            times.append((time.perf_counter() - t0) * 1000)
            cpus.append((time.process_time() - c0) * 1000)
            hits.append(len(result.hits))
        out[name] = {**perf.summary(times), "cpu_p50": perf.pct(cpus, 50),
                     "mean_hits": sum(hits) / len(hits)}
    out["rss_mb"] = rss_mb()
    memory.close()
    return out


def child_main(kind: str, spec_path: str) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    spec = json.loads(Path(spec_path).read_text())
    result = writer_child(spec) if kind == "writer" else query_child(spec)
    print(json.dumps(result))
    return 0
