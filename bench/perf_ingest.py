"""bench/perf.py, part 1: the models, the query databases (cached in bench/.cache/) and the
ingest measurements (with the models, with defer_embed, one event per call, the 100k build)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.perf_data import (
    BATCH,
    DATA_VERSION,
    PERF_CHILD,
    REPO_ROOT,
    generate_queries,
    loadavg,
    log,
    pct,
    summary,
    users,
)


def memory_settings(path: Path, embedder_name: str) -> Any:
    from memcli.config import EmbedderSettings, Settings

    return Settings(db=path, embedder=EmbedderSettings(provider=embedder_name))


def make_models(embedder_name: str, sparse: bool) -> tuple[Any, Any]:
    """The embedder and SPLADE encoder the default configuration builds (both lazy)."""
    from memcli.operations.memory import make_embedder, make_sparse

    settings = memory_settings(Path("unused.db"), embedder_name)
    return make_embedder(settings), (make_sparse(settings) if sparse else None)


def warm_models(embedder: Any, sparse: Any) -> None:
    """Load the models: loading is start-up cost, not throughput or query latency."""
    if embedder is not None:
        embedder.embed_query("load the model")
    if sparse is not None:
        sparse.encode_query("load the model")


def open_memory(path: Path, embedder: Any, sparse: Any = None) -> Any:
    from memcli.config import Settings
    from memcli.operations.memory import Memory

    return Memory.open(path, embedder=embedder, sparse=sparse, settings=Settings(db=path))


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", ".json"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def checkpoint(path: Path) -> None:
    import apsw

    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def ingest_batches(memory: Any, events: Sequence[dict], *, defer: bool, label: str
                   ) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) to ingest `events` in batches of BATCH."""
    wall = cpu = 0.0
    done = 0
    last_log = time.perf_counter()
    for chunk in batches(events, BATCH):
        t0, c0 = time.perf_counter(), time.process_time()
        report = memory.ingest(list(chunk), defer_embed=defer)
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        if report.rejected or len(report.created) != len(chunk):
            raise SystemExit(f"{label}: ingest rejected records: {report.rejected[:3]}")
        done += len(chunk)
        if time.perf_counter() - last_log > 30:
            last_log = time.perf_counter()
            log(f"{label}: {done}/{len(events)} events, {done / wall:.0f}/s")
    return wall, cpu


# ----------------------------------------------------------------------------- 1. ingest


def cached_meta(path: Path, events: int, rebuild: bool, config: dict[str, Any]
                ) -> dict[str, Any] | None:
    meta_path = Path(str(path) + ".json")
    if rebuild or not path.exists() or not meta_path.exists():
        return None
    meta = json.loads(meta_path.read_text())
    if (meta.get("data_version") != DATA_VERSION or meta.get("events") != events
            or meta.get("config") != config or "cpu_seconds" not in meta):
        return None
    log(f"reusing {path.name} (built {meta['built_at']}; --rebuild to measure again)")
    meta["cached"] = True
    return meta


def build_embedded_db(path: Path, events: list[dict], embedder_name: str, use_sparse: bool,
                      rebuild: bool) -> dict[str, Any]:
    """The query database with real vectors; returns the ingest measurement made building it."""
    config = {"embedder": embedder_name, "sparse": use_sparse}
    meta = cached_meta(path, len(events), rebuild, config)
    if meta:
        return meta
    remove_db(path)
    log(f"building {path.name}: {len(events)} events, embedder {embedder_name}, "
        f"sparse {use_sparse} (batches of {BATCH})")
    embedder, sparse = make_models(embedder_name, use_sparse)
    warm_models(embedder, sparse)
    with open_memory(path, embedder, sparse) as memory:
        seconds, cpu = ingest_batches(memory, events, defer=False,
                                      label=f"ingest {embedder_name}")
        vectors = int(memory.db.scalar("SELECT count(*) FROM memory_vectors"))
    meta = {"data_version": DATA_VERSION, "events": len(events), "config": config,
            "seconds": seconds, "cpu_seconds": cpu, "events_per_s": len(events) / seconds,
            "vectors": vectors,
            "built_at": datetime.now(UTC).isoformat(timespec="seconds"), "load": loadavg(),
            "cached": False}
    Path(str(path) + ".json").write_text(json.dumps(meta, indent=1))
    return meta


