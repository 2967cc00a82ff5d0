"""Encoding speed by text length: each model alone, and `memcli embed` end to end.

    python -m bench.encode_speed [--texts 476] [--rounds 2] [--baseline [LABEL=]DIR ...]

What it measures, how, and the results: bench/README.md, "Encoding speed by text length".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LENGTHS = (50, 200, 1000)
MODELS = ("e5-small engine", "e5-small onnxruntime", "splade-tiny")
WORDS = (
    "agent memory user prefers dark mode project deadline meeting notes database migration "
    "python script error retry cache token budget summary session context search vector query "
    "result ranking recall weekly report travel paris coffee morning review release bug fix "
    "customer invoice payment schedule team lunch friday deploy server config backup restore"
).split()


def texts_for(chars: int, n: int, seed: int = 7) -> list[str]:
    """`n` texts of `chars` characters (a quarter as many of 1,000), each opening with its own
    item number so no two are equal."""
    rng = random.Random(seed)
    texts = []
    for i in range(n if chars < 1000 else max(n // 4, 1)):
        words = [f"item{i}"]
        while sum(len(w) + 1 for w in words) < chars:
            words.append(rng.choice(WORDS))
        texts.append(" ".join(words)[:chars])
    return texts


def child(model: str, chars: int, n: int) -> None:
    """Runs in a fresh interpreter: one model on one length; prints texts/s."""
    from memcli.config import thread_defaults

    thread_defaults()
    texts = texts_for(chars, n)
    if model == "splade-tiny":
        from memcli.providers.splade import SpladeEncoder

        encoder = SpladeEncoder()
        encoder.encode_documents(texts[:4])
        start = time.perf_counter()
        encoder.encode_documents(texts)
    else:
        from memcli.providers.embedders import E5SmallEmbedder

        runtime = "engine" if model.endswith("engine") else "onnx"
        embedder = E5SmallEmbedder(runtime=runtime)
        embedder.embed_documents(texts[:4])
        start = time.perf_counter()
        embedder.embed_documents(texts)
    print(json.dumps(len(texts) / (time.perf_counter() - start)))


def run(args: list[str], env: dict[str, str], cwd: Path = REPO) -> str:
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


def make_db(path: Path, texts: list[str], env: dict[str, str]) -> None:
    records = [{"user_id": "u1", "session_id": f"s{i // 20}", "content": {"text": text}}
               for i, text in enumerate(texts)]
    source = path.with_suffix(".jsonl")
    source.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    run([sys.executable, "-m", "memcli", "ingest", "--db", str(path), "--defer-embed",
         str(source), "--json"], env)


def embed_rate(checkout: Path, db: Path, count: int, env: dict[str, str]) -> float:
    """texts/s of a whole `memcli embed` run from `checkout` on a fresh copy of `db`."""
    work = db.with_name("work-" + db.name)
    shutil.copyfile(db, work)
    start = time.perf_counter()
    out = run([sys.executable, "-m", "memcli", "embed", "--db", str(work), "--json"],
        {**env, "PYTHONPATH": str(checkout)}, cwd=checkout)
    rate = count / (time.perf_counter() - start)
    work.unlink()
    if json.loads(out)["embedded"] != count:
        raise SystemExit(f"memcli embed from {checkout} embedded {out.strip()}, not {count}")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=476)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", action="append", default=[],
                        help="[LABEL=]DIR: an older checkout to run `memcli embed` from")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]))
        return

    results: dict[tuple[str, int], list[float]] = {}
    reference: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        # onnxruntime writes under ~/.cache; the config file must not be the user's.
        env = {**os.environ, "HOME": tmp, "MEMCLI_CONFIG": str(Path(tmp) / "none.yaml"),
               "PYTHONPATH": str(REPO)}
        dbs = {}
        for chars in LENGTHS:
            dbs[chars] = Path(tmp) / f"turns-{chars}.db"
            make_db(dbs[chars], texts_for(chars, args.texts), env)
        checkouts = [("memcli embed", REPO)]
        for given in args.baseline:
            label, _, folder = given.rpartition("=")
            checkouts.insert(-1, (f"memcli embed ({label or 'baseline'})",
                                  Path(folder).resolve()))
        for _ in range(args.rounds):
            for chars in LENGTHS:
                count = len(texts_for(chars, args.texts))
                for model in MODELS:
                    out = run([sys.executable, "-m", "bench.encode_speed", "--child", model,
                               str(chars), str(args.texts)], env)
                    results.setdefault((model, chars), []).append(float(out))
                for label, checkout in checkouts:
                    rate = embed_rate(checkout, dbs[chars], count, env)
                    results.setdefault((label, chars), []).append(rate)
                start = time.perf_counter()
                run([sys.executable, "-c", "pass"], env)
                reference.append((time.perf_counter() - start) * 1000)

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average now {load}; "
          f"{args.rounds} rounds, median texts/s (min-max)")
    print(f"`python -c pass` in the same rounds: median {statistics.median(reference):.0f} ms "
          f"({min(reference):.0f}-{max(reference):.0f})")
    print()
    print("| encoder | " + " | ".join(f"{c} chars" for c in LENGTHS) + " |")
    print("|---|" + "---:|" * len(LENGTHS))
    labels = list(dict.fromkeys(label for label, _ in results))
    for label in labels:
        cells = []
        for chars in LENGTHS:
            rates = results[(label, chars)]
            cells.append(f"{statistics.median(rates):.1f} ({min(rates):.1f}-{max(rates):.1f})")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
