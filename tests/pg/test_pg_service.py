"""`memcli serve` on a PostgreSQL database: the daemon owns a connection
pool, the CLI routes to it for a URL exactly as for a file, HTTP and MCP answer from it, and
SIGTERM leaves no process, socket or server connection behind. Real processes, a real server.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import psycopg
import pytest

from memcli.service.daemon import paths
from tests.support.daemon import Daemon, daemon_env, last_route, run_client, stop, wait_until

EVENTS = "".join(json.dumps(r) + "\n" for r in [
    {"event_id": "ev-1", "text": "We deploy the billing service on Fridays", "session_id": "s1",
     "user_id": "priya"},
    {"event_id": "ev-2", "text": "Anika arrives by train from Porto", "session_id": "s1",
     "user_id": "priya"},
])


def _connections(url: str) -> int:
    """Connections to the test's database other than this one."""
    with psycopg.connect(url, autocommit=True) as admin:
        sql = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
               " AND pid <> pg_backend_pid()")
        return admin.execute(sql).fetchone()[0]


def _events(url: str) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT event_id, tenant_id, user_id FROM events"
                            " ORDER BY event_id").fetchall()


@pytest.fixture
def served(tmp_path: Path, pg_db: str):  # noqa: F811
    env = daemon_env(tmp_path / "home", pg_db)  # type: ignore[arg-type]
    with Daemon(pg_db, env, "--pool-size", "3") as daemon:  # type: ignore[arg-type]
        yield pg_db, env, daemon


def test_cli_routes_to_the_daemon_for_a_url(served, tmp_path: Path) -> None:
    url, env, daemon = served
    routes = tmp_path / "routes.log"
    wrote = run_client(["ingest", "-"], env, routes=routes, stdin=EVENTS)
    assert wrote.returncode == 0, wrote.stderr
    assert last_route(routes).startswith("daemon")
    assert json.loads(wrote.stdout)["created"] == ["ev-1", "ev-2"]
    again = run_client(["ingest", "-"], env, routes=routes, stdin=EVENTS)
    assert json.loads(again.stdout)["skipped"] == ["ev-1", "ev-2"]  # idempotent, pooled too
    found = run_client(["query", "billing deploy", "--user-id", "priya", "--json"], env,
                       routes=routes)
    assert found.returncode == 0, found.stderr
    assert last_route(routes).startswith("daemon")
    hits = json.loads(found.stdout)
    assert hits and "billing" in hits[0]["text"]
    bundle = run_client(["acb", "build", "--user-id", "priya", "--session-id", "s1", "-q",
                         "when do we deploy?"], env, routes=routes)
    assert bundle.returncode == 0, bundle.stderr
    assert last_route(routes).startswith("daemon")
    assert b"Fridays" in bundle.stdout
    status = run_client(["serve", "status"], env, routes=routes)
    state = json.loads(status.stdout)
    assert state["running"] and state["pool"]["max"] == 3
    assert state["db"] == url  # shown as given (it has no password to mask)
    assert _events(url) == [("ev-1", "default", "priya"), ("ev-2", "default", "priya")]
    assert _connections(url) <= 3  # the pool's bound, whatever the requests did


def test_http_and_mcp_answer_from_the_pool(served) -> None:
    import httpx
    from mcp import Client

    from tests.support.mcp import payload, stdio_params

    url, env, daemon = served
    http_sock = paths.endpoint(url, env).http_socket
    assert wait_until(lambda: Path(http_sock).exists(), timeout=60)
    with httpx.Client(transport=httpx.HTTPTransport(uds=http_sock),
                      base_url="http://localhost", timeout=60) as client:
        made = client.post("/api/v1/events", json={"event_id": "ev-http", "text":
                                                   "The HTTP API writes to PostgreSQL",
                                                   "user_id": "ann"})
        assert made.status_code == 200, made.text
        asked = client.post("/api/v1/query", json={"query": "HTTP API PostgreSQL"})
        assert asked.status_code == 200, asked.text
        assert asked.json()[0]["text"] == "The HTTP API writes to PostgreSQL"

    async def main() -> None:  # `memcli mcp` bridges to the daemon's HTTP socket
        async with Client(stdio_params(env, "--user-id", "ben"), mode="legacy",
                          read_timeout_seconds=120) as client:
            stored = payload(await client.call_tool(
                "memory_record_event", {"text": "Ben asked over MCP", "event_id": "ev-mcp"}))
            assert stored["scope"]["user"] == "ben"

    anyio.run(main)
    assert ("ev-mcp", "default", "ben") in _events(url)
    assert ("ev-http", "default", "ann") in _events(url)


def test_sigterm_leaves_nothing_behind(tmp_path: Path, pg_db: str) -> None:  # noqa: F811
    env = daemon_env(tmp_path / "home", pg_db)  # type: ignore[arg-type]
    routes = tmp_path / "routes.log"
    with Daemon(pg_db, env) as daemon:  # type: ignore[arg-type]
        assert run_client(["ingest", "--text", "kept"], env, routes=routes).returncode == 0
        assert _connections(pg_db) >= 1  # the pool's idle connection
        code, _out, err = stop(daemon.proc)
    assert code == 0, err
    ep = paths.endpoint(pg_db, env)
    for left in (ep.socket, ep.http_socket, ep.pid):
        assert not Path(left).exists(), left
    assert wait_until(lambda: _connections(pg_db) == 0, timeout=10)


def test_serve_on_an_unreachable_server_fails_in_one_line(tmp_path: Path,
                                                          pg_server: str) -> None:  # noqa: F811
    url = pg_server.rsplit("/", 1)[0] + "/memcli_no_such_database"
    env = daemon_env(tmp_path / "home", url)  # type: ignore[arg-type]
    with Daemon(url, env, wait=False) as daemon:  # type: ignore[arg-type]
        assert daemon.proc.wait(timeout=60) == 1
        err = daemon.proc.stderr.read()
    assert err.startswith("memcli: error:") and err.count("\n") == 1, err
    assert not Path(paths.endpoint(url, env).socket).exists()