def model_speed(embedder_name: str, use_sparse: bool, texts: list[str]) -> dict[str, Any]:
    """Each model's own document speed (calls of BATCH texts, as ingest makes them)."""
    embedder, sparse = make_models(embedder_name, use_sparse)
    warm_models(embedder, sparse)
    out: dict[str, Any] = {"texts": len(texts)}
    for name, fn in (("embedder", getattr(embedder, "embed_documents", None)),
                     ("sparse", getattr(sparse, "encode_documents", None))):
        if fn is None:
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        for chunk in batches(texts, BATCH):
            fn(list(chunk))
        out[name] = len(texts) / (time.perf_counter() - t0)
        out[f"{name}_cpu_seconds"] = time.process_time() - c0
        log(f"{name} alone: {out[name]:.1f} texts/s")
    return out


def model_ingest_sample(path: Path, events: list[dict], embedder_name: str,
                        use_sparse: bool) -> dict[str, Any]:
    """Memory.ingest with the models on a sample, into a fresh database, in this run (the
    cached big build may have been measured under other conditions)."""
    remove_db(path)
    embedder, sparse = make_models(embedder_name, use_sparse)
    warm_models(embedder, sparse)
    with open_memory(path, embedder, sparse) as memory:
        seconds, cpu = ingest_batches(memory, events, defer=False, label="ingest sample")
    remove_db(path)
    return {"events": len(events), "seconds": seconds, "cpu_seconds": cpu,
            "events_per_s": len(events) / seconds}


def query_models_child(embedder_name: str, use_sparse: bool, n: int) -> None:
    """Runs in a fresh interpreter: embed_query / encode_query latency, one JSON line."""
    embedder, sparse = make_models(embedder_name, use_sparse)
    warm_models(embedder, sparse)
    texts = [q["text"] for q in generate_queries(n + 5, users())]
    out: dict[str, Any] = {}
    for name, fn in (("embed_query", getattr(embedder, "embed_query", None)),
                     ("encode_query", getattr(sparse, "encode_query", None))):
        if fn is None:
            continue
        walls, cpus = [], []
        for text in texts:
            t0, c0 = time.perf_counter(), time.process_time()
            fn(text)
            walls.append((time.perf_counter() - t0) * 1000)
            cpus.append((time.process_time() - c0) * 1000)
        out[name] = {**summary(walls[5:]), "cpu_p50": pct(cpus[5:], 50)}
    print(json.dumps(out))


def query_models(embedder_name: str, use_sparse: bool, n: int = 60) -> dict[str, Any]:
    """Query-side model latency in fresh processes, with the OpenMP wait policy the library
    leaves alone (default: threads spin) and with OMP_WAIT_POLICY=PASSIVE (what the CLI sets)."""
    out = {}
    for label, policy in (("OpenMP default", None), ("OMP_WAIT_POLICY=PASSIVE", "PASSIVE")):
        env = dict(os.environ)
        env.pop("OMP_WAIT_POLICY", None)
        if policy:
            env["OMP_WAIT_POLICY"] = policy
        argv = [*PERF_CHILD, "--child", "query-models",
                "--embedder", embedder_name, "--queries", str(n)]
        if not use_sparse:
            argv.append("--no-sparse")
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=REPO_ROOT)
        if proc.returncode != 0:
            raise SystemExit(f"query-models child failed: {proc.stderr[-800:]}")
        out[label] = json.loads(proc.stdout.strip().splitlines()[-1])
        log(f"query models, {label}: {out[label]}")
    return out


def defer_ingest(path: Path, events: list[dict], single: list[dict], embedder_name: str,
                 use_sparse: bool) -> dict[str, Any]:
    """Batch ingest with defer_embed, then one event per Memory.ingest call."""
    remove_db(path)
    embedder, sparse = make_models(embedder_name, use_sparse)  # configured, never loaded
    with open_memory(path, embedder, sparse) as memory:
        seconds, cpu = ingest_batches(memory, events, defer=True, label="defer ingest")
        warm, measured = single[:20], single[20:]
        for rec in warm:
            memory.ingest([rec], defer_embed=True)
        times, cpus = [], []
        for rec in measured:
            t0, c0 = time.perf_counter(), time.process_time()
            memory.ingest([rec], defer_embed=True)
            times.append((time.perf_counter() - t0) * 1000)
            cpus.append((time.process_time() - c0) * 1000)
    return {"events": len(events), "seconds": seconds, "cpu_seconds": cpu,
            "events_per_s": len(events) / seconds, "single_ms": summary(times),
            "single_cpu_ms": summary(cpus)}


