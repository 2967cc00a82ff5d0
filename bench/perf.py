"""Speed benchmark for the memcli foundation: ingest, query, CLI start-up, database size.

    python bench/perf.py                 # full: 10k (e5-small) + 100k databases, the real numbers
    python bench/perf.py --quick         # 1k memories, hash embedder, < 60 s: a CI smoke test
    python bench/perf.py --rebuild       # ignore cached databases under bench/.cache/
    python bench/perf.py --profile       # also cProfile ingest and query (see --help)

What it measures (the issue's targets in brackets):

1. Ingest throughput on synthetic chat events (varied 20-40 word turns, 40 users in 2 tenants,
   sessions of 8-40 turns, names / dates / @mentions / #tags, ~3 % Chinese turns), through the
   library `Memory.ingest` in batches of 500: with the embedder [>= 100 events/s] next to the
   embedder's own `embed_documents` speed on the same texts; with `defer_embed=True`
   [>= 2,000 events/s]; and one event per call with `defer_embed=True`, p50/p95 [<= 50 ms].
2. Library `Memory.query` latency p50/p95 at each database size, all legs (with the embedder) and
   FTS-only (lexical + entity + trigram), scoped to tenant+user and unscoped [p95 <= 20 ms at
   100k]. The query embedding (`embed_query`) is timed on its own too, since it sits inside the
   library call, and one more pass times each leg, `rank` and `record_access` separately.
3. Whole-process `python -m memcli query` p50 (a fresh interpreter per run; the first two runs
   are warm-up for the OS page cache) with the embedder [<= 400 ms] and with
   `--legs lexical,entity,trigram` [<= 200 ms]; reference processes (`python -c pass`, pydantic's
   BaseModel, the Typer app); and the top 10 cumulative imports from `python -X importtime` on
   the FTS-only command.
4. Database bytes per memory (after a WAL checkpoint), with the largest tables and indexes.

The 100k database: embedding 100k texts with e5-small would take most of an hour here, so it is
ingested with `defer_embed=True` and its vectors are copied from the 10k database (whose first
10k events are the same events, really embedded), with small Gaussian noise and renormalised for
the other 90k, written through `memcli.store.vectors.insert_vectors`. KNN cost depends on the
number and size of the vectors, not on what they mean.

Databases are cached in bench/.cache/ (with the ingest numbers measured when they were built);
`--rebuild` measures everything again. Latency numbers depend on what else runs on the machine:
the load average is printed with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
# Ingest and the models are measured under the thread settings `memcli` and
# `Memory.configured` use (one OpenBLAS thread; OpenMP threads wait passively), set before
# anything imports numpy.
from memcli.config import thread_defaults  # noqa: E402

thread_defaults()

CACHE_DIR = REPO_ROOT / "bench" / ".cache"
RESULTS = REPO_ROOT / "bench" / "results" / "perf.md"
DATA_VERSION = 1  # bump when the generator changes: cached databases are then rebuilt
BATCH = 500
FTS_ONLY = {"lexical": 1.0, "entity": 0.5, "trigram": 0.5}
CLI_FTS_LEGS = "lexical,entity,trigram"

# ----------------------------------------------------------------------------- synthetic data

NAMES = ("Alice Bob Carla Dmitri Emma Farid Grace Hiro Ines Jonas Kemi Liam Maya Nikhil Olga "
         "Pedro Quinn Rosa Sven Tara Umar Vera Wei Ximena Yusuf Zoe Priya Mateo Lena Omar").split()
PLACES = ("Paris Lisbon Tokyo Berlin Nairobi Toronto Austin Kyoto Oslo Seville Denver Hanoi "
          "Porto Dublin Melbourne").split()
PROJECTS = "atlas phoenix nimbus orion falcon helix quartz zephyr".split()
TOPICS = ("q3-planning travel health budget recipes hiring oncall reading garden "
          "fitness").split()
FOODS = ("ramen", "green tea", "espresso", "tacos", "sourdough", "pho", "falafel",
         "dark chocolate", "oat milk lattes", "sushi", "dumplings", "paella")
ACTIVITIES = ("bouldering", "running", "yoga", "chess", "gardening", "painting", "cycling",
              "swimming", "piano practice", "pottery")
THINGS = ("laptop", "bike", "passport", "standing desk", "headphones", "camera", "kindle", "car",
          "apartment lease", "gym membership")
BOOK_TOPICS = ("urban planning", "the history of tea", "distributed systems", "sleep science",
               "stoic philosophy", "climate policy", "bread baking")
MONTHS = ("January February March April May June July August September October November "
          "December").split()
CN_PLACES = ("上海", "北京", "深圳", "成都", "杭州")
CN_THINGS = ("充电器", "雨伞", "笔记本电脑", "护照", "耳机")
CN_ACTS = ("跑步", "瑜伽", "游泳", "书法", "太极")

HUMAN = (
    "I had {food} with {name} in {place} on {date} and we talked about the {project} launch "
    "for ages.",
    "Remind me that {name} prefers {food} over {food2}, it came up again during the {project} "
    "sync.",
    "My {thing} broke again {date}, I need to get it fixed before the trip to {place}.",
    "{mention} can you check the {project} deploy? The migration failed twice {date} and I am "
    "worried about the release.",
    "I have been doing {activity} three times a week since {date}, feeling much better overall.",
    "Booked flights to {place} for {date}, staying near the old town, {name} might join us for a "
    "couple of days.",
    "The {project} deadline moved to {date}, so the review with {name} is pushed as well {tag}.",
    "Note to self: renew the {thing} warranty and email {name} about the invoice {tag}.",
    "Can you recommend a good {food} place in {place}? Last time {name} suggested one but I "
    "forgot the name.",
    "My sister {name} is visiting on {date}, we are planning to go {activity} and eat {food}.",
    "Budget check: I spent way too much on the {thing} this month and need to cut back {tag}.",
    "Started reading a book {name} recommended about {book}, it is slow but interesting.",
    "Had a call with {mention} about hiring for {project}, we need a backend engineer by {date}.",
    "I am allergic to {food2} so please never suggest it again, {food} is fine though.",
    "What time is the {project} standup tomorrow? I have {activity} at 8 and might be late.",
    "Do you remember what {name} said about {place} last time? I want to plan something "
    "similar {date}.",
)
ASSISTANT = (
    "Noted: {name} prefers {food}. I will keep that in mind for the dinner in {place} on {date}.",
    "Here is a summary of the {project} discussion: the deadline is {date}, {name} owns the "
    "migration, and the review follows {tag}.",
    "I found three {food} places in {place} with good reviews; the closest one opens at 11 on "
    "{date}.",
    "Reminder set for {date}: renew the {thing} warranty and follow up with {mention}.",
    "Based on what you told me earlier, you usually do {activity} on weekdays, so {date} might "
    "work for the call with {name}.",
    "Sure, I moved the {project} review to {date} and let {mention} know {tag}.",
    "You mentioned the {thing} twice this week; do you want me to track the repair and the "
    "cost {tag}?",
)
FILLERS = (
    "Honestly it has been a busy week.", "Let me know if that changes anything.",
    "I will check again later tonight.", "Not sure if that matters but wanted to mention it.",
    "Anyway, more on that soon.", "Thanks for keeping track of all this.",
    "Please add it to my notes.", "It is not urgent, just keep it in mind.",
)
CHINESE = (
    "我下周要去{cnplace}出差，记得提醒我带{cnthing}和护照，{name}也会一起去。",
    "{name}说{project}项目的上线时间推迟到下个月了，我们需要重新安排测试和评审。",
    "我最近每天早上练习{cnact}，感觉精神好多了，晚上也睡得更好。",
)

QUERIES = (
    "what does {name} like to eat?", "when is the {project} deadline?", "{place} trip plans",
    "did I tell you about my {thing} before?", "who recommended the {food} place in {place}",
    "{tag}", "{mention} {project} deploy", "how often do I go {activity}",
    "what happened on {date}", "hiring a backend engineer for {project}",
    "which foods am I allergic to", "remind me what {name} said about the migration last time",
    "I remember we discussed a restaurant in {place} with {name} a while ago, can you find what "
    "we decided about the dinner and the date?",
    "{thing} warranty renewal", "book about {book}", "{name} {place}",
    "standup time for {project}", "budget {thing}", "{name}'s visit", "release migration failed",
)
CN_QUERIES = ("{cnplace}出差", "{project}项目上线时间", "练习{cnact}")


def _date(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.35:
        return f"{rng.choice(MONTHS)} {rng.randint(1, 28)}"
    if r < 0.6:
        return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    return rng.choice(("next Friday", "last Tuesday", "tomorrow", "this weekend", "on Monday",
                       "yesterday", "next week"))


def _slots(rng: random.Random) -> dict[str, str]:
    food, food2 = rng.sample(FOODS, 2)
    project = rng.choice(PROJECTS)
    return {
        "name": rng.choice(NAMES), "place": rng.choice(PLACES), "project": project,
        "food": food, "food2": food2, "activity": rng.choice(ACTIVITIES),
        "thing": rng.choice(THINGS), "book": rng.choice(BOOK_TOPICS), "date": _date(rng),
        "mention": "@" + rng.choice(NAMES).lower(),
        "tag": "#" + (f"project-{project}" if rng.random() < 0.5 else rng.choice(TOPICS)),
        "cnplace": rng.choice(CN_PLACES), "cnthing": rng.choice(CN_THINGS),
        "cnact": rng.choice(CN_ACTS),
    }


def _turn(rng: random.Random, templates: Sequence[str]) -> str:
    if rng.random() < 0.03:
        return rng.choice(CHINESE).format(**_slots(rng))
    target = rng.randint(20, 40)
    words: list[str] = []
    while len(words) < target:
        source = templates if not words or rng.random() < 0.4 else FILLERS
        words.extend(rng.choice(source).format(**_slots(rng)).split())
    text = " ".join(words[:target])
    return text if text.endswith((".", "?", "!")) else text.rstrip(",;:") + "."


def users(n: int = 40) -> list[tuple[str, str]]:
    """(tenant, user): 30 users in tenant acme, 10 in globex."""
    return [("acme" if i < 30 else "globex", f"u{i:03d}") for i in range(n)]


def generate_events(n: int, seed: int = 1) -> list[dict[str, Any]]:
    """n events, session after session. Prefix-stable: the first k of n are the k of k."""
    rng = random.Random(seed)
    people = users()
    clock = datetime(2024, 1, 1, 8, 0, tzinfo=UTC)
    out: list[dict[str, Any]] = []
    session = 0
    while len(out) < n:
        session += 1
        tenant, user = rng.choice(people)
        clock += timedelta(minutes=rng.randint(30, 600))
        for turn in range(rng.randint(8, 40)):
            if len(out) >= n:
                break
            human = turn % 2 == 0
            clock += timedelta(seconds=rng.randint(5, 180))
            out.append({
                "ts": clock.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "tenant_id": tenant, "user_id": user, "session_id": f"s{session:06d}",
                "actor": {"type": "human", "id": user} if human
                else {"type": "assistant", "id": "assistant"},
                "kind": "message",
                "content": {"text": _turn(rng, HUMAN if human else ASSISTANT)},
            })
    return out


def generate_queries(n: int, scopes: Sequence[tuple[str, str]], seed: int = 2
                     ) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        tenant, user = rng.choice(scopes)
        template = rng.choice(CN_QUERIES) if rng.random() < 0.04 else rng.choice(QUERIES)
        out.append({"text": template.format(**_slots(rng)), "tenant_id": tenant,
                    "user_id": user})
    return out


# ----------------------------------------------------------------------------- helpers


def pct(values: Sequence[float], p: float) -> float:
    """Percentile with linear interpolation (p in 0..100)."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(ms: Sequence[float]) -> dict[str, float]:
    return {"n": len(ms), "p50": pct(ms, 50), "p95": pct(ms, 95), "mean": statistics.fmean(ms)}


