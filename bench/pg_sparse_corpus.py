"""perf's corpus with real SPLADE weights, for the sparse-leg benches when perf's 100k database
(bench/.cache/perf-100000-e5-small-splade.db, whose dense vectors take most of an hour) is not
there: only the SPLADE model runs (30-190 texts/s on 2 shared cores).

    python -m bench.pg_sparse_corpus --memories 100000   # writes the cache, then exits

The first N events of bench/perf_data.py's corpus (the texts perf's database holds), each
session given to one of 1,000 users in 8 tenants as bench/pg_sparse.py's `read_source` does.
The first BASE (10,000) texts are encoded by the real SPLADE model and stored as memcli stores
them (round(weight x SCALE), at least 1); memory i gets the vector of memory (i - 1) % BASE + 1,
as perf's 100k database copies its postings from the 10k one (bench/perf_ingest.py
`build_large_db`). Cached in bench/.cache/sparse-corpus-N.pickle; returns what
`read_source` returns.
"""

from __future__ import annotations

import argparse
import pickle
import random
import sys
import time
from pathlib import Path

from bench import pg_scale_support as sup
from bench.perf_data import generate_events

BENCH = Path(__file__).resolve().parent

CACHE = BENCH / ".cache"
BASE = 10_000


def log(msg: str) -> None:
    print(f"[pg_sparse_corpus {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def corpus(n: int) -> tuple[list[tuple], dict[int, dict[int, int]]]:
    """(memory id, content, tenant, user, session) rows and {memory id: {term: stored weight}}."""
    path = CACHE / f"sparse-corpus-{n}.pickle"
    for cached in sorted(CACHE.glob("sparse-corpus-*.pickle"),
                         key=lambda p: int(p.stem.rsplit("-", 1)[1])):
        if int(cached.stem.rsplit("-", 1)[1]) >= n:  # a larger corpus starts with this one
            with open(cached, "rb") as fh:
                rows, weights = pickle.load(fh)
            return rows[:n], {m: w for m, w in weights.items() if m <= n}
    from memcli.config import Settings
    from memcli.operations.memory import make_sparse
    from memcli.store.sparse import SCALE

    rng = random.Random(7)
    owner: dict[str, int] = {}
    rows = []
    for mid, event in enumerate(generate_events(n), start=1):
        user = owner.setdefault(event["session_id"], rng.randrange(sup.USERS))
        rows.append((mid, event["content"]["text"], sup.tenant_of(user), f"u{user:04d}",
                     event["session_id"]))
    texts = sorted({r[1] for r in rows[:BASE]})
    encoded: dict[str, dict[int, int]] = {}
    if n > BASE:  # a cached corpus holds the base's vectors already
        smaller = corpus(BASE)
        encoded = {r[1]: smaller[1].get(r[0], {}) for r in smaller[0]}
    encoder = make_sparse(Settings(db="unused.db")) if len(encoded) < len(texts) else None
    t0 = time.perf_counter()
    for start in range(0, len(texts) if encoder else 0, 2000):
        part = texts[start:start + 2000]
        for text, vec in zip(part, encoder.encode_documents(part), strict=True):
            encoded[text] = {t: max(1, round(w * SCALE)) for t, w in vec.items()}
        log(f"{start + len(part)} of {len(texts)} texts,"
            f" {(start + len(part)) / (time.perf_counter() - t0):.0f}/s")
    base = [encoded[r[1]] for r in rows[:BASE]]
    weights = {mid: base[(mid - 1) % len(base)] for mid, *_ in rows
               if base[(mid - 1) % len(base)]}
    CACHE.mkdir(exist_ok=True)
    with open(path, "wb") as fh:
        pickle.dump((rows, weights), fh, protocol=pickle.HIGHEST_PROTOCOL)
    return rows, weights


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    rows, weights = corpus(parser.parse_args().memories)
    log(f"{len(rows)} memories, {len(weights)} with a vector")
