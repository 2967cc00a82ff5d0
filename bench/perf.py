"""Speed benchmark for the memcli foundation: ingest, query, CLI start-up, database size.

    python bench/perf.py                 # full: 10k (e5-small) + 100k databases, the real numbers
    python bench/perf.py --quick         # 1k memories, hash embedder, < 60 s: a CI smoke test
    python bench/perf.py --rebuild       # ignore cached databases under bench/.cache/
    python bench/perf.py --profile       # also cProfile ingest and query (bench/.cache/perf-profile.txt)

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
   `--legs lexical,entity,trigram` [<= 200 ms]; `python -c "import memcli.cli.app"`; and the
   top 10 cumulative imports from `python -X importtime` on the FTS-only command.
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


def make_embedder(name: str) -> Any:
    from memcli.providers.embedders import get_embedder

    return get_embedder(name)


def open_memory(path: Path, embedder: Any) -> Any:
    from memcli.config import Settings
    from memcli.memory import Memory

    return Memory.open(path, embedder=embedder, settings=Settings(db=path))


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


def ingest_batches(memory: Any, events: Sequence[dict], *, defer: bool, label: str) -> float:
    """Seconds to ingest `events` in batches of BATCH (every record must be created)."""
    total = 0.0
    done = 0
    last_log = time.perf_counter()
    for chunk in batches(events, BATCH):
        t0 = time.perf_counter()
        report = memory.ingest(list(chunk), defer_embed=defer)
        total += time.perf_counter() - t0
        if report.rejected or len(report.created) != len(chunk):
            raise SystemExit(f"{label}: ingest rejected records: {report.rejected[:3]}")
        done += len(chunk)
        if time.perf_counter() - last_log > 30:
            last_log = time.perf_counter()
            log(f"{label}: {done}/{len(events)} events, {done / total:.0f}/s")
    return total


# ----------------------------------------------------------------------------- 1. ingest


def build_embedded_db(path: Path, events: list[dict], embedder_name: str,
                      rebuild: bool) -> dict[str, Any]:
    """The query database with real vectors; returns the ingest measurement made building it."""
    meta_path = Path(str(path) + ".json")
    if not rebuild and path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("data_version") == DATA_VERSION and meta.get("events") == len(events):
            log(f"reusing {path.name} (built {meta['built_at']})")
            meta["cached"] = True
            return meta
    remove_db(path)
    log(f"building {path.name}: {len(events)} events with {embedder_name} (batches of {BATCH})")
    embedder = make_embedder(embedder_name)
    embedder.embed_query("load the model")  # model load is start-up, not throughput
    with open_memory(path, embedder) as memory:
        seconds = ingest_batches(memory, events, defer=False, label=f"ingest {embedder_name}")
        vectors = int(memory.db.scalar("SELECT count(*) FROM memory_vectors"))
    meta = {"data_version": DATA_VERSION, "events": len(events), "seconds": seconds,
            "events_per_s": len(events) / seconds, "vectors": vectors,
            "embedder": embedder.model_id, "built_at": datetime.now(UTC).isoformat(),
            "cached": False}
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


def embedder_speed(embedder_name: str, texts: list[str]) -> dict[str, Any]:
    """The embedder's own embed_documents speed (batches of BATCH) and embed_query latency."""
    embedder = make_embedder(embedder_name)
    embedder.embed_documents(texts[:8])  # load + warm
    t0 = time.perf_counter()
    for chunk in batches(texts, BATCH):
        embedder.embed_documents(list(chunk))
    seconds = time.perf_counter() - t0
    return {"texts": len(texts), "texts_per_s": len(texts) / seconds}


