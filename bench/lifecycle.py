"""Lifecycle benchmark: consolidation of LoCoMo through a scripted model, and decay over 100k rows.

    python -m bench.lifecycle                       # all 10 conversations (e5-small), decay 100k
    python -m bench.lifecycle --embedder hash       # deterministic test embedder (no model cost)
    python -m bench.lifecycle --conversations 2     # a subset
    python -m bench.lifecycle --smoke               # CI: 1 conversation, 3 sessions, decay 2k

Consolidation. Every LoCoMo turn becomes one event (`tenant_id = user_id = <sample>`,
`session_id = <sample>:session_<n>`, actor = the speaker, `ts` = the session's date), ingested
with `defer_embed=True` (consolidation reads episodes, not their vectors). Then every session
is consolidated on its own, in conversation order, through the library (`consolidate(...,
session_id=...)`) and the real `openai` client, against a scripted OpenAI-compatible server on
127.0.0.1 (tests/support/llmstub.py, extended here to compute replies instead of queueing them):
- an extraction prompt is answered with LoCoMo's own `observation` entries whose evidence turns
  are in the prompt (third-person facts written by the dataset's authors), citing those turns,
  and the session's `session_summary` cut to the writing rules; observations that break the
  rules (first person in a quote, > 280 chars) are left out, as a good model would;
- a same-fact prompt gets `same` for pairs with Jaccard >= 0.6, else `unrelated`;
- token counts are real cl100k counts of the messages and of the reply.
Reported per session: wall time excluding model time (model time = what the client measured
per call, server included), model calls, tokens in and out; and, of the remaining time, how
much went to the embedder and the SPLADE encoder.

Decay. A database of N fact memories (default 100,000; FTS rows included) with spread-out ages
(0-400 days), decay rates (0.005-0.1), importance, 5 % pinned and 5 % protected; timed:
`plan_decay` (--dry-run), `apply_decay` (first run), a second run a day later, and
`--purge-expired` 31 days after that.

Results: stdout, bench/results/lifecycle-<embedder>[-nosparse].{md,json} (lifecycle-decay.*
with --skip-consolidation). LoCoMo is CC BY-NC 4.0: it is read from
../shared/data/locomo10.json (or --data) and never copied here.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memcli import Memory
from memcli.config import LifecycleSettings, LLMSettings
from memcli.core.records import format_ts
from memcli.derived.llm_usage import Model
from memcli.derived.textrules import check_memory_text, jaccard, tokens
from memcli.lifecycle.consolidate import consolidate
from memcli.lifecycle.decay import apply_decay, plan_decay
from tests.support.llmstub import LLMStub, ScriptedReply

REPO_ROOT = Path(__file__).resolve().parents[1]

DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "locomo10.json"
RESULTS = REPO_ROOT / "bench" / "results" / "lifecycle"
CACHE = REPO_ROOT / "bench" / ".cache"
SESSION_KEY = re.compile(r"session_(\d+)")
TURN_LINE = re.compile(r"^\[(\d+)\] .+? \(\d{4}-\d\d-\d\d \d\d:\d\d\): (.*)$")
PAIR = re.compile(r"Pair (\d+):\nA \(stored [^)]*\): (.*)\nB \(new\): (.*)")


# -- data ----------------------------------------------------------------------------------------


def session_list(conv: dict[str, Any]) -> list[int]:
    return sorted(
        int(m.group(1))
        for k, v in conv.items()
        if (m := SESSION_KEY.fullmatch(k)) and isinstance(v, list)
    )


def turn_text(turn: dict[str, Any]) -> str:
    text = turn["text"]
    if turn.get("blip_caption"):
        text += f" [image: {turn['blip_caption']}]"
    return text


def records(sample: dict[str, Any], max_sessions: int | None) -> list[dict[str, Any]]:
    conv = sample["conversation"]
    out = []
    for n in session_list(conv)[:max_sessions]:
        start = datetime.strptime(conv[f"session_{n}_date_time"].strip(), "%I:%M %p on %d %B, %Y")
        for i, turn in enumerate(conv[f"session_{n}"]):
            out.append(
                {
                    "event_id": f"{sample['sample_id']}:{turn['dia_id']}",
                    "tenant_id": sample["sample_id"],
                    "user_id": sample["sample_id"],
                    "session_id": f"{sample['sample_id']}:session_{n}",
                    "ts": (start + timedelta(seconds=30 * i)).isoformat(),
                    "actor": {"type": "human", "id": turn["speaker"]},
                    "content": {"text": turn_text(turn)},
                }
            )
    return out


# -- the scripted model ----------------------------------------------------------------------------


def _clean(text: str) -> str:
    return " ".join(text.split())


def fit_summary(text: str) -> str:
    """The dataset's summary cut to the writing rules (<= 800 chars, <= 5 sentences)."""
    kept: list[str] = []
    for sentence in re.split(r"(?<=[.!?])\s+", _clean(text)):
        trial = " ".join([*kept, sentence])
        try:
            check_memory_text(trial, max_chars=800, max_sentences=5)
        except ValueError:
            continue
        kept.append(sentence)
    return " ".join(kept) or "The participants talked."