def log(msg: str) -> None:
    print(f"[perf {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def memory_settings(path: Path, embedder_name: str) -> Any:
    from memcli.config import EmbedderSettings, Settings

    return Settings(db=path, embedder=EmbedderSettings(provider=embedder_name))


def make_models(embedder_name: str, sparse: bool) -> tuple[Any, Any]:
    """The embedder and SPLADE encoder the default configuration builds (both lazy)."""
    from memcli.memory import make_embedder, make_sparse

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
    from memcli.memory import Memory

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
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", "query-models",
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


# ----------------------------------------------------------------------------- 2. query


def default_legs() -> dict[str, float]:
    from memcli.config import RetrievalSettings

    return dict(RetrievalSettings().leg_weights)


def query_latency(memory: Any, queries: list[dict], *, legs: dict[str, float],
                  user_scope: bool, warmup: int) -> dict[str, float]:
    memory.retrieval.leg_weights = dict(legs)
    times, cpus = [], []
    for i, q in enumerate(queries):
        filters = memory.filters(tenant_id=q["tenant_id"],
                                 user_id=q["user_id"] if user_scope else None)
        t0, c0 = time.perf_counter(), time.process_time()
        memory.query(q["text"], filters=filters)
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1000)
            cpus.append((time.process_time() - c0) * 1000)
    out = summary(times)
    out["cpu_p50"], out["cpu_p95"] = pct(cpus, 50), pct(cpus, 95)
    return out


