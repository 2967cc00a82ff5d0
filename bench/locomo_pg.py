"""bench/locomo.py on PostgreSQL: the database, and SQLite beside PostgreSQL.

`python -m bench.locomo --backend both` ingests LoCoMo through memcli's own `Memory.ingest` into
a PostgreSQL database (a fresh one on a throw-away server from tests/support/pg.py, or
`--db URL`) and asks every question through `Memory.query` there, as it does on the SQLite
file: same models, same settings, same legs and fusion; only the engine under the store
differs. This module holds what only that needs: the database, the comparison of the two
engines' runs (recall differences, how many questions got the same top 10) and its report.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.locomo_data import BUDGETS, KS
from bench.locomo_report import _metric_heads
from bench.locomo_score import summarise

DATABASE = "memcli_locomo"
TARGET = 1.0  # the bound: PostgreSQL within 1 point of SQLite at every k
PASSWORD = re.compile(r"(//[^:@/]*:)[^@/]*@")


def shown(url: str) -> str:
    """The URL without its password, for a log line."""
    return PASSWORD.sub(r"\1***@", url)


@contextlib.contextmanager
def postgres_database(url: str | None) -> Iterator[str]:
    """The URL to ingest into: `url` as given (an empty database the caller made), or a fresh
    database on a throw-away PostgreSQL 18 that is stopped and removed on the way out."""
    from memcli.core.locations import is_postgres

    if url:
        if not is_postgres(url):
            raise SystemExit(f"--db {shown(url)}: not a postgresql:// URL")
        yield url
        return
    from bench.pg_bench_support import PgUnavailable, scratch_database

    try:
        with scratch_database(DATABASE) as (_, scratch_url):
            yield scratch_url
    except PgUnavailable as exc:  # the server could not start here (one line, no traceback)
        raise SystemExit(f"PostgreSQL: {exc}") from None


class Memo:
    """A model (embedder or SPLADE encoder) whose answers are kept by text, so that the second
    engine of a `--backend both` run is handed exactly the vectors the first one got, without
    computing them again (the models are most of the CPU time, and the same on both engines).
    Documents are looked up one by one and only the missing ones computed, in one batch; every
    other attribute (`model_id`, `dimension`, ...) is the model's own."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self._kept: dict[tuple[str, str], Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def _one(self, method: str, text: str) -> Any:
        key = (method, text)
        if key not in self._kept:
            self._kept[key] = getattr(self._model, method)(text)
        return self._kept[key]

    def _many(self, method: str, texts: Any) -> Any:
        missing = list(dict.fromkeys(t for t in texts if (method, t) not in self._kept))
        if missing:
            for text, out in zip(missing, getattr(self._model, method)(missing), strict=True):
                self._kept[(method, text)] = out
        got = [self._kept[(method, t)] for t in texts]
        if method == "embed_documents":
            import numpy as np

            return np.stack(got) if got else self._model.embed_documents([])
        return got

    def embed_query(self, text: str) -> Any:
        return self._one("embed_query", text)

    def encode_query(self, text: str) -> Any:
        return self._one("encode_query", text)

    def embed_documents(self, texts: Any) -> Any:
        return self._many("embed_documents", texts)

    def encode_documents(self, texts: Any) -> Any:
        return self._many("encode_documents", texts)


class MemoEmbedder(Memo):
    """(A class of its own: memcli runs each query-side model class on its own thread.)"""


class MemoSparse(Memo):
    pass


# --------------------------------------------------------------------------- comparison


def overlap(a: list[Any], b: list[Any], k: int) -> float:
    top = a[:k]
    return len(set(top) & set(b[:k])) / len(top) if top else 1.0


def compare_runs(lite: dict[str, Any], pg: dict[str, Any]) -> dict[str, Any]:
    """One configuration on both engines: their summaries, PostgreSQL minus SQLite, and how
    alike the rankings are question by question."""
    a, b = summarise(lite), summarise(pg)
    pairs = list(zip(lite["rows"], pg["rows"], strict=True))
    diff = {m: round(b["overall"][m] - a["overall"][m], 1) for m in a["overall"]}
    by_category = {
        cat: {m: round(b["by_category"][cat][m] - v, 1) for m, v in entry.items() if m != "n"}
        for cat, entry in a["by_category"].items()
    }
    rks = [f"r@{k}" for k in KS]
    return {
        "sqlite": a,
        "postgresql": b,
        "diff": diff,
        "diff_by_category": by_category,
        "max_abs_diff_rk": max(abs(diff[m]) for m in rks),
        "max_abs_diff_rk_by_category": max(abs(d[m]) for d in by_category.values() for m in rks),
        "same_top10": round(sum(x["ranked"][:10] == y["ranked"][:10] for x, y in pairs)
                            / len(pairs), 3),
        "same_top50": round(sum(x["ranked"] == y["ranked"] for x, y in pairs) / len(pairs), 3),
        "mean_overlap10": round(sum(overlap(x["ranked"], y["ranked"], 10) for x, y in pairs)
                                / len(pairs), 3),
    }


