"""A model change under a running daemon on PostgreSQL.

`memcli reindex` with an embedder of another dimension alters `memory_vectors.embedding`'s type
(vector(64) -> vector(32)). A server-side prepared statement whose result holds that column,
prepared earlier on a connection the daemon keeps in its pool, then fails for good with
"cached plan must not change result type" (psycopg prepares a statement run 5 times on one
connection). Here the re-index runs in another process, as on another machine, while the
daemon keeps its pooled connection: the daemon's next `rebuild` (which reads the stored vectors
to rewrite only those that differ) must work. Real processes, a real server.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.daemon import Daemon, daemon_env, last_route, run_client

FACT = "I prefer green tea in the morning"


def _daemon(args: list[str], env: dict[str, str], routes: Path) -> dict:
    done = run_client([*args, "--json"], env, routes=routes)
    assert done.returncode == 0, done.stderr
    assert last_route(routes).startswith("daemon")
    return json.loads(done.stdout)


def test_a_reindex_elsewhere_does_not_break_the_daemons_connections(tmp_path: Path,
                                                                     pg_db: str) -> None:  # noqa: F811
    env = daemon_env(tmp_path / "home", pg_db)  # type: ignore[arg-type]
    routes = tmp_path / "routes.log"
    with Daemon(pg_db, env, "--pool-size", "1"):  # type: ignore[arg-type]
        assert _daemon(["remember", FACT, "--user-id", "u1"], env, routes)["status"] == "created"
        # Each rebuild reads the one stored vector with the same statement on the daemon's
        # one connection (psycopg prepares it from the 5th time).
        for _ in range(6):
            _daemon(["rebuild"], env, routes)
        smaller = {**env, "MEMCLI_EMBED_DIMENSION": "32", "MEMCLI_NO_DAEMON": "1"}
        reindexed = run_client(["reindex", "--json"], smaller, routes=routes)
        assert reindexed.returncode == 0, reindexed.stderr
        assert json.loads(reindexed.stdout)["model"] == "test/hash-32"
        after = {**env, "MEMCLI_EMBED_DIMENSION": "32"}
        assert _daemon(["rebuild"], after, routes)
        assert _daemon(["remember", FACT, "--user-id", "u1"], after, routes)["status"] == "merged"
        found = run_client(["query", "green tea", "--user-id", "u1", "--json"], after,
                           routes=routes)
        assert found.returncode == 0, found.stderr
        assert [h["text"] for h in json.loads(found.stdout)] == [FACT]