class _Proxy:
    """Delegates to `inner`, timing the named methods into `sink`."""

    def __init__(self, inner: Any, methods: dict[str, str], sink: dict[str, list[float]]
                 ) -> None:
        self._inner, self._methods, self._sink = inner, methods, sink

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        label = self._methods.get(name)
        if label is None:
            return attr
        return _timed(attr, label, self._sink)


def _timed(fn: Callable[..., Any], label: str, sink: dict[str, list[float]]
           ) -> Callable[..., Any]:
    """Wrap fn so each call adds its [wall ms, CPU ms] to sink[label]."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            acc = sink.setdefault(label, [0.0, 0.0])
            acc[0] += (time.perf_counter() - t0) * 1000
            acc[1] += (time.process_time() - c0) * 1000
    wrapper.__name__ = getattr(fn, "__name__", label)
    return wrapper


# Steps of Memory.query, timed by wrapping the functions it calls through module attributes.
# (module, attribute, label, nested): nested steps run inside another step and are shown for
# detail only; the others add up, with "other" the rest of the call.
_STEPS = (
    ("memcli.retrieval.search", "query_entity_keys", "query parsing: entity keys", False),
    ("memcli.retrieval.text", "lexical_query", "query parsing: lexical terms", False),
    ("memcli.store.search", "lexical", "leg lexical (SQL)", False),
    ("memcli.store.search", "trigram", "leg trigram (SQL)", False),
    ("memcli.store.search", "entity", "leg entity (SQL)", False),
    ("memcli.store.search", "count_candidates", "scope count (picks the legs' plans)", False),
    ("memcli.store.sparse", "search", "leg sparse (SQL)", False),
    ("memcli.store.search", "dense", "leg dense (SQL)", False),
    ("", "encode_query", "  worker thread: SPLADE encode_query", True),
    ("", "embed_query", "  worker thread: embed_query (dense model)", True),
    ("memcli.retrieval.search", "rank", "rank (fusion + stages)", False),
    ("memcli.retrieval.search", "fuse", "  rank: fuse", True),
    ("memcli.store.memories", "get_memories", "  rank: get_memories", True),
    ("memcli.store.search", "session_neighbours",
     "  rank: session_neighbours SQL (in neighbours)", True),
)


OTHER = "other (Memory.query itself, incl. waiting for the models)"


def query_breakdown(memory: Any, queries: list[dict], *, legs: dict[str, float],
                    user_scope: bool, warmup: int) -> dict[str, dict[str, float]]:
    """Run the real Memory.query with its steps wrapped in timers: per step, wall ms
    summary plus CPU p50 (this process's CPU time)."""
    import importlib

    from memcli.retrieval import stages

    memory.retrieval.leg_weights = dict(legs)
    sink: dict[str, list[float]] = {}
    nested = {label for *_, label, is_nested in _STEPS if is_nested}
    saved: list[tuple[Any, str, Any]] = []
    write_name = "_after_read" if hasattr(memory, "_after_read") else "_record_access"
    parts: dict[str, list[tuple[float, float]]] = {}
    models = (memory.embedder, memory.sparse)
    pool, row = list(stages.POOL_STAGES), list(stages.ROW_STAGES)
    try:
        for module_name, attr, label, _ in _STEPS:
            if not module_name:
                continue  # a model method: wrapped through a proxy below
            module = importlib.import_module(module_name)
            if hasattr(module, attr):
                saved.append((module, attr, getattr(module, attr)))
                setattr(module, attr, _timed(getattr(module, attr), label, sink))
        stages.POOL_STAGES[:] = [_timed(f, f"  rank: stage {f.__name__}", sink) for f in pool]
        stages.ROW_STAGES[:] = [_timed(f, f"  rank: stage {f.__name__}", sink) for f in row]
        nested.update(f"  rank: stage {f.__name__}" for f in pool + row)
        if memory.embedder is not None:
            memory.embedder = _Proxy(
                memory.embedder, {"embed_query": "  worker thread: embed_query (dense model)"},
                sink)
        if memory.sparse is not None:
            memory.sparse = _Proxy(memory.sparse,
                                   {"encode_query": "  worker thread: SPLADE encode_query"},
                                   sink)
        memory._hit = _timed(type(memory)._hit, "build hits", sink)
        setattr(memory, write_name, _timed(getattr(memory, write_name),
                                           "after-read write (access counts, metrics)", sink))
        for i, q in enumerate(queries):
            f = memory.filters(tenant_id=q["tenant_id"],
                               user_id=q["user_id"] if user_scope else None)
            sink.clear()
            t0, c0 = time.perf_counter(), time.process_time()
            memory.query(q["text"], filters=f)
            total = ((time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000)
            if i < warmup:
                continue
            step = {k: (v[0], v[1]) for k, v in sink.items()}
            top = [v for k, v in step.items() if k not in nested]
            step[OTHER] = (total[0] - sum(v[0] for v in top), total[1] - sum(v[1] for v in top))
            step["total"] = total
            for k, v in step.items():
                parts.setdefault(k, []).append(v)
    finally:
        for module, attr, fn in saved:
            setattr(module, attr, fn)
        stages.POOL_STAGES[:] = pool
        stages.ROW_STAGES[:] = row
        memory.embedder, memory.sparse = models
        del memory._hit
        delattr(memory, write_name)
    order = [label for *_, label, _ in _STEPS]
    at = order.index("  rank: session_neighbours SQL (in neighbours)")
    order[at:at] = [f"  rank: stage {f.__name__}" for f in pool + row]
    order += ["build hits", "after-read write (access counts, metrics)",
              OTHER, "total"]
    out: dict[str, dict[str, float]] = {}
    n = len(queries) - warmup
    for label in [x for x in order if x in parts] + [x for x in parts if x not in order]:
        walls = [w for w, _ in parts[label]] + [0.0] * (n - len(parts[label]))
        cpus = [c for _, c in parts[label]] + [0.0] * (n - len(parts[label]))
        out[label] = {**summary(walls), "cpu_p50": pct(cpus, 50), "cpu_p95": pct(cpus, 95),
                      "calls": len(parts[label])}
    return out


def fts_matches(memory: Any, queries: list[dict]) -> dict[str, float]:
    """How many rows each query's FTS expression matches (the lexical leg's work)."""
    from memcli.retrieval import text as qtext
    from memcli.store.sqlite.fts import fts_match

    counts = []
    for q in queries:
        match = fts_match(qtext.lexical_query(q["text"]))
        if match:
            counts.append(float(memory.db.scalar(
                "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?", (match,))))
    return summary(counts)


# The library query passes run in a fresh process (the ingest passes before them leave the
# page cache and the models' threads warm in odd ways) with the thread settings that `memcli`
# and `Memory.configured` set: passive OpenMP waiting and one OpenBLAS thread.
QUERY_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_NUM_THREADS": "1"}


def query_benches_in_child(path: Path, embedder_name: str, use_sparse: bool,
                           queries: list[dict], warmup: int) -> dict[str, Any]:
    spec = CACHE_DIR / "perf-queries.json"
    spec.write_text(json.dumps({"db": str(path), "queries": queries, "warmup": warmup}))
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", "query-benches",
            "--embedder", embedder_name, "--spec", str(spec)]
    if not use_sparse:
        argv.append("--no-sparse")
    done = subprocess.run(argv, env={**os.environ, **QUERY_ENV}, capture_output=True,
                          text=True, check=False)
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"query bench child failed ({done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def page_cache_warm(path: Path) -> None:
    """Read the database file once so the OS caches it."""
    for suffix in ("", "-wal"):
        part = Path(str(path) + suffix)
        if part.exists():
            with open(part, "rb") as fh:
                while fh.read(1 << 20):
                    pass


def run_query_benches(path: Path, embedder_name: str, use_sparse: bool, queries: list[dict],
                      warmup: int) -> dict[str, Any]:
    embedder, sparse = make_models(embedder_name, use_sparse)
    warm_models(embedder, sparse)
    out: dict[str, Any] = {}
    with open_memory(path, embedder, sparse) as memory:
        # Steady state, as in a long-running agent: the file in the OS page cache (the bench
        # may have just rewritten it) and one untimed pass of the queries.
        page_cache_warm(path)
        for q in queries:
            memory.query(q["text"], filters=memory.filters(tenant_id=q["tenant_id"]))
        for legs_name, legs in (("all legs", default_legs()), ("FTS-only", FTS_ONLY)):
            for scope_name, user_scope in (("tenant+user", True), ("tenant only", False)):
                log(f"  {path.name}: {legs_name}, {scope_name}")
                out[f"{legs_name} | {scope_name}"] = query_latency(
                    memory, queries, legs=legs, user_scope=user_scope, warmup=warmup)
        for legs_name, legs in (("all legs", default_legs()), ("FTS-only", FTS_ONLY)):
            for scope_name, user_scope in (("tenant+user", True), ("tenant only", False)):
                log(f"  {path.name}: breakdown, {legs_name}, {scope_name}")
                out[f"breakdown | {legs_name} | {scope_name}"] = query_breakdown(
                    memory, queries, legs=legs, user_scope=user_scope, warmup=warmup)
        memories = int(memory.db.scalar("SELECT count(*) FROM memories"))
        out["fts_matches"] = fts_matches(memory, queries)
        per_user = memory.db.query(
            "SELECT count(*) AS n FROM memories GROUP BY tenant_id, user_id ORDER BY n")
    out["memories"] = memories
    out["legs"] = sorted(k for k, v in default_legs().items() if v > 0
                         and (k != "sparse" or use_sparse))
    out["scope_sizes"] = {"min": per_user[0]["n"], "median": per_user[len(per_user) // 2]["n"],
                          "max": per_user[-1]["n"]}
    return out


# ----------------------------------------------------------------------------- 3. CLI


def cli_env(embedder_name: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"MEMCLI_EMBEDDER": embedder_name, "MEMCLI_CONFIG": "/nonexistent/memcli.yaml",
                "PYTHONPATH": str(REPO_ROOT)})
    env.pop("MEMCLI_DB", None)
    return env


def time_process(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms of the child: user + system from its rusage)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    ms = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-800:]}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return ms, cpu