def compare(lite: dict[str, Any], pg: dict[str, Any]) -> dict[str, Any]:
    """Both engines' measurements (locomo_run's `measure` + ingest), config by config."""
    configs = {name: compare_runs(run, pg["runs"][name]) for name, run in lite["runs"].items()}
    session = {name: compare_runs(run, pg["session"][name])
               for name, run in lite["session"].items()}
    every = [*configs.values(), *session.values()]
    return {
        "target_points": TARGET,
        "max_abs_diff_rk": max(c["max_abs_diff_rk"] for c in every),
        "within_target": all(c["max_abs_diff_rk"] <= TARGET for c in every),
        "ingest": {engine: {k: m["ingest"].get(k) for k in
                            ("turns", "memories", "rejected", "ingest_s", "ingest_cpu_s",
                             "load_avg_1m", "cached")}
                   for engine, m in (("sqlite", lite), ("postgresql", pg))},
        "load_avg_queries": {"sqlite": lite["load_avg_queries"],
                             "postgresql": pg["load_avg_queries"]},
        "configs": configs,
        "session": session,
    }


def check_smoke(comparison: dict[str, Any]) -> None:
    """--smoke --backend both: the engines answered every question, identically ranked but for
    a few (a 3-session conversation: one question is several points)."""
    for name, c in {**comparison["configs"], **comparison["session"]}.items():
        assert c["mean_overlap10"] >= 0.9, f"smoke: {name} top 10 differ between engines: {c}"


# --------------------------------------------------------------------------- report


def _cells(res: dict[str, Any], diff: dict[str, float] | None) -> list[str]:
    metrics = [f"r@{k}" for k in KS] + [f"b{b}" for b in BUDGETS]
    return [f"{res[m]:.1f}" + (f" ({diff[m]:+.1f})" if diff is not None else "") for m in metrics]


def _table(rows: dict[str, Any], label: str) -> list[str]:
    lines = [
        f"| {label} | engine | {_metric_heads()} | same top 10 | overlap@10 | query ms"
        " p50 / p95 |",
        "|---" * (len(KS) + len(BUDGETS) + 6) + "|",
    ]
    for name, c in rows.items():
        for engine, diff in (("SQLite", None), ("PostgreSQL", c["diff"])):
            res = c[engine.lower()]
            lat = res["latency_ms"]
            agree = ["", ""] if diff is None else [f"{100 * c['same_top10']:.0f}%",
                                                    f"{100 * c['mean_overlap10']:.1f}%"]
            lines.append(f"| {name if diff is None else ''} | {engine} | "
                         + " | ".join([*_cells(res["overall"], diff), *agree,
                                       f"{lat['p50']:.0f} / {lat['p95']:.0f}"]) + " |")
    return lines


def render_comparison(meta: dict[str, Any], comparison: dict[str, Any]) -> str:
    ing = comparison["ingest"]
    lite, pg = ing["sqlite"], ing["postgresql"]
    verdict = ("within" if comparison["within_target"] else "NOT within")
    lines = [
        "# LoCoMo through memcli's PostgreSQL backend beside SQLite",
        "",
        f"Measured {meta.get('date', '')} with `{meta.get('command', 'bench/locomo.py')}`"
        f" (memcli {meta['revision']}; {meta.get('machine', '')}). Both engines ingest the"
        " same turns through `Memory.ingest` and answer every question through `Memory.query`"
        " with the same models and settings; only the store differs. PostgreSQL 18.6"
        " (pgvector 0.8.6) is a throw-away server on this machine.",
        f"Ingest: SQLite {lite['ingest_s']} s wall / {lite['ingest_cpu_s']} s CPU of this"
        f" process (load {lite['load_avg_1m']}{', cached build' if lite['cached'] else ''});"
        f" PostgreSQL {pg['ingest_s']} s wall / {pg['ingest_cpu_s']} s CPU of this process, the"
        f" server's own CPU not counted (load {pg['load_avg_1m']}). Load at the end of the"
        f" queries: SQLite {comparison['load_avg_queries']['sqlite']}, PostgreSQL"
        f" {comparison['load_avg_queries']['postgresql']}.",
        "",
        f"Largest R@k difference (PostgreSQL minus SQLite, overall): "
        f"**{comparison['max_abs_diff_rk']:.1f} points**, {verdict} the bound of"
        f" {comparison['target_points']:.0f} point. Recall in %, difference to SQLite in"
        " brackets; `same top 10`: questions whose 10 first hits are the same turns in the same"
        " order on both engines; `overlap@10`: mean share of SQLite's top 10 also in"
        " PostgreSQL's.",
        "",
        *_table(comparison["configs"], "config"),
        "",
        f"## By category ({' / '.join(f'R@{k}' for k in KS)}, PostgreSQL minus SQLite)",
        "",
    ]
    first = next(iter(comparison["configs"].values()))
    cats = first["sqlite"]["by_category"]
    lines.append("| config | " + " | ".join(f"{c} (n={v['n']})" for c, v in cats.items())
                 + " | largest |")
    lines.append("|---" * (len(cats) + 2) + "|")
    for name, c in comparison["configs"].items():
        cells = [" / ".join(f"{d[f'r@{k}']:+.1f}" for k in KS)
                 for d in c["diff_by_category"].values()]
        lines.append(f"| {name} | " + " | ".join(cells)
                     + f" | {c['max_abs_diff_rk_by_category']:.1f} |")
    if comparison["session"]:
        lines += ["", "## Session-scoped questions (as locomo-<embedder>-session.md)", "",
                  *_table(comparison["session"], "config / rule")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover - a library module of bench/locomo.py
    print(Path(__file__).name, "is used by bench/locomo.py --backend postgresql|both")