def defer_ingest(path: Path, events: list[dict], single: list[dict],
                 embedder_name: str) -> dict[str, Any]:
    """Batch ingest with defer_embed, then one event per Memory.ingest call."""
    remove_db(path)
    embedder = make_embedder(embedder_name)  # configured but never loaded: embedding deferred
    with open_memory(path, embedder) as memory:
        seconds = ingest_batches(memory, events, defer=True, label="defer ingest")
        warm, measured = single[:20], single[20:]
        for rec in warm:
            memory.ingest([rec], defer_embed=True)
        times = []
        for rec in measured:
            t0 = time.perf_counter()
            memory.ingest([rec], defer_embed=True)
            times.append((time.perf_counter() - t0) * 1000)
    return {"events": len(events), "seconds": seconds, "events_per_s": len(events) / seconds,
            "single_ms": summary(times)}


def build_large_db(path: Path, events: list[dict], source_db: Path, embedder_name: str,
                   rebuild: bool) -> dict[str, Any]:
    """The 100k database: defer_embed ingest, vectors copied (with noise) from the 10k db."""
    import apsw
    import numpy as np

    from memcli.store import vectors as vec

    meta_path = Path(str(path) + ".json")
    if not rebuild and path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("data_version") == DATA_VERSION and meta.get("events") == len(events):
            log(f"reusing {path.name} (built {meta['built_at']})")
            meta["cached"] = True
            return meta
    remove_db(path)
    log(f"building {path.name}: {len(events)} events with defer_embed (batches of {BATCH})")
    src = apsw.Connection(str(source_db), flags=apsw.SQLITE_OPEN_READONLY)
    rows = list(src.execute("SELECT memory_id, embedding FROM memory_vectors ORDER BY memory_id"))
    src.close()
    base = np.stack([np.frombuffer(blob, dtype=np.float32) for _, blob in rows])
    embedder = make_embedder(embedder_name)
    rng = np.random.default_rng(3)
    with open_memory(path, embedder) as memory:
        seconds = ingest_batches(memory, events, defer=True, label="defer ingest (large)")
        ids = [int(r[0]) for r in memory.db.execute("SELECT id FROM memories ORDER BY id")]
        t0 = time.perf_counter()
        for chunk in batches(ids, 5000):
            idx = np.array([(i - 1) % len(base) for i in chunk])
            mat = base[idx].copy()
            noisy = np.array([i > len(base) for i in chunk])
            mat[noisy] += rng.normal(0, 0.015, size=(int(noisy.sum()), base.shape[1]))
            mat /= np.linalg.norm(mat, axis=1, keepdims=True)
            mat = mat.astype(np.float32)
            with memory.db.transaction():
                vec.insert_vectors(memory.db, [(i, v.tobytes()) for i, v in zip(chunk, mat,
                                                                                strict=True)])
        vector_seconds = time.perf_counter() - t0
    meta = {"data_version": DATA_VERSION, "events": len(events), "seconds": seconds,
            "events_per_s": len(events) / seconds, "vectors": len(ids),
            "vector_fill_seconds": vector_seconds, "vector_source": source_db.name,
            "built_at": datetime.now(UTC).isoformat(), "cached": False}
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


# ----------------------------------------------------------------------------- 2. query


def query_latency(memory: Any, queries: list[dict], *, legs: dict[str, float],
                  user_scope: bool, warmup: int) -> dict[str, float]:
    memory.retrieval.leg_weights = dict(legs)
    times = []
    for i, q in enumerate(queries):
        filters = memory.filters(tenant_id=q["tenant_id"],
                                 user_id=q["user_id"] if user_scope else None)
        t0 = time.perf_counter()
        memory.query(q["text"], filters=filters)
        ms = (time.perf_counter() - t0) * 1000
        if i >= warmup:
            times.append(ms)
    return summary(times)