def process_summary(runs: list[tuple[float, float]]) -> dict[str, float]:
    out = summary([w for w, _ in runs])
    cpus = [c for _, c in runs]
    out.update({"min": min(w for w, _ in runs), "cpu_p50": pct(cpus, 50),
                "cpu_p95": pct(cpus, 95)})
    return out


# Reference processes beside `memcli query`: the interpreter alone; pydantic's BaseModel, which
# the query path needs (settings, results) and nothing can start faster than; and the Typer app
# with every command, which an in-process command builds only in part (its own group).
REFERENCE_PROCESSES = (
    ("python -c pass", "pass"),
    ("python -c 'from pydantic import BaseModel'",  # with the plugin scan off, as memcli does
     "import os; os.environ['PYDANTIC_DISABLE_PLUGINS'] = '__all__'; "
     "from pydantic import BaseModel"),
    ("python -c 'import memcli.cli.app'", "import memcli.cli.app"),
)


def cli_benches(path: Path, embedder_name: str, queries: list[dict], runs: int,
                warm: int = 2, import_runs: int = 5) -> dict[str, Any]:
    env = cli_env(embedder_name)
    py = sys.executable
    out: dict[str, Any] = {}

    def query_argv(q: dict, legs: str | None) -> list[str]:
        argv = [py, "-m", "memcli", "query", q["text"], "--db", str(path), "--tenant",
                q["tenant_id"], "--user", q["user_id"], "--json"]
        return argv + (["--legs", legs] if legs else [])

    for label, legs in (("with embedder", None), ("FTS-only", CLI_FTS_LEGS)):
        measured = [time_process(query_argv(q, legs), env) for q in queries[: runs + warm]]
        out[label] = process_summary(measured[warm:])
    for label, code in REFERENCE_PROCESSES:
        measured = [time_process([py, "-c", code], env) for _ in range(runs + warm)]
        out[label] = process_summary(measured[warm:])
    out["importtime"], out["import_packages"] = import_offenders(
        query_argv(queries[0], CLI_FTS_LEGS), env, runs=import_runs)
    out["warm"], out["import_runs"] = warm, import_runs
    return out


_IMPORT_LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")