class LocomoModel(LLMStub):
    """Answers extraction and same-fact prompts from LoCoMo's own annotations."""

    def __init__(self, data: list[dict[str, Any]]) -> None:
        super().__init__()
        from memcli.core.tokens import count_tokens

        self.count = count_tokens
        self.by_text: dict[str, dict[str, str]] = {}  # session -> clipped turn text -> dia_id
        self.observations: dict[str, list[tuple[str, str]]] = {}
        self.summaries: dict[str, str] = {}
        self.rejected = 0
        self.offered = 0
        for sample in data:
            conv = sample["conversation"]
            for n in session_list(conv):
                sid = f"{sample['sample_id']}:session_{n}"
                self.by_text[sid] = {
                    _clean(turn_text(t))[:200]: t["dia_id"] for t in conv[f"session_{n}"]
                }
                obs = sample["observation"].get(f"session_{n}_observation", {})
                self.observations[sid] = [
                    (text, str(ev)) for items in obs.values() for text, ev in items
                ]
                self.summaries[sid] = sample["session_summary"].get(f"session_{n}_summary", "")

    def _record(self, path: str, body: dict[str, Any]) -> tuple[int, ScriptedReply | None]:
        n, reply = super()._record(path, body)
        if reply is None and path.endswith("/chat/completions"):
            messages = body.get("messages", [])
            system, user = messages[0]["content"], messages[-1]["content"]
            content = self._pairs(user) if "compare pairs" in system else self._extract(user)
            prompt_tokens = sum(self.count(m["content"]) for m in messages)
            reply = ScriptedReply(content, usage=(prompt_tokens, self.count(content)))
        return n, reply

    def _extract(self, prompt: str) -> str:
        head, *lines = prompt.splitlines()
        sid = head.split(",")[0].removeprefix("Session ").strip()
        known = self.by_text.get(sid, {})
        position: dict[str, int] = {}
        for line in lines:
            m = TURN_LINE.match(line)
            if m:
                dia = known.get(m.group(2)[:200].rstrip("…").strip()) or next(
                    (d for t, d in known.items() if m.group(2).startswith(t[:60])), None
                )
                if dia:
                    position[dia] = int(m.group(1))
        facts = []
        for text, evidence in self.observations.get(sid, []):
            turns = [
                position[e.strip()] for e in re.split(r"[;,\s]+", evidence) if e.strip() in position
            ]
            if not turns:
                continue
            self.offered += 1
            try:
                facts.append({"text": check_memory_text(text), "turns": turns, "importance": 0.5})
            except ValueError:
                self.rejected += 1
        speakers = sorted({w for t, _ in self.observations.get(sid, []) for w in t.split()[:1]})
        return json.dumps(
            {
                "summary": fit_summary(self.summaries.get(sid, "")),
                "facts": facts[:40],
                "entities": speakers[:10],
            }
        )

    def _pairs(self, prompt: str) -> str:
        verdicts = []
        for m in PAIR.finditer(prompt):
            same = jaccard(tokens(m.group(2)), tokens(m.group(3))) >= 0.6
            verdicts.append({"pair": int(m.group(1)), "verdict": "same" if same else "unrelated"})
        return json.dumps({"verdicts": verdicts})