def query_breakdown(memory: Any, queries: list[dict], *, user_scope: bool,
                    warmup: int) -> dict[str, dict[str, float]]:
    """Each step of Memory.query timed on its own (same calls, same order)."""
    from memcli.entities import query_entity_keys
    from memcli.retrieval import search
    from memcli.retrieval import text as qtext
    from memcli.store import memories as mem
    from memcli.store import search as sql

    memory.retrieval.leg_weights = {"lexical": 1.0, "dense": 1.0, "entity": 0.5, "trigram": 0.5}
    n = memory.retrieval.candidates_per_leg
    parts: dict[str, list[float]] = {}

    def timed(name: str, i: int, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        out = fn()
        if i >= warmup:
            parts.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
        return out

    for i, q in enumerate(queries):
        text = q["text"]
        f = memory.filters(tenant_id=q["tenant_id"], user_id=q["user_id"] if user_scope else None)
        legs: dict[str, list] = {}
        match = timed("parse query (fts/trigram/entity keys)", i, lambda: (
            qtext.fts_match(text), qtext.trigram_match(text), query_entity_keys(text)))
        fts, tri, keys = match
        if fts:
            legs["lexical"] = timed("lexical leg (FTS5)", i,
                                    lambda: sql.lexical(memory.db, fts, f, n))
        if tri:
            legs["trigram"] = timed("trigram leg", i, lambda: sql.trigram(memory.db, tri, f, n))
        if keys:
            legs["entity"] = timed("entity leg", i, lambda: sql.entity(memory.db, keys, f, n))
        if memory.embedder is not None and memory.db.vec_enabled:
            blob = timed("embed_query", i, lambda: memory.embedder.embed_query(text)
                         .astype("float32").tobytes())
            legs["dense"] = timed("dense leg (SQL)", i, lambda: sql.dense(memory.db, blob, f, n))
        ranked = timed("fuse + rank (get_memories, stages)", i,
                       lambda: search.rank(memory.db, legs, memory.retrieval))[:10]
        timed("build hits", i, lambda: [memory._hit(c, "full") for c in ranked])
        ids = [c.id for c in ranked]

        def access() -> None:
            with memory.db.transaction():
                mem.record_access(memory.db, ids)
        timed("record_access (write txn)", i, access)
    return {k: summary(v) for k, v in parts.items()}


def run_query_benches(path: Path, embedder_name: str, queries: list[dict],
                      warmup: int) -> dict[str, Any]:
    embedder = make_embedder(embedder_name)
    embedder.embed_query("load the model")
    out: dict[str, Any] = {}
    with open_memory(path, embedder) as memory:
        memory.db.execute("PRAGMA optimize")
        for legs_name, legs in (("all legs", None), ("FTS-only", FTS_ONLY)):
            for scope_name, user_scope in (("tenant+user", True), ("no user filter", False)):
                weights = legs or {"lexical": 1.0, "dense": 1.0, "entity": 0.5, "trigram": 0.5}
                log(f"  {path.name}: {legs_name}, {scope_name}")
                out[f"{legs_name} | {scope_name}"] = query_latency(
                    memory, queries, legs=weights, user_scope=user_scope, warmup=warmup)
        for scope_name, user_scope in (("tenant+user", True), ("no user filter", False)):
            out[f"breakdown | {scope_name}"] = query_breakdown(
                memory, queries, user_scope=user_scope, warmup=warmup)
        memories = int(memory.db.scalar("SELECT count(*) FROM memories"))
        per_user = memory.db.query(
            "SELECT count(*) AS n FROM memories GROUP BY tenant_id, user_id ORDER BY n")
    out["memories"] = memories
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


def time_process(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    ms = (time.perf_counter() - t0) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-800:]}")
    return ms


