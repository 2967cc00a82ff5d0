"""bench/perf.py's corpus and shared helpers: the paths, the thread settings (set before
anything imports numpy), the synthetic chat events and queries, percentiles and the log line.
bench/pg_scale*.py, acb.py and service*.py use these through `perf`."""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# Ingest and the models are measured under the thread settings `memcli` and
# `Memory.configured` use (one OpenBLAS thread; OpenMP threads wait passively), set before
# anything imports numpy.
from memcli.config import thread_defaults

REPO_ROOT = Path(__file__).resolve().parents[1]

thread_defaults()

CACHE_DIR = REPO_ROOT / "bench" / ".cache"
# bench/perf.py's --child modes run in fresh processes (working folder REPO_ROOT)
PERF_CHILD = [sys.executable, "-m", "bench.perf"]
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


def loadavg() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"