def import_offenders(argv: list[str], env: dict[str, str], runs: int = 5, top: int = 10
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Top cumulative imports of the command with their nesting depth, and self time summed
    per top-level package. Each module's time is its minimum over `runs`: the least
    disturbed run when other jobs share the machine."""
    cumulative: dict[str, list[int]] = {}
    selfs: dict[str, list[int]] = {}
    depth: dict[str, int] = {}
    for _ in range(runs):
        proc = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, cwd=REPO_ROOT,
                              capture_output=True, text=True)
        for line in proc.stderr.splitlines():
            m = _IMPORT_LINE.match(line)
            if m:
                name = m.group(4)
                selfs.setdefault(name, []).append(int(m.group(1)))
                cumulative.setdefault(name, []).append(int(m.group(2)))
                depth[name] = len(m.group(3)) // 2
    rows = [{"module": k, "cumulative_ms": min(v) / 1000, "self_ms": min(selfs[k]) / 1000,
             "depth": depth[k]}
            for k, v in cumulative.items()]
    rows.sort(key=lambda r: -r["cumulative_ms"])
    packages: dict[str, list[float]] = {}
    for row in rows:
        name = row["module"]
        key = ".".join(name.split(".")[:2]) if name.startswith("memcli.") else name.split(".")[0]
        acc = packages.setdefault(key, [0.0, 0])
        acc[0] += row["self_ms"]
        acc[1] += 1
    by_package = sorted(({"package": k, "self_ms": v[0], "modules": v[1]}
                         for k, v in packages.items()), key=lambda r: -r["self_ms"])
    return rows[:top], by_package[:top]


# ----------------------------------------------------------------------------- 4. size


def db_size(path: Path) -> dict[str, Any]:
    import apsw

    checkpoint(path)
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    memories = int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])
    objects = list(conn.execute(
        "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 8"))
    conn.close()
    total = path.stat().st_size
    return {"memories": memories, "bytes": total, "bytes_per_memory": total / max(memories, 1),
            "largest": [(n, int(b)) for n, b in objects]}


# ----------------------------------------------------------------------------- profiling


def profile_paths(db: Path, queries: list[dict], embedder_name: str,
                  use_sparse: bool, out_path: Path) -> None:
    """cProfile (CPU time, so other jobs on the machine do not count) the defer-embed ingest
    of 2,000 events, 300 single-event ingests and 100 queries of each kind."""
    import cProfile
    import io
    import pstats

    buf = io.StringIO()
    events = generate_events(BATCH * 5 + 300, seed=11)

    def dump(title: str, prof: cProfile.Profile) -> None:
        buf.write(f"\n===== {title} =====\n")
        stats = pstats.Stats(prof, stream=buf).strip_dirs()
        stats.sort_stats("cumulative").print_stats(35)
        stats.sort_stats("tottime").print_stats(20)

    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        path = Path(tmp) / "profile.db"
        with open_memory(path, *make_models(embedder_name, use_sparse)) as memory:
            memory.ingest(events[:BATCH], defer_embed=True)
            prof = cProfile.Profile(time.process_time)
            prof.enable()
            for chunk in batches(events[BATCH : BATCH * 5], BATCH):
                memory.ingest(list(chunk), defer_embed=True)
            prof.disable()
            dump("ingest, defer_embed, 2,000 events in batches of 500", prof)
            prof = cProfile.Profile(time.process_time)
            prof.enable()
            for rec in events[BATCH * 5 : BATCH * 5 + 300]:
                memory.ingest([rec], defer_embed=True)
            prof.disable()
            dump("ingest, defer_embed, 300 single-event calls", prof)
    embedder, sparse = make_models(embedder_name, use_sparse)
    warm_models(embedder, sparse)
    with open_memory(db, embedder, sparse) as memory:
        for legs_name, legs in (("all legs", default_legs()), ("FTS-only", FTS_ONLY)):
            for user_scope in (True, False):
                memory.retrieval.leg_weights = legs
                for q in queries[:10]:
                    memory.query(q["text"])
                prof = cProfile.Profile(time.process_time)
                prof.enable()
                for q in queries[:100]:
                    f = memory.filters(tenant_id=q["tenant_id"],
                                       user_id=q["user_id"] if user_scope else None)
                    memory.query(q["text"], filters=f)
                prof.disable()
                scope = "tenant+user" if user_scope else "tenant only"
                dump(f"query {db.name}, {legs_name}, {scope}, 100 queries", prof)
    out_path.write_text(buf.getvalue())
    log(f"profile written to {out_path}")


# ----------------------------------------------------------------------------- report


def fmt(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def verdict(ok: bool) -> str:
    return "pass" if ok else "**miss**"


def render(res: dict[str, Any]) -> str:
    quick = res["mode"] == "quick"
    sizes = res["sizes"]
    small, large = sizes[0], sizes[-1]
    k = lambda n: f"{n // 1000}k"  # noqa: E731
    models = f"`{res['embedder']}`" + (" + SPLADE-tiny (the default sparse leg)"
                                       if res["sparse"] else " (no SPLADE sparse leg)")
    lines = [
        "# memcli performance" + (" (quick smoke run: not the real numbers)" if quick else ""),
        "",
        f"Measured {res['date']} with `python bench/perf.py{' --quick' if quick else ''}` on "
        f"{res['machine']}. Load average (1, 5, 15 min) before: {res['load_before']}, after: "
        f"{res['load_after']}. Other jobs shared this machine during the run whenever the "
        "load was above the core count: read latencies as upper bounds.",
        "",
        "Data: synthetic chat turns of 20-40 words (names, dates, @mentions, #tags, ~3 % "
        "Chinese), 40 users in 2 tenants, sessions of 8-40 turns, one memory per event. "
        f"Models: {models}. Ingest goes through `Memory.ingest` in batches of {BATCH}. "
        f"Queries: {res['n_queries']} varied queries per pass (names, places, projects, tags, "
        f"dates, long questions, ~4 % Chinese), after {res['warmup']} warm-up queries that are "
        "not counted; top 10, default ranking. Times in ms unless marked.",
    ]
    if len(sizes) > 1:
        lines += [
            "",
            f"The {k(large)} database was ingested with `defer_embed=True`; its vectors are the "
            f"{res['embedder']} vectors of the {k(small)} database (its first {k(small)} events "
            "are the same events), copied with small Gaussian noise (sigma 0.015 per dimension) "
            "and renormalised for the other memories, and written through "
            "`memcli.store.vectors.insert_vectors`"
            + (" (SPLADE postings copied the same way, through `insert_postings`)"
               if res["sparse"] else "")
            + ". KNN cost depends on how many vectors there are, not on what they mean.",
        ]

    ing = res["ingest"]
    emb, defer, speed = ing["embedded"], ing["defer"], ing["model_speed"]
    alone = [f"{res['embedder']} alone {fmt(speed['embedder'])} texts/s"]
    if "sparse" in speed:
        alone.append(f"SPLADE alone {fmt(speed['sparse'])} texts/s")
    lines += ["", "## Targets", "",
              "Wall time is the measure. The CPU column is the process's own CPU time (all its "
              "threads), which other jobs on the machine do not inflate as much: read it as "
              "an estimate of an unloaded machine (for e5-small, which runs on both cores, "
              "CPU time overstates the wall time it would take).", "",
              "| target | measured (wall) | verdict | CPU-time estimate | verdict on CPU |",
              "|---|---|---|---|---|"]

    def target(name: str, wall: float, cpu: float, ok: Callable[[float], bool],
               unit: str, digits: int = 1) -> None:
        lines.append(f"| {name} | {fmt(wall, digits)} {unit} | {verdict(ok(wall))} | "
                     f"{fmt(cpu, digits)} {unit} | {verdict(ok(cpu))} |")

    sample = ing["sample"]
    target(f"ingest with the default models >= 100 events/s ({sample['events']:,} events)",
           sample["events_per_s"], sample["events"] / sample["cpu_seconds"],
           lambda v: v >= 100, "events/s")
    sparse_only = ing.get("sample_sparse_only")
    if sparse_only:
        target(f"ingest with the sparse leg (SPLADE, dense leg off) >= 100 events/s "
               f"({sparse_only['events']:,} events)", sparse_only["events_per_s"],
               sparse_only["events"] / sparse_only["cpu_seconds"], lambda v: v >= 100,
               "events/s")
    target(f"ingest `defer_embed=True`, batches of {BATCH}, >= 2,000 events/s",
           defer["events_per_s"], defer["events"] / defer["cpu_seconds"], lambda v: v >= 2000,
           "events/s", 0)
    target("`Memory.ingest([record])` p95 <= 50 ms", defer["single_ms"]["p95"],
           defer["single_cpu_ms"]["p95"], lambda v: v <= 50, "ms", 2)
    q = res["query"][str(large)]
    for key in ("all legs | tenant+user", "all legs | tenant only",
                "FTS-only | tenant+user", "FTS-only | tenant only"):
        target(f"library query p95 <= 20 ms at {k(large)} ({key})", q[key]["p95"],
               q[key]["cpu_p95"], lambda v: v <= 20, "ms")
    cli = res["cli"]
    target("`memcli query` p50 <= 400 ms with the embedder", cli["with embedder"]["p50"],
           cli["with embedder"]["cpu_p50"], lambda v: v <= 400, "ms", 0)
    target(f"`memcli query --legs {CLI_FTS_LEGS}` p50 <= 200 ms", cli["FTS-only"]["p50"],
           cli["FTS-only"]["cpu_p50"], lambda v: v <= 200, "ms", 0)
    lines.append("")
    lines.append(f"Ingest with the models: {'; '.join(alone)}.")

    lines += ["", "## 1. Ingest", "",
              "Wall time is the measure; CPU is this process's CPU time (all its threads), "
              "a hint of the cost without the other jobs on the machine.", "",
              "| what | count | wall | CPU | throughput |", "|---|---|---|---|---|"]
    cached = (f" (measured when the cached database was built, {emb['built_at']}, load "
              f"{emb.get('load', '?')})" if emb.get("cached") else "")
    lines.append(f"| `Memory.ingest`, {models}, this run | {sample['events']:,} events | "
                 f"{fmt(sample['seconds'])} s | {fmt(sample['cpu_seconds'])} s | "
                 f"{fmt(sample['events_per_s'])} events/s |")
    if sparse_only:
        lines.append(f"| `Memory.ingest`, SPLADE-tiny and no dense leg, this run | "
                     f"{sparse_only['events']:,} events | {fmt(sparse_only['seconds'])} s | "
                     f"{fmt(sparse_only['cpu_seconds'])} s | "
                     f"{fmt(sparse_only['events_per_s'])} events/s |")
    lines.append(f"| `Memory.ingest`, {models}, the {k(small)} query database{cached} | "
                 f"{emb['events']:,} events | {fmt(emb['seconds'])} s | "
                 f"{fmt(emb.get('cpu_seconds', float('nan')))} s | "
                 f"{fmt(emb['events_per_s'])} events/s |")
    for key, name, call in (("embedder", res["embedder"], "embed_documents"),
                            ("sparse", "SPLADE-tiny", "encode_documents")):
        if key in speed:
            lines.append(f"| {name} alone, `{call}` in calls of {BATCH} | "
                         f"{speed['texts']:,} texts | {fmt(speed['texts'] / speed[key])} s | "
                         f"{fmt(speed[key + '_cpu_seconds'])} s | {fmt(speed[key])} texts/s |")
    lines.append(f"| `Memory.ingest(defer_embed=True)` | {defer['events']:,} events | "
                 f"{fmt(defer['seconds'], 2)} s | {fmt(defer['cpu_seconds'], 2)} s | "
                 f"{fmt(defer['events_per_s'], 0)} events/s |")
    if "large" in ing:
        lg = ing["large"]
        cached = " (cached build)" if lg.get("cached") else ""
        lines.append(f"| `Memory.ingest(defer_embed=True)` into the {k(large)} database"
                     f"{cached} | {lg['events']:,} events | {fmt(lg['seconds'], 1)} s | "
                     f"{fmt(lg.get('cpu_seconds', float('nan')), 1)} s | "
                     f"{fmt(lg['events_per_s'], 0)} events/s |")
    s, c = defer["single_ms"], defer["single_cpu_ms"]
    lines += ["", f"One event per `Memory.ingest([record])` call with `defer_embed=True`, into "
              f"the {k(small)} database ({s['n']} calls after 20 warm-up): p50 "
              f"{fmt(s['p50'], 2)} ms, p95 {fmt(s['p95'], 2)} ms, mean {fmt(s['mean'], 2)} ms "
              f"(CPU p50 {fmt(c['p50'], 2)} ms, p95 {fmt(c['p95'], 2)} ms)."]
    per_event = {"everything but the models": 1000 / defer["events_per_s"],
                 f"{res['embedder']}": 1000 / speed["embedder"]}
    if "sparse" in speed:
        per_event["SPLADE"] = 1000 / speed["sparse"]
    predicted = sum(per_event.values())
    lines += ["", "Cost per event, from the rows above: " + ", ".join(
        f"{name} {fmt(ms, 2)} ms" for name, ms in per_event.items())
        + f"; sum {fmt(predicted, 1)} ms = {fmt(1000 / predicted)} events/s predicted, "
        f"{fmt(sample['events_per_s'])} measured in this run."]

    lines += ["", "## 2. Library query latency (`Memory.query`)", "",
              f"All legs = the defaults ({', '.join(q['legs'])}); FTS-only = "
              f"`leg_weights = {FTS_ONLY}`. The query-side models are inside the call (on "
              "its worker thread). These passes run in a fresh process with "
              f"{' '.join(f'{k}={v}' for k, v in QUERY_ENV.items())}, as `memcli` and "
              "`Memory.configured` set; CPU times count every thread.", "",
              "| database | legs | scope | p50 | p95 | mean | CPU p50 | CPU p95 |",
              "|---|---|---|---|---|---|---|---|"]
    for size in sizes:
        for key, val in res["query"][str(size)].items():
            if " | " not in key or key.startswith("breakdown"):
                continue
            legs, scope = key.split(" | ")
            lines.append(f"| {k(size)} | {legs} | {scope} | {fmt(val['p50'], 2)} | "
                         f"{fmt(val['p95'], 2)} | {fmt(val['mean'], 2)} | "
                         f"{fmt(val['cpu_p50'], 2)} | {fmt(val['cpu_p95'], 2)} |")
    lines += ["", "The query-side models alone, in a fresh process per row (the library leaves "
              "OpenMP's wait policy alone; `memcli`'s `main()` sets `OMP_WAIT_POLICY=PASSIVE`):",
              "", "| model call | OpenMP policy | p50 | p95 | CPU p50 |", "|---|---|---|---|---|"]
    for policy, calls in res["query_models"].items():
        for call, val in calls.items():
            name = {"embed_query": f"{res['embedder']} `embed_query`",
                    "encode_query": "SPLADE-tiny `encode_query`"}.get(call, call)
            lines.append(f"| {name} | {policy} | {fmt(val['p50'], 2)} | {fmt(val['p95'], 2)} | "
                         f"{fmt(val['cpu_p50'], 2)} |")
    lines.append("")
    for size in sizes:
        sc = res["query"][str(size)]["scope_sizes"]
        lines.append(f"{k(size)}: memories per tenant+user scope, min / median / max: "
                     f"{sc['min']:,} / {sc['median']:,} / {sc['max']:,}. ")
    for legs_name in ("all legs", "FTS-only"):
        lines += ["", f"Where the time goes, {legs_name}: the real `Memory.query` with each "
                  "step wrapped in a timer. Cells: wall p50 / p95 (CPU p50), ms over all "
                  "measured queries (0 when a step did not run); indented rows are part of "
                  "the row above them, except the worker-thread rows: the query-side models "
                  "run on a worker thread while the SQL legs run, and the time the main "
                  "thread still waits for them is inside \"other\".", "",
                  "| step | " + " | ".join(f"{k(size)}, {scope}" for size in sizes
                                         for scope in ("tenant+user", "tenant only"))
                  + " |", "|---|" + "---|" * (2 * len(sizes))]
        tables = [res["query"][str(size)][f"breakdown | {legs_name} | {scope}"]
                  for size in sizes for scope in ("tenant+user", "tenant only")]
        steps: list[str] = []
        for table in tables:
            steps += [step for step in table if step not in steps]
        for step in steps:
            cells = [f"{fmt(t[step]['p50'], 2)} / {fmt(t[step]['p95'], 2)} "
                     f"({fmt(t[step]['cpu_p50'], 2)})" if step in t else "-" for t in tables]
            name = step.strip().replace("|", "/")
            name = f"**{name}**" if step == "total" else (
                f"&nbsp;&nbsp;{name}" if step.startswith("  ") else name)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    for size in sizes:
        fts = res["query"][str(size)]["fts_matches"]
        lines.append(f"{k(size)}: rows matching a query's FTS expression (whole database, "
                     f"before filters): median {fts['p50']:,.0f}, p95 {fts['p95']:,.0f} "
                     f"({100 * fts['p50'] / res['query'][str(size)]['memories']:.0f} % of "
                     "the memories at the median). ")

    lines += ["", f"## 3. Whole process (`python -m memcli query ... --tenant --user --json`, "
              f"{k(small)} database)", "",
              f"A fresh interpreter per run; {cli['warm']} warm-up run(s) first (OS page "
              "cache). CPU = the child's user + system time.", "",
              "| command | runs | wall p50 | wall p95 | wall min | CPU p50 |",
              "|---|---|---|---|---|---|"]
    for label in ("with embedder", "FTS-only", *(label for label, _ in REFERENCE_PROCESSES)):
        val = cli[label]
        name = {"with embedder": f"`memcli query` (MEMCLI_EMBEDDER={res['embedder']}, "
                                 "default legs)",
                "FTS-only": f"`memcli query --legs {CLI_FTS_LEGS}`"}.get(label, f"`{label}`")
        lines.append(f"| {name} | {val['n']} | {fmt(val['p50'], 0)} | {fmt(val['p95'], 0)} | "
                     f"{fmt(val['min'], 0)} | {fmt(val['cpu_p50'], 0)} |")
    lines += ["", f"Top 10 cumulative imports of `python -X importtime -m memcli query ... "
              f"--legs {CLI_FTS_LEGS}` (each module's minimum over {cli['import_runs']} runs; "
              "depth 0 = a top-level "
              "import; cumulative includes the imports below it):", "",
              "| module | depth | cumulative ms | self ms |", "|---|---|---|---|"]
    for row in cli["importtime"]:
        lines.append(f"| `{row['module']}` | {row['depth']} | {fmt(row['cumulative_ms'])} | "
                     f"{fmt(row['self_ms'])} |")

    lines += ["", "The same runs, self time summed per top-level package (memcli per subpackage), "
              "top 10:", "", "| package | modules | self ms |", "|---|---|---|"]
    for row in cli["import_packages"]:
        lines.append(f"| `{row['package']}` | {row['modules']} | {fmt(row['self_ms'])} |")
    total_self = sum(r["self_ms"] for r in cli["import_packages"])
    lines.append(f"| (these 10) | | {fmt(total_self)} |")

    lines += ["", "## 4. Database size (after a WAL checkpoint)", "",
              "| database | memories | file bytes | bytes/memory | largest objects, bytes/memory |",
              "|---|---|---|---|---|"]
    for size in sizes:
        d = res["size"][str(size)]
        largest = ", ".join(f"{n} {b / d['memories']:,.0f}" for n, b in d["largest"][:8])
        lines.append(f"| {k(size)} | {d['memories']:,} | {d['bytes']:,} | "
                     f"{d['bytes_per_memory']:,.0f} | {largest} |")
    lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main


def loadavg() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="1k memories, hash embedder, no SPLADE, few queries (< 60 s)")
    ap.add_argument("--embedder", default=None, help="default: e5-small (full), hash (quick)")
    ap.add_argument("--no-sparse", action="store_true",
                    help="leave out the SPLADE sparse leg (default: on in full mode)")
    ap.add_argument("--sizes", default=None, help="comma-separated database sizes")
    ap.add_argument("--queries", type=int, default=None, help="measured queries per pass")
    ap.add_argument("--cli-runs", type=int, default=None, help="measured CLI runs")
    ap.add_argument("--model-sample", type=int, default=None,
                    help="texts for each model's own speed")
    ap.add_argument("--rebuild", action="store_true", help="ignore cached databases")
    ap.add_argument("--profile", action="store_true",
                    help="also cProfile ingest and query (bench/.cache/perf-profile.txt)")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"markdown results (default {RESULTS.relative_to(REPO_ROOT)}; "
                    "quick mode writes a file only when given)")
    ap.add_argument("--ingest-sample", type=int, default=None,
                    help="events for the fresh with-models ingest measurement (default 1000)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--spec", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child == "query-benches":
        spec = json.loads(Path(args.spec).read_text())
        out = run_query_benches(Path(spec["db"]), args.embedder or "e5-small",
                                not args.no_sparse, spec["queries"], spec["warmup"])
        print(json.dumps(out))
        return 0
    if args.child == "query-models":
        query_models_child(args.embedder or "e5-small", not args.no_sparse, args.queries or 60)
        return 0

    quick = args.quick
    embedder_name = args.embedder or ("hash" if quick else "e5-small")
    use_sparse = not (quick or args.no_sparse)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else (
        [1000] if quick else [10_000, 100_000])
    n_queries = args.queries or (30 if quick else 200)
    warmup = 5 if quick else 10
    cli_runs = args.cli_runs or (5 if quick else 15)
    sample = args.model_sample or 500
    out_path = args.out or (None if quick else RESULTS)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tag = f"{'quick-' if quick else ''}{embedder_name}{'-splade' if use_sparse else ''}"

    import apsw

    res: dict[str, Any] = {
        "mode": "quick" if quick else "full", "embedder": embedder_name, "sparse": use_sparse,
        "sizes": sizes, "n_queries": n_queries, "warmup": warmup,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "load_before": loadavg(),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python "
                   f"{platform.python_version()}, SQLite {apsw.sqlite_lib_version()}",
        "ingest": {}, "query": {}, "size": {},
    }
    started = time.perf_counter()
    all_events = generate_events(sizes[-1] + 520)
    small = sizes[0]
    small_events = all_events[:small]
    scopes = sorted({(e["tenant_id"], e["user_id"]) for e in small_events})
    queries = generate_queries(n_queries + warmup, scopes)
    log(f"mode {res['mode']}, embedder {embedder_name}, sparse {use_sparse}, sizes {sizes}, "
        f"{len(queries)} queries, load {res['load_before']}")

    # 1. ingest
    small_db = CACHE_DIR / f"perf-{small}-{tag}.db"
    res["ingest"]["embedded"] = build_embedded_db(small_db, small_events, embedder_name,
                                                  use_sparse, args.rebuild)
    log(f"ingest with models: {res['ingest']['embedded']['events_per_s']:.1f} events/s")
    res["ingest"]["model_speed"] = model_speed(
        embedder_name, use_sparse, [e["content"]["text"] for e in small_events[:sample]])
    n_sample = args.ingest_sample or (500 if quick else 1000)
    res["ingest"]["sample"] = model_ingest_sample(
        CACHE_DIR / f"perf-sample-{tag}.db", all_events[-520 - n_sample : -520], embedder_name,
        use_sparse)
    log(f"ingest sample with models: {res['ingest']['sample']['events_per_s']:.1f} events/s")
    if use_sparse:
        # The sparse leg's own ingest cost (#6: >= 100 turns/s with it): the same sample with
        # SPLADE and no dense leg.
        res["ingest"]["sample_sparse_only"] = model_ingest_sample(
            CACHE_DIR / f"perf-sample-{tag}.db", all_events[-520 - n_sample : -520], "none",
            True)
        log("ingest sample, SPLADE and no dense leg: "
            f"{res['ingest']['sample_sparse_only']['events_per_s']:.1f} events/s")
    res["query_models"] = query_models(embedder_name, use_sparse)
    scratch = CACHE_DIR / f"perf-scratch-{tag}.db"
    res["ingest"]["defer"] = defer_ingest(scratch, small_events,
                                          all_events[sizes[-1] : sizes[-1] + 520],
                                          embedder_name, use_sparse)
    log(f"defer ingest: {res['ingest']['defer']['events_per_s']:.0f} events/s, single p95 "
        f"{res['ingest']['defer']['single_ms']['p95']:.2f} ms")
    remove_db(scratch)

    dbs = {small: small_db}
    for size in sizes[1:]:
        path = CACHE_DIR / f"perf-{size}-{tag}.db"
        res["ingest"]["large"] = build_large_db(path, all_events[:size], small_db,
                                                embedder_name, use_sparse, args.rebuild)
        dbs[size] = path

    # 2. query, 4. size
    for size, path in dbs.items():
        log(f"query latency on {path.name}")
        res["query"][str(size)] = query_benches_in_child(path, embedder_name, use_sparse,
                                                         queries, warmup)
        res["size"][str(size)] = db_size(path)

    # 3. CLI
    log("whole-process CLI runs")
    res["cli"] = cli_benches(small_db, embedder_name, queries, cli_runs,
                             warm=1 if quick else 2, import_runs=3 if quick else 5)

    if args.profile:
        profile_paths(dbs[sizes[-1]], queries, embedder_name, use_sparse,
                      CACHE_DIR / "perf-profile.txt")

    res["load_after"] = loadavg()
    res["seconds"] = time.perf_counter() - started
    report = render(res)
    print(report)
    (CACHE_DIR / f"perf-results-{tag}.json").write_text(json.dumps(res, indent=1, default=str))
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(report)
        log(f"wrote {out_path}")
    log(f"done in {res['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
