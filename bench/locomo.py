"""LoCoMo evidence recall for memcli's retrieval, through the public library API.

    python -m bench.locomo [--embedder e5-small|minilm|hash] [--configs fts,vector,...]
                           [--data PATH] [--rebuild] [--smoke] [--out NAME]

What it measures, how, and the results: bench/README.md, "LoCoMo evidence recall".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.locomo_data import (
    BACKENDS,
    CONFIGS,
    DEFAULT_DATA,
    DRAGON,
    ENGINE_SUFFIX,
    REPO_ROOT,
    RESULTS_DIR,
    TOP_K,
    _cpus,
    config_settings,
    questions,
    sessions,
)
from bench.locomo_db import default_sparse
from bench.locomo_report import (
    git_revision,
    render_markdown,
    render_session_markdown,
    write_result,
)
from bench.locomo_run import measure_engine
from bench.locomo_score import last_sessions, summarise
from memcli.providers.embedders import get_embedder


def command_line(args: argparse.Namespace, embedder_name: str) -> str:
    """The command that reproduces the measurement (a --db URL is not repeated: it may hold a
    password)."""
    line = f"python -m bench.locomo --embedder {embedder_name}"
    if set(args.configs.split(",")) != set(CONFIGS):
        line += f" --configs {args.configs}"
    if args.out:
        line += f" --out {args.out}"
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
        from bench import locomo_pg

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
        from bench import locomo_pg

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
        out = RESULTS_DIR / (args.out or f"locomo-{embedder_name}{ENGINE_SUFFIX[engine]}")
        if session_results:
            session_out = out.with_name(f"{out.name}-session")
            write_result(session_out, session_markdown, meta, session_results)
        if complete or args.out:
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
        "--out",
        metavar="NAME",
        help="write the results to bench/results/NAME.{md,json}, also for a subset of --configs"
        " (a before/after pair of one configuration); default locomo-<embedder>, full runs only",
    )
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