def ingest_large(path: Path, events: list[dict], embedder_name: str, use_sparse: bool,
                 rebuild: bool) -> dict[str, Any]:
    """Step one of the large database: defer_embed ingest (cached on its own)."""
    config = {"embedder": embedder_name, "sparse": use_sparse, "stage": "ingested"}
    meta = cached_meta(path, len(events), rebuild, config)
    if meta:
        return meta
    remove_db(path)
    log(f"building {path.name}: {len(events)} events with defer_embed (batches of {BATCH})")
    with open_memory(path, *make_models(embedder_name, use_sparse)) as memory:
        seconds, cpu = ingest_batches(memory, events, defer=True,
                                      label="defer ingest (large)")
    meta = {"data_version": DATA_VERSION, "events": len(events), "config": config,
            "seconds": seconds, "cpu_seconds": cpu, "events_per_s": len(events) / seconds,
            "built_at": datetime.now(UTC).isoformat(timespec="seconds"), "load": loadavg(),
            "cached": False}
    Path(str(path) + ".json").write_text(json.dumps(meta, indent=1))
    return meta


def build_large_db(path: Path, events: list[dict], source_db: Path, embedder_name: str,
                   use_sparse: bool, rebuild: bool) -> dict[str, Any]:
    """The large database: defer_embed ingest, then vectors and SPLADE postings copied from
    the small database (vectors with noise for the memories beyond it)."""
    import apsw
    import numpy as np

    from memcli.store import sparse as sparse_sql
    from memcli.store import vectors as vec

    config = {"embedder": embedder_name, "sparse": use_sparse, "source": source_db.name}
    meta = cached_meta(path, len(events), rebuild, config)
    if meta:
        return meta
    meta = ingest_large(path, events, embedder_name, use_sparse, rebuild)
    log(f"{path.name}: copying vectors{' and postings' if use_sparse else ''} "
        f"from {source_db.name}")
    src = apsw.Connection(str(source_db), flags=apsw.SQLITE_OPEN_READONLY)
    rows = list(src.execute("SELECT memory_id, embedding FROM memory_vectors ORDER BY memory_id"))
    postings: dict[int, dict[int, float]] = {}
    if use_sparse:
        for term, mid, weight in src.execute(
                "SELECT term_id, memory_id, weight FROM sparse_postings"):
            postings.setdefault(int(mid), {})[int(term)] = weight / sparse_sql.SCALE
    vocab = src.execute("SELECT value FROM meta WHERE key = 'sparse_vocab'").fetchone()
    src.close()
    if not rows or [r[0] for r in rows] != list(range(1, len(rows) + 1)):
        raise SystemExit(f"{source_db.name}: memory ids are not 1..n, cannot map vectors")
    base = np.stack([np.frombuffer(blob, dtype=np.float32) for _, blob in rows])
    rng = np.random.default_rng(3)
    with open_memory(path, *make_models(embedder_name, use_sparse)) as memory:
        ids = [int(r[0]) for r in memory.db.execute("SELECT id FROM memories ORDER BY id")]
        t0 = time.perf_counter()
        with memory.db.transaction():
            memory.db.execute("DELETE FROM memory_vectors")
            if memory.db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'vec_memories'"):
                memory.db.execute("DELETE FROM vec_memories")
            if use_sparse:
                for table in ("sparse_postings", "memory_sparse", "sparse_df"):
                    memory.db.execute(f"DELETE FROM {table}")
            if vocab:
                memory.db.set_meta("sparse_vocab", vocab[0])
        for chunk in batches(ids, 5000):
            idx = np.array([(i - 1) % len(base) for i in chunk])
            mat = base[idx].copy()
            noisy = np.array([i > len(base) for i in chunk])
            mat[noisy] += rng.normal(0, 0.015, size=(int(noisy.sum()), base.shape[1]))
            mat = (mat / np.linalg.norm(mat, axis=1, keepdims=True)).astype(np.float32)
            with memory.db.transaction():
                vec.insert_vectors(memory.db, [(i, v.tobytes()) for i, v in zip(chunk, mat,
                                                                                strict=True)])
                if postings:
                    sparse_sql.insert_postings(memory.db, [
                        (i, postings.get(int(j) + 1, {})) for i, j in zip(chunk, idx,
                                                                           strict=True)])
        meta["fill_seconds"] = time.perf_counter() - t0
    meta.update({"config": config, "vectors": len(ids)})  # "cached" as the ingest step says
    Path(str(path) + ".json").write_text(json.dumps(meta, indent=1))
    return meta


