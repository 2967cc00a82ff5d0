"""How long `memcli rebuild` takes on a few-thousand-memory database.

    python -m bench.rebuild                    # 5,000 events: hash (with and without
                                               # SPLADE) and the default models
    python -m bench.rebuild --events 2000 --embedders hash-nosparse

For each embedder (`hash`: the deterministic test embedder, no model cost; `e5-small`: the
default), each with the SPLADE-tiny sparse leg as the CLI builds it (`-nosparse`: without
it), a database of N synthetic
events (50 sessions of 5 users, 1-3 sentences each, seeded) is written through
`Memory.ingest`; then timed through the library as the CLI calls it: a dry run, a rebuild of
the intact file, and a rebuild after every derived table is dropped or emptied and every
memory cut from an event deleted. Results: stdout and bench/results/rebuild.md.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from memcli import Memory
from memcli.config import load_settings, thread_defaults
from memcli.lifecycle.rebuild_derived import rebuild
from memcli.operations.memory import make_embedder, make_sparse

REPO_ROOT = Path(__file__).resolve().parents[1]

WORDS = ("Alice Bob Carol Lisbon Paris Zephyr budget trip meeting green tea hiking project "
         "release review plan office coffee book train Monday Friday decided prefers asked "
         "about the for with and in on at later soon again").split()


def _events(n: int) -> list[dict]:
    rng = random.Random(7)
    out = []
    for i in range(n):
        session = i % 50
        text = ". ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18)))
                         for _ in range(rng.randint(1, 3))) + "."
        out.append({"event_id": f"e{i}", "session_id": f"s{session}",
                    "user_id": f"u{session % 5}",
                    "ts": f"2025-{1 + i * 12 // n:02d}-01T00:00:{i % 60:02d}Z",
                    "content": {"text": text}})
    return out


def _damage(memory: Memory) -> None:
    db = memory.db
    with db.transaction():
        for table in ("memories_fts", "memories_trigram", "vec_memories", "memory_sparse"):
            db.execute(f"DROP TABLE IF EXISTS {table}")
        for table in ("sparse_postings", "sparse_df", "memory_vectors", "memory_entities",
                      "entity_aliases", "entities"):
            db.execute(f"DELETE FROM {table}")
        db.execute("DELETE FROM memories WHERE event_id IS NOT NULL")


def _open(path: Path, embedder: str) -> Memory:
    overrides = {}
    if embedder.endswith("-nosparse"):  # the SPLADE leg off, as `leg_weights.sparse: 0`
        embedder = embedder.removesuffix("-nosparse")
        overrides["retrieval"] = {"leg_weights": {"lexical": 1.0, "sparse": 0.0, "dense": 1.0,
                                                  "entity": 0.5, "trigram": 0.5}}
    settings = load_settings(path, embedder={"provider": embedder}, **overrides)
    return Memory.open(path, embedder=make_embedder(settings), sparse=make_sparse(settings),
                       settings=settings)


def run(embedder: str, n: int, workdir: Path) -> dict[str, float]:
    path = workdir / f"rebuild-{embedder}.db"
    with _open(path, embedder) as memory:
        start = time.perf_counter()
        memory.ingest(_events(n))
        timings = {"ingest": time.perf_counter() - start}
        for name, damage, dry in (("dry run", False, True), ("intact", False, False),
                                  ("after damage", True, False)):
            if damage:
                _damage(memory)
            start = time.perf_counter()
            report = rebuild(memory, dry_run=dry)
            timings[name] = time.perf_counter() - start
        timings["memories"] = report["episode_memories"]
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--embedders", default="hash-nosparse,hash,e5-small")
    args = parser.parse_args()
    thread_defaults()
    lines = [f"# memcli rebuild, {args.events} events (2 shared cores)", "",
             "| embedder | memories | ingest s | dry run s | rebuild intact s | "
             "rebuild after damage s |", "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.embedders.split(","):
            t = run(name, args.events, Path(tmp))
            lines.append(f"| {name} | {int(t['memories'])} | {t['ingest']:.1f} | "
                         f"{t['dry run']:.1f} | {t['intact']:.1f} | {t['after damage']:.1f} |")
            print(lines[-1], flush=True)
    out = REPO_ROOT / "bench" / "results" / "rebuild.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