# -- timing proxies ------------------------------------------------------------------------------


class Timed:
    """Wraps an embedder or encoder; adds the seconds spent in its encode calls."""

    def __init__(self, inner: Any, *methods: str) -> None:
        self._inner = inner
        self.seconds = 0.0
        for name in methods:
            if hasattr(inner, name):  # the batch methods are optional
                setattr(self, name, self._wrap(getattr(inner, name)))

    def _wrap(self, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0

        return call

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


# -- consolidation -------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def bench_consolidation(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    data = json.loads(Path(args.data).read_text(encoding="utf-8"))[: args.conversations]
    embedder: Any = None
    if args.embedder != "none":
        from memcli.providers.embedders import get_embedder

        embedder = Timed(get_embedder(args.embedder), "embed_documents", "embed_query",
                         "embed_queries")
    sparse: Any = None
    if not args.no_sparse:
        from memcli.providers.splade import SpladeEncoder

        sparse = Timed(SpladeEncoder(), "encode_documents", "encode_query", "encode_queries")
    db_path = workdir / "locomo-lifecycle.db"
    # Months of conversation consolidated in one run: a user's daily write cap would leave
    # most sessions waiting for another day, so it is off here (the per-turn cap stays).
    cfg = LifecycleSettings(max_writes_per_user_day=None)
    per_session: list[dict[str, Any]] = []
    with (
        LocomoModel(data) as server,
        Memory.open(db_path, embedder=embedder, sparse=sparse) as memory,
    ):
        t0 = time.perf_counter()
        for sample in data:
            memory.ingest(records(sample, args.max_sessions), defer_embed=True)
        ingest_s = time.perf_counter() - t0
        model = Model(
            memory.db,
            LLMSettings(base_url=server.base_url, model="locomo-scripted", max_retries=0),
            "consolidate",
        )
        for sample in data:
            for n in session_list(sample["conversation"])[: args.max_sessions]:
                sid = f"{sample['sample_id']}:session_{n}"
                before = model.spend.as_dict()
                emb0 = embedder.seconds if embedder else 0.0
                sp0 = sparse.seconds if sparse else 0.0
                t1 = time.perf_counter()
                report = consolidate(memory, model, cfg, session_id=sid)
                wall = time.perf_counter() - t1
                after = model.spend.as_dict()
                (done,) = report["sessions"]
                llm_s = (after["llm_ms"] - before["llm_ms"]) / 1000
                per_session.append(
                    {
                        "session": sid,
                        "episodes": done["episodes"],
                        "wall_s": wall,
                        "llm_s": llm_s,
                        "other_s": wall - llm_s,
                        "embed_s": (embedder.seconds if embedder else 0.0) - emb0,
                        "sparse_s": (sparse.seconds if sparse else 0.0) - sp0,
                        "calls": after["calls"] - before["calls"],
                        "tokens_in": after["tokens_in"] - before["tokens_in"],
                        "tokens_out": after["tokens_out"] - before["tokens_out"],
                        "added": len(done["added"]),
                        "merged": len(done["merged"]),
                        "pairs_asked": done["pairs"]["asked"],
                        "errors": len(report["errors"]),
                    }
                )
        stats = memory.stats()
        model.close()
        rejected, offered = server.rejected, server.offered

    def col(key: str) -> list[float]:
        return [s[key] for s in per_session]

    summary = {
        "conversations": len(data),
        "sessions": len(per_session),
        "episodes": sum(col("episodes")),
        "ingest_s": round(ingest_s, 2),
        "embedder": args.embedder,
        "sparse": not args.no_sparse,
        "facts_added": sum(col("added")),
        "facts_merged": sum(col("merged")),
        "pairs_asked": sum(col("pairs_asked")),
        "errors": sum(col("errors")),
        "observations_offered": offered,
        "observations_rejected_by_rules": rejected,
        "memories_by_kind": stats["by_kind"],
    }
    for key in (
        "other_s",
        "llm_s",
        "embed_s",
        "sparse_s",
        "calls",
        "tokens_in",
        "tokens_out",
        "wall_s",
    ):
        values = col(key)
        summary[key] = {
            "mean": round(statistics.fmean(values), 4),
            "p50": round(pct(values, 0.5), 4),
            "p95": round(pct(values, 0.95), 4),
            "total": round(sum(values), 3),
        }
    return {"summary": summary, "per_session": per_session}


# -- decay ---------------------------------------------------------------------------------------


def build_decay_db(path: Path, rows: int, seed: int = 7) -> float:
    from memcli.store import memories as mem
    from memcli.store.sqlite.connection import Database

    rng = random.Random(seed)
    now = datetime.now(UTC)
    words = (
        "tea coffee Lisbon Porto nurse teacher sister brother bike guitar jazz chess "
        "garden river project deadline budget invoice trip museum"
    ).split()
    t0 = time.perf_counter()
    db = Database(path)
    with db.transaction():
        for i in range(rows):
            created = now - timedelta(days=rng.uniform(0, 400))
            accessed = (
                None
                if rng.random() < 0.5
                else format_ts(
                    created + timedelta(days=rng.uniform(0, (now - created).days + 0.01))
                )
            )
            ts = format_ts(created)
            kind = rng.choice(("fact", "fact", "fact", "decision", "task", "summary"))
            roll = rng.random()
            memory_id = mem.insert_memory(
                db,
                {
                    "kind": kind,
                    "category": "knowledge",
                    "tenant_id": f"t{i % 3}",
                    "channel": "private",
                    "sensitivity": "none",
                    "user_id": f"u{i % 500}",
                    "session_id": f"s{i % 5000}",
                    "content": f"User {i % 500} mentioned {' '.join(rng.sample(words, 6))}.",
                    "importance": rng.random(),
                    "pinned": int(roll < 0.05),
                    "decay_rate": 0.0 if roll > 0.95 else rng.uniform(0.005, 0.1),
                    "confidence": 1.0,
                    "event_time": ts,
                    "created_at": ts,
                    "updated_at": ts,
                    "valid_from": ts,
                    "source_ids": [],
                    "attributes": {},
                    "token_count": 12,
                },
            )
            if accessed:
                db.execute(
                    "UPDATE memories SET last_accessed = ? WHERE id = ?",
                    (accessed, memory_id),
                )
    db.close()
    return time.perf_counter() - t0


def bench_decay(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from memcli.store.sqlite.connection import Database

    CACHE.mkdir(parents=True, exist_ok=True)
    cached = CACHE / f"lifecycle-decay-{args.decay_rows}.db"
    build_s = None
    if not cached.exists():
        partial = cached.with_suffix(".partial")
        for leftover in CACHE.glob(partial.name + "*"):
            leftover.unlink()
        build_s = build_decay_db(partial, args.decay_rows)
        partial.rename(cached)  # only a finished build is reused
    path = workdir / "decay.db"
    shutil.copy(cached, path)
    cfg = LifecycleSettings()
    out: dict[str, Any] = {"rows": args.decay_rows, "build_s": build_s}
    db = Database(path)
    try:
        now = datetime.now(UTC)
        steps = [
            ("plan (--dry-run)", lambda: plan_decay(db, cfg, now=now)),
            ("apply, first run", lambda: apply_decay(db, cfg, now=now)),
            ("apply, next day", lambda: apply_decay(db, cfg, now=now + timedelta(days=1))),
            (
                "apply + --purge-expired, 31 days on",
                lambda: apply_decay(db, cfg, now=now + timedelta(days=32), purge_expired=True),
            ),
        ]
        for name, step in steps:
            t0, c0 = time.perf_counter(), time.process_time()
            report = step()
            out[name] = {
                "seconds": round(time.perf_counter() - t0, 3),
                "cpu_seconds": round(time.process_time() - c0, 3),
                "decayed": report["decayed"],
                "soft_deleted": report["soft_deleted"],
                "purged": report["purged"],
            }
        out["states"] = dict(db.execute("SELECT state, count(*) FROM memories GROUP BY state"))
    finally:
        db.close()
    return out


# -- report --------------------------------------------------------------------------------------


def render(meta: dict[str, Any], cons: dict[str, Any] | None, decay: dict[str, Any] | None) -> str:
    lines = [
        "# Lifecycle benchmark",
        "",
        f"Measured {meta['date']} with `python -m bench.lifecycle {meta['argv']}` "
        f"(load average {meta['load']}, {meta['cpus']} CPUs).",
        "",
    ]
    if cons:
        s = cons["summary"]
        lines += [
            "## Consolidation of LoCoMo (scripted model)",
            "",
            f"{s['conversations']} conversations, {s['sessions']} sessions, {s['episodes']} "
            f"turns (ingest with defer_embed: {s['ingest_s']} s); embedder `{s['embedder']}`, "
            f"SPLADE {'on' if s['sparse'] else 'off'}.",
            "",
            "| per session | mean | p50 | p95 | total |",
            "|---|---|---|---|---|",
        ]
        labels = {
            "other_s": "wall time excluding model time (s)",
            "embed_s": "  of which embedder (s)",
            "sparse_s": "  of which SPLADE (s)",
            "llm_s": "model time, client-measured (s)",
            "calls": "model calls",
            "tokens_in": "tokens in",
            "tokens_out": "tokens out",
        }
        for key, label in labels.items():
            v = s[key]
            lines.append(f"| {label} | {v['mean']} | {v['p50']} | {v['p95']} | {v['total']} |")
        lines += [
            "",
            f"Facts added {s['facts_added']}, merged into existing "
            f"{s['facts_merged']}, same-fact pairs asked {s['pairs_asked']}, "
            f"errors {s['errors']}; LoCoMo observations offered "
            f"{s['observations_offered']}, left out by the writing rules "
            f"{s['observations_rejected_by_rules']}. Memories by kind: "
            f"{s['memories_by_kind']}.",
            "",
        ]
    if decay:
        lines += [
            "## Decay",
            "",
            f"{decay['rows']:,} memories"
            + (f" (built in {decay['build_s']:.1f} s)" if decay["build_s"] else "")
            + ".",
            "",
            "| step | wall s | CPU s | decayed | soft-deleted (decay / TTL) | purged |",
            "|---|---|---|---|---|---|",
        ]
        for key, v in decay.items():
            if isinstance(v, dict) and "seconds" in v:
                sd = v["soft_deleted"]
                lines.append(
                    f"| {key} | {v['seconds']} | {v['cpu_seconds']} | {v['decayed']:,} | "
                    f"{sd['decay']:,} / {sd['ttl']:,} | {v['purged']:,} |"
                )
        lines += ["", f"States after: {decay['states']}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument(
        "--embedder", default="e5-small", help="e5-small (default), minilm, hash or none"
    )
    parser.add_argument("--no-sparse", action="store_true", help="no SPLADE encoder")
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--max-sessions", type=int, default=None)
    parser.add_argument("--decay-rows", type=int, default=100_000)
    parser.add_argument("--skip-consolidation", action="store_true")
    parser.add_argument("--skip-decay", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="1 conversation, 3 sessions, hash embedder, 2,000 decay rows",
    )
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args(argv)
    if args.smoke:
        args.conversations, args.max_sessions, args.embedder = 1, 3, "hash"
        args.decay_rows, args.no_save = 2000, True
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "argv": " ".join(sys.argv[1:] if argv is None else argv),
        "load": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory(prefix="memcli-lifecycle-") as tmp:
        cons = None if args.skip_consolidation else bench_consolidation(args, Path(tmp))
        decay = None if args.skip_decay else bench_decay(args, Path(tmp))
    text = render(meta, cons, decay)
    print(text)
    if not args.no_save:
        # One file per configuration: lifecycle-e5-small.md, lifecycle-hash-nosparse.md ...
        name = "decay" if cons is None else args.embedder + ("-nosparse" if args.no_sparse else "")
        out = RESULTS.with_name(f"{RESULTS.name}-{name}")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".md").write_text(text, encoding="utf-8")
        out.with_suffix(".json").write_text(
            json.dumps({"meta": meta, "consolidation": cons, "decay": decay}, indent=1),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