def cli_benches(path: Path, embedder_name: str, queries: list[dict], runs: int
                ) -> dict[str, Any]:
    env = cli_env(embedder_name)
    py = sys.executable
    out: dict[str, Any] = {}

    def query_argv(q: dict, legs: str | None) -> list[str]:
        argv = [py, "-m", "memcli", "query", q["text"], "--db", str(path), "--tenant",
                q["tenant_id"], "--user", q["user_id"], "--json"]
        return argv + (["--legs", legs] if legs else [])

    for label, legs in (("with embedder", None), ("FTS-only", CLI_FTS_LEGS)):
        times = []
        for i, q in enumerate(queries[: runs + 2]):
            ms = time_process(query_argv(q, legs), env)
            if i >= 2:
                times.append(ms)
        out[label] = summary(times)
    for label, code in (("python -c pass", "pass"),
                        ("python -c 'import memcli.cli.app'", "import memcli.cli.app")):
        times = [time_process([py, "-c", code], env) for _ in range(runs + 2)][2:]
        out[label] = summary(times)
    out["importtime"] = import_offenders(query_argv(queries[0], CLI_FTS_LEGS), env)
    return out


_IMPORT_LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")


def import_offenders(argv: list[str], env: dict[str, str], runs: int = 3,
                     top: int = 10) -> list[dict[str, Any]]:
    """Top cumulative imports of the command (median over `runs`), with their nesting depth."""
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
    rows = [{"module": k, "cumulative_ms": statistics.median(v) / 1000,
             "self_ms": statistics.median(selfs[k]) / 1000, "depth": depth[k]}
            for k, v in cumulative.items()]
    rows.sort(key=lambda r: -r["cumulative_ms"])
    return rows[:top]


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


