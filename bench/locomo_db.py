"""bench/locomo.py's databases: every turn ingested with `Memory.ingest`, cached per embedder
under bench/.cache/ and rebuilt when the data or the code deciding what is stored changes."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.locomo_data import (
    BUILD_VERSION,
    CACHE_DIR,
    REPO_ROOT,
    STORAGE_CODE,
    _load_average,
    turn_records,
)
from memcli import Memory
from memcli.config import Settings
from memcli.operations.memory import make_sparse

# --------------------------------------------------------------------------- database


def storage_fingerprint(data_path: Path, model_ids: str) -> str:
    h = hashlib.sha256(f"{BUILD_VERSION}|{model_ids}|".encode())
    h.update(data_path.read_bytes())
    for rel in STORAGE_CODE:
        path = REPO_ROOT / rel
        if path.is_dir():
            files = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix != ".pyc")
        else:
            files = [path]
        for f in files:
            h.update(str(f.relative_to(REPO_ROOT)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def open_memory(location: Path | str, embedder: Any, sparse: Any) -> Memory:
    """A SQLite file or a postgresql:// URL, opened the same way (memcli picks the backend)."""
    return Memory.open(location, embedder=embedder, sparse=sparse)


def default_sparse() -> Any:
    """The SPLADE encoder exactly as the CLI builds it for default settings (None if off)."""
    return make_sparse(Settings(db=Path(":memory:")))  # the path is never opened here


def build_database(
    path: Path | str,
    embedder: Any,
    sparse: Any,
    data: list[dict[str, Any]],
    max_sessions: int | None,
) -> dict[str, Any]:
    """Ingest every conversation into a fresh database at `path` (a SQLite file, or a
    postgresql:// URL of an empty database); returns ingest stats."""
    if isinstance(path, Path):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    stats: dict[str, Any] = {
        "turns": 0,
        "created": 0,
        "memories": 0,
        "rejected": 0,
        "skipped": 0,
        "per_sample_s": {},
    }
    t0 = time.perf_counter()
    c0 = time.process_time()
    with open_memory(path, embedder, sparse) as memory:
        for sample in data:
            records = turn_records(sample, max_sessions)
            t = time.perf_counter()
            # One call per conversation: the library embeds the batch, writes in order, and
            # each turn's context key (its previous turn) comes from the same session.
            report = memory.ingest(records)
            stats["per_sample_s"][sample["sample_id"]] = round(time.perf_counter() - t, 2)
            stats["turns"] += len(records)
            stats["created"] += len(report.created)
            stats["memories"] += len(report.memory_ids)
            stats["rejected"] += len(report.rejected)
            stats["skipped"] += len(report.skipped)
            for problem in report.rejected[:3]:
                print(f"  rejected {problem.event_id}: {problem.reason}", file=sys.stderr)
            print(
                f"  ingested {sample['sample_id']}: {len(records)} turns in "
                f"{stats['per_sample_s'][sample['sample_id']]} s",
                file=sys.stderr,
            )
    stats["ingest_s"] = round(time.perf_counter() - t0, 2)
    # CPU time too: wall time on a shared machine says as much about the neighbours as about us.
    stats["ingest_cpu_s"] = round(time.process_time() - c0, 2)
    stats["load_avg_1m"] = _load_average()
    return stats


def cached_database(
    data_path: Path,
    embedder: Any,
    sparse: Any,
    name: str,
    data: list[dict[str, Any]],
    rebuild: bool,
) -> tuple[Path, dict[str, Any]]:
    """The cached database for this embedder, built first if missing or stale."""
    db_path = CACHE_DIR / f"locomo-{name}.db"
    meta_path = CACHE_DIR / f"locomo-{name}.json"
    sparse_id = sparse.model_id if sparse is not None else "no-sparse"
    fingerprint = storage_fingerprint(data_path, f"{embedder.model_id}|{sparse_id}")
    if not rebuild and db_path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("fingerprint") == fingerprint:
            meta["cached"] = True
            return db_path, meta
    print(
        f"building {db_path.relative_to(REPO_ROOT)} with {embedder.model_id} ...", file=sys.stderr
    )
    # Build under a temporary name so an interrupted build is never mistaken for a cache.
    tmp = db_path.with_suffix(".building.db")
    stats = build_database(tmp, embedder, sparse, data, None)
    tmp.replace(db_path)
    meta = {
        "fingerprint": fingerprint,
        "embedder": embedder.model_id,
        "sparse": sparse_id,
        "built_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        **stats,
    }
    meta_path.write_text(json.dumps(meta, indent=2), encoding="utf-8")
    meta["cached"] = False
    return db_path, meta


