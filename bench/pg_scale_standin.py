"""A stand-in for perf's 100k database as bench/pg_scale.py's `--source` with `--bulk-base 10000`
(perf's database takes about an hour to build here: its dense vectors are really embedded).

    python -m bench.pg_scale_standin /tmp/source.db [--locomo bench/.cache/locomo-e5-small.db]
    python -m bench.pg_scale --events 1000000 --bulk-base 10000 --source /tmp/source.db ...

It holds what pg_scale reads from the source for the base's 10,000 texts (the first texts of
perf's corpus): the meta rows naming the models, each text's real SPLADE weights
(bench/pg_sparse_corpus.py) and a real e5-small document vector taken from the LoCoMo database
(bench/.cache/locomo-e5-small.db, from bench/locomo.py), cyclically: real vectors of other
texts, not these texts' own. The sparse leg sees the corpus's own weights; the dense leg walks a
real but different vector set. Results made with it say so.
"""

from __future__ import annotations

from pathlib import Path

from bench import pg_sparse_corpus

BENCH = Path(__file__).resolve().parent

LOCOMO = BENCH / ".cache" / "locomo-e5-small.db"


def build(out_path: Path, locomo: Path = LOCOMO) -> None:
    import apsw

    from memcli.config import EmbedderSettings, Settings
    from memcli.operations.memory import make_embedder, make_sparse

    rows, weights = pg_sparse_corpus.corpus(pg_sparse_corpus.BASE)
    src = apsw.Connection(f"file:{locomo}?mode=ro&immutable=1",
                          flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    vectors = [b for (b,) in src.execute("SELECT embedding FROM memory_vectors ORDER BY memory_id")]
    model = src.execute("SELECT value FROM meta WHERE key = 'embedder_model'").fetchone()[0]
    src.close()
    settings = Settings(db="unused.db", embedder=EmbedderSettings(provider="e5-small"))
    embedder, sparse = make_embedder(settings), make_sparse(settings)
    if model != embedder.model_id:
        raise SystemExit(f"{locomo} holds {model} vectors, the default model is"
                         f" {embedder.model_id}")
    out = apsw.Connection(str(out_path))
    out.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
                "CREATE TABLE memories (id INTEGER PRIMARY KEY, content TEXT);"
                "CREATE TABLE memory_vectors (memory_id INTEGER PRIMARY KEY, embedding BLOB);"
                "CREATE TABLE sparse_postings (term_id INTEGER, memory_id INTEGER,"
                " weight INTEGER)")
    with out:
        out.executemany("INSERT INTO meta VALUES (?, ?)", [
            ("embedder_model", embedder.model_id),
            ("embedder_dimension", str(embedder.dimension)),
            ("sparse_model", sparse.model_id), ("sparse_vocab", sparse.vocab_hash)])
        out.executemany("INSERT INTO memories VALUES (?, ?)", [(m, c) for m, c, *_ in rows])
        out.executemany("INSERT INTO memory_vectors VALUES (?, ?)",
                        [(m, vectors[(m - 1) % len(vectors)]) for m, *_ in rows])
        out.executemany("INSERT INTO sparse_postings VALUES (?, ?, ?)",
                        [(t, m, w) for m, ws in weights.items() for t, w in ws.items()])
    out.close()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the new SQLite file")
    parser.add_argument("--locomo", type=Path, default=LOCOMO,
                        help="a LoCoMo database with e5-small vectors (bench/locomo.py)")
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"{args.out} exists")
    build(args.out, args.locomo)