def profile_paths(db: Path, events: list[dict], queries: list[dict], embedder_name: str,
                  out_path: Path) -> None:
    """cProfile the defer-embed ingest of 2,000 events and 100 queries of each kind."""
    import cProfile
    import io
    import pstats

    buf = io.StringIO()

    def dump(title: str, prof: cProfile.Profile) -> None:
        buf.write(f"\n===== {title} =====\n")
        stats = pstats.Stats(prof, stream=buf).strip_dirs()
        stats.sort_stats("cumulative").print_stats(35)
        stats.sort_stats("tottime").print_stats(20)

    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        path = Path(tmp) / "profile.db"
        with open_memory(path, make_embedder(embedder_name)) as memory:
            memory.ingest(events[:BATCH], defer_embed=True)
            prof = cProfile.Profile()
            prof.enable()
            for chunk in batches(events[BATCH : BATCH * 5], BATCH):
                memory.ingest(list(chunk), defer_embed=True)
            prof.disable()
            dump("ingest, defer_embed, 2,000 events in batches of 500", prof)
            prof = cProfile.Profile()
            prof.enable()
            for rec in events[BATCH * 5 : BATCH * 5 + 300]:
                memory.ingest([rec], defer_embed=True)
            prof.disable()
            dump("ingest, defer_embed, 300 single-event calls", prof)
    embedder = make_embedder(embedder_name)
    embedder.embed_query("warm")
    with open_memory(db, embedder) as memory:
        for legs_name, legs in (("all legs", None), ("FTS-only", FTS_ONLY)):
            for user_scope in (True, False):
                memory.retrieval.leg_weights = legs or {"lexical": 1.0, "dense": 1.0,
                                                        "entity": 0.5, "trigram": 0.5}
                for q in queries[:10]:
                    memory.query(q["text"])
                prof = cProfile.Profile()
                prof.enable()
                for q in queries[:100]:
                    f = memory.filters(tenant_id=q["tenant_id"],
                                       user_id=q["user_id"] if user_scope else None)
                    memory.query(q["text"], filters=f)
                prof.disable()
                scope = "tenant+user" if user_scope else "no user filter"
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
    small, large = res["sizes"][0], res["sizes"][-1]
    lines = [
        "# memcli performance" + (" (quick smoke run: not the real numbers)" if quick else ""),
        "",
        f"Measured {res['date']} by `python bench/perf.py{' --quick' if quick else ''}`: "
        f"{res['machine']}. Load average before / after: {res['load_before']} / "
        f"{res['load_after']} (other jobs shared the machine when it was above the core count: "
        "read latencies as upper bounds).",
        "",
        f"Data: synthetic chat turns of 20-40 words (names, dates, @mentions, #tags, ~3 % "
        f"Chinese), 40 users in 2 tenants, sessions of 8-40 turns; one memory per event. "
        f"Embedder: `{res['embedder']}`. Ingest through `Memory.ingest` in batches of {BATCH}. "
        f"Queries: {res['n_queries']} varied queries, the first {res['warmup']} of each pass are "
        f"warm-up and not counted. Times in ms unless marked.",
    ]
    if not quick and len(res["sizes"]) > 1:
        lines += [
            "",
            f"The {large // 1000}k database was ingested with `defer_embed=True`; its vectors "
            f"are the e5-small vectors of the {small // 1000}k database (the same first "
            f"{small // 1000}k events), copied with small Gaussian noise (sigma 0.015 per "
            f"dimension) and renormalised for the other memories, written through "
            f"`memcli.store.vectors.insert_vectors`. KNN cost depends on how many vectors there "
            f"are, not on what they mean.",
        ]

    ing = res["ingest"]
    emb, defer, speed = ing["embedded"], ing["defer"], ing["embedder_speed"]
    lines += ["", "## Targets", "", "| target | measured | verdict |", "|---|---|---|"]
    lines.append(f"| ingest with embedder >= 100 events/s | {fmt(emb['events_per_s'])} events/s "
                 f"(embedder alone: {fmt(speed['texts_per_s'])} texts/s) | "
                 f"{verdict(emb['events_per_s'] >= 100)} |")
    lines.append(f"| ingest `defer_embed`, batches of {BATCH} >= 2,000 events/s | "
                 f"{fmt(defer['events_per_s'], 0)} events/s | "
                 f"{verdict(defer['events_per_s'] >= 2000)} |")
    lines.append(f"| one event per `ingest` call p95 <= 50 ms | "
                 f"{fmt(defer['single_ms']['p95'], 2)} ms | "
                 f"{verdict(defer['single_ms']['p95'] <= 50)} |")
    q = res["query"][str(large)]
    for key in ("all legs | tenant+user", "all legs | no user filter",
                "FTS-only | tenant+user", "FTS-only | no user filter"):
        p95 = q[key]["p95"]
        lines.append(f"| library query p95 <= 20 ms at {large // 1000}k ({key}) | "
                     f"{fmt(p95)} ms | {verdict(p95 <= 20)} |")
    cli = res["cli"]
    lines.append(f"| `memcli query` p50 <= 400 ms with embedder | "
                 f"{fmt(cli['with embedder']['p50'], 0)} ms | "
                 f"{verdict(cli['with embedder']['p50'] <= 400)} |")
    lines.append(f"| `memcli query --legs {CLI_FTS_LEGS}` p50 <= 200 ms | "
                 f"{fmt(cli['FTS-only']['p50'], 0)} ms | "
                 f"{verdict(cli['FTS-only']['p50'] <= 200)} |")

    lines += ["", "## 1. Ingest", "", "| what | events | time | throughput |", "|---|---|---|---|"]
    cached = " (measured when the cached database was built)" if emb.get("cached") else ""
    lines.append(f"| with `{res['embedder']}`{cached} | {emb['events']:,} | "
                 f"{fmt(emb['seconds'])} s | {fmt(emb['events_per_s'])} events/s |")
    lines.append(f"| the embedder alone, `embed_documents` in batches of {BATCH} | "
                 f"{speed['texts']:,} texts | {fmt(speed['texts'] / speed['texts_per_s'])} s | "
                 f"{fmt(speed['texts_per_s'])} texts/s |")
    lines.append(f"| `defer_embed=True` | {defer['events']:,} | {fmt(defer['seconds'], 2)} s | "
                 f"{fmt(defer['events_per_s'], 0)} events/s |")
    if "large" in ing:
        lg = ing["large"]
        cached = " (cached build)" if lg.get("cached") else ""
        lines.append(f"| `defer_embed=True`, {large // 1000}k database{cached} | "
                     f"{lg['events']:,} | {fmt(lg['seconds'], 1)} s | "
                     f"{fmt(lg['events_per_s'], 0)} events/s |")
    s = defer["single_ms"]
    lines += ["", f"One event per `Memory.ingest([record])` call, `defer_embed=True`, on the "
              f"{small // 1000}k database ({s['n']} calls after 20 warm-up): p50 "
              f"{fmt(s['p50'], 2)} ms, p95 {fmt(s['p95'], 2)} ms, mean {fmt(s['mean'], 2)} ms."]
    embed_share = emb["events_per_s"] / speed["texts_per_s"]  # embed time / ingest time
    lines += ["", f"With the embedder, embedding is the bound: at "
              f"{fmt(speed['texts_per_s'])} texts/s alone the model caps ingest at that rate; "
              f"everything else costs {fmt(1000 / defer['events_per_s'], 2)} ms per event "
              f"(the `defer_embed` rate), so ingest runs at {fmt(emb['events_per_s'])} events/s "
              f"({fmt(100 * embed_share, 0)} % of the time in the embedder)."]

    lines += ["", "## 2. Library query latency (`Memory.query`, top 10, defaults)", "",
              "| database | legs | scope | p50 | p95 | mean |", "|---|---|---|---|---|---|"]
    for size in res["sizes"]:
        qs = res["query"][str(size)]
        for key, val in qs.items():
            if " | " not in key or key.startswith("breakdown"):
                continue
            legs, scope = key.split(" | ")
            lines.append(f"| {size // 1000}k | {legs} | {scope} | {fmt(val['p50'], 2)} | "
                         f"{fmt(val['p95'], 2)} | {fmt(val['mean'], 2)} |")
    for size in res["sizes"]:
        sc = res["query"][str(size)]["scope_sizes"]
        lines.append("")
        lines.append(f"{size // 1000}k: memories per tenant+user scope min / median / max: "
                     f"{sc['min']:,} / {sc['median']:,} / {sc['max']:,}.")
    lines += ["", "Where the time goes (all legs, each step timed on its own, p50 / p95):", "",
              "| database | scope | step | p50 | p95 |", "|---|---|---|---|---|"]
    for size in res["sizes"]:
        qs = res["query"][str(size)]
        for scope in ("tenant+user", "no user filter"):
            for step, val in qs[f"breakdown | {scope}"].items():
                lines.append(f"| {size // 1000}k | {scope} | {step} | {fmt(val['p50'], 2)} | "
                             f"{fmt(val['p95'], 2)} |")

    lines += ["", f"## 3. Whole process (`python -m memcli query`, {small // 1000}k database)", "",
              "| command | runs | p50 | p95 |", "|---|---|---|---|"]
    for label in ("with embedder", "FTS-only", "python -c pass",
                  "python -c 'import memcli.cli.app'"):
        val = cli[label]
        name = {"with embedder": f"`memcli query` (MEMCLI_EMBEDDER={res['embedder']})",
                "FTS-only": f"`memcli query --legs {CLI_FTS_LEGS}`"}.get(label, f"`{label}`")
        lines.append(f"| {name} | {val['n']} | {fmt(val['p50'], 0)} | {fmt(val['p95'], 0)} |")
    lines += ["", f"Top 10 cumulative imports, `python -X importtime -m memcli query ... --legs "
              f"{CLI_FTS_LEGS}` (median of 3 runs; depth 0 = imported by memcli itself):", "",
              "| module | depth | cumulative ms | self ms |", "|---|---|---|---|"]
    for row in cli["importtime"]:
        lines.append(f"| `{row['module']}` | {row['depth']} | {fmt(row['cumulative_ms'])} | "
                     f"{fmt(row['self_ms'])} |")

    lines += ["", "## 4. Database size", "", "| database | memories | file bytes | bytes/memory "
              "| largest objects |", "|---|---|---|---|---|"]
    for size in res["sizes"]:
        d = res["size"][str(size)]
        largest = ", ".join(f"{n} {b / d['memories']:,.0f}" for n, b in d["largest"][:6])
        lines.append(f"| {size // 1000}k | {d['memories']:,} | {d['bytes']:,} | "
                     f"{d['bytes_per_memory']:,.0f} | {largest} (bytes/memory) |")
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
                    help="1k memories, hash embedder, few queries (< 60 s)")
    ap.add_argument("--embedder", default=None, help="default: e5-small (full), hash (quick)")
    ap.add_argument("--sizes", default=None, help="comma-separated database sizes")
    ap.add_argument("--queries", type=int, default=None, help="queries per pass")
    ap.add_argument("--cli-runs", type=int, default=None, help="measured CLI runs")
    ap.add_argument("--embed-sample", type=int, default=None,
                    help="texts for the embedder's own speed")
    ap.add_argument("--rebuild", action="store_true", help="ignore cached databases")
    ap.add_argument("--profile", action="store_true", help="also cProfile ingest and query")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"markdown results (default {RESULTS.relative_to(REPO_ROOT)}; "
                    "quick mode writes only when given)")
    args = ap.parse_args(argv)

    quick = args.quick
    embedder_name = args.embedder or ("hash" if quick else "e5-small")
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else (
        [1000] if quick else [10_000, 100_000])
    n_queries = args.queries or (30 if quick else 200)
    warmup = 5 if quick else 10
    cli_runs = args.cli_runs or (5 if quick else 15)
    embed_sample = args.embed_sample or (1000 if quick else 2000)
    out_path = args.out or (None if quick else RESULTS)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tag = f"{'quick-' if quick else ''}{embedder_name}"

    import apsw

    res: dict[str, Any] = {
        "mode": "quick" if quick else "full", "embedder": embedder_name, "sizes": sizes,
        "n_queries": n_queries, "warmup": warmup,
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
    log(f"mode {res['mode']}, embedder {embedder_name}, sizes {sizes}, "
        f"{len(queries)} queries, load {res['load_before']}")

    # 1. ingest
    small_db = CACHE_DIR / f"perf-{small}-{tag}.db"
    res["ingest"]["embedded"] = build_embedded_db(small_db, small_events, embedder_name,
                                                  args.rebuild)
    log(f"ingest with embedder: {res['ingest']['embedded']['events_per_s']:.1f} events/s")
    res["ingest"]["embedder_speed"] = embedder_speed(
        embedder_name, [e["content"]["text"] for e in small_events[:embed_sample]])
    log(f"embedder alone: {res['ingest']['embedder_speed']['texts_per_s']:.1f} texts/s")
    scratch = CACHE_DIR / f"perf-scratch-{tag}.db"
    res["ingest"]["defer"] = defer_ingest(scratch, small_events,
                                          all_events[sizes[-1] : sizes[-1] + 520], embedder_name)
    log(f"defer ingest: {res['ingest']['defer']['events_per_s']:.0f} events/s, single p95 "
        f"{res['ingest']['defer']['single_ms']['p95']:.2f} ms")
    remove_db(scratch)

    dbs = {small: small_db}
    for size in sizes[1:]:
        path = CACHE_DIR / f"perf-{size}-{tag}.db"
        res["ingest"]["large"] = build_large_db(path, all_events[:size], small_db,
                                                embedder_name, args.rebuild)
        dbs[size] = path

    # 2. query, 4. size
    for size, path in dbs.items():
        log(f"query latency on {path.name}")
        res["query"][str(size)] = run_query_benches(path, embedder_name, queries, warmup)
        res["size"][str(size)] = db_size(path)

    # 3. CLI
    log("whole-process CLI runs")
    res["cli"] = cli_benches(small_db, embedder_name, queries, cli_runs)

    if args.profile:
        profile_paths(dbs[sizes[-1]], all_events, queries, embedder_name,
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
