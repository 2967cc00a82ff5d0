"""One HTTP socket for every database: the header `X-Memcli-Db` picks the database of each
request (memcli/service/daemon/databases.py), served here by uvicorn on a unix socket in a
thread, as the daemon's HTTP process serves it. Over HTTP and the official MCP client, two
databases never see each other's rows; a bad header is a 4xx with one line; a per-database
server refuses another database (421); a closed database's WAL is checkpointed."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memcli.config import load_settings
from memcli.service.api import Binding
from memcli.service.daemon.databases import Databases
from memcli.service.http.auth import load_auth
from memcli.service.http.fastapi_app import build_app
from memcli.service.mcp_server import build_mcp, tool_schemas
from memcli.service.mcp_tools import TOOLS
from tests.support.backend import write_lock_held
from tests.support.http_api import NO_SPARSE, serving
from tests.support.mcp import payload
from tests.support.pg_db import scratch_database, with_database
from tests.support.sockets import short_tempdir


@pytest.fixture
def folder(monkeypatch) -> Iterator[Path]:
    """A short folder (unix socket paths), with the config of the tests: hash embedder, no
    SPLADE leg."""
    with tempfile.TemporaryDirectory(dir=short_tempdir()) as name:
        where = Path(name)
        (where / "config.yaml").write_text(NO_SPARSE, encoding="utf-8")
        monkeypatch.setenv("MEMCLI_CONFIG", str(where / "config.yaml"))
        monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
        yield where


def _databases(
    default: Path,
    *,
    all_databases: bool = True,
    idle_close: float | None = None,
    lines: list[bytes] | None = None,
) -> Databases:
    settings = load_settings(default)
    auth = load_auth(host="127.0.0.1", port=None, token_file=None, no_token=True, settings=settings)
    return Databases(
        settings,
        lambda s, _default: build_app(s, auth),
        all_databases=all_databases,
        idle_close=idle_close or 0,
        report=(lines if lines is not None else []).append,
    )


@contextlib.contextmanager
def _served(databases: Databases, sock: Path) -> Iterator[httpx.Client]:
    try:
        with (
            serving(databases, uds=sock),
            httpx.Client(
                transport=httpx.HTTPTransport(uds=str(sock)),
                base_url="http://localhost",
                timeout=60,
            ) as client,
        ):
            yield client
    finally:
        databases.close_all()


def _remember(client: httpx.Client, db: Path | None, text: str) -> None:
    headers = {"X-Memcli-Db": str(db)} if db is not None else {}
    answer = client.post("/api/v1/memories", json={"text": text}, headers=headers)
    assert answer.status_code == 200, answer.text


def _texts(client: httpx.Client, db: Path | None, query: str) -> list[str]:
    headers = {"X-Memcli-Db": str(db)} if db is not None else {}
    answer = client.post("/api/v1/query", json={"query": query, "top_k": 20}, headers=headers)
    assert answer.status_code == 200, answer.text
    return sorted(hit["text"] for hit in answer.json())


def test_two_databases_through_one_socket_never_see_each_others_rows(folder) -> None:
    a, b, default = folder / "a.db", folder / "b" / "b.db", folder / "default.db"
    b.parent.mkdir()
    with _served(_databases(default), folder / "http.sock") as client:
        _remember(client, a, "the orchard in Porto grows lemons")
        _remember(client, b, "the orchard in Lyon grows apples")
        _remember(client, None, "the orchard at home grows figs")
        assert _texts(client, a, "orchard") == ["the orchard in Porto grows lemons"]
        assert _texts(client, b, "orchard") == ["the orchard in Lyon grows apples"]
        assert _texts(client, None, "orchard") == ["the orchard at home grows figs"]
        # A link to a database is that database (its real path is what counts).
        link = folder / "link.db"
        link.symlink_to(a)
        assert _texts(client, link, "orchard") == ["the orchard in Porto grows lemons"]
        # The pages too: each database's timeline shows its own memories only.
        page = client.get("/ui/", headers={"X-Memcli-Db": str(b)})
        assert page.status_code == 200
        assert "Lyon" in page.text and "Porto" not in page.text and "home" not in page.text
    assert {p.name for p in folder.iterdir()} >= {"a.db", "default.db"}


def test_mcp_calls_stay_with_the_database_their_header_names(folder) -> None:
    a, b = folder / "a.db", folder / "b.db"

    def client(sock: Path, db: Path) -> Client:
        http = httpx2.AsyncClient(
            transport=httpx2.AsyncHTTPTransport(uds=str(sock)),
            headers={"X-Memcli-Db": str(db)},
            timeout=60,
        )
        return Client(
            streamable_http_client("http://localhost/mcp", http_client=http), mode="legacy"
        )

    async def main(sock: Path) -> tuple[list[str], list[str]]:
        async with client(sock, a) as to_a, client(sock, b) as to_b:
            payload(await to_a.call_tool("memory_remember", {"text": "Ana flies to Oslo"}))
            payload(await to_b.call_tool("memory_remember", {"text": "Ben flies to Rome"}))
            seen = []
            for session in (to_a, to_b):
                found = payload(await session.call_tool("memory_query", {"query": "flies"}))
                seen.append(sorted(hit["text"] for hit in found["result"]))
            return seen[0], seen[1]

    with _served(_databases(folder / "default.db"), folder / "http.sock"):
        in_a, in_b = anyio.run(main, folder / "http.sock")
    assert in_a == ["Ana flies to Oslo"]
    assert in_b == ["Ben flies to Rome"]


@pytest.mark.parametrize(
    ("header", "status", "says"),
    [
        (b"relative/memory.db", 400, "absolute path"),
        (b"", 400, "empty"),
        (b"https://example.com/memory.db", 400, "URL"),
        (b"{folder}/no/such/folder/memory.db", 404, "no folder"),
        (b"{folder}", 404, "cannot open"),  # a folder is no database
        (b"{folder}/notes.txt", 404, "cannot open"),  # nor is a text file
    ],
)
def test_a_header_that_names_no_usable_database_is_a_4xx_with_one_line(
    folder, header, status, says
) -> None:
    (folder / "notes.txt").write_text("not a database\n" * 100, encoding="utf-8")
    named = header.replace(b"{folder}", os.fsencode(folder))
    with _served(_databases(folder / "default.db"), folder / "http.sock") as client:
        answer = client.post(
            "/api/v1/query", json={"query": "x"}, headers=[(b"X-Memcli-Db", named)]
        )
        assert answer.status_code == status, answer.text
        body = answer.json()
        assert says in body["error"] and "\n" not in body["error"]
        assert body["exit_code"] == 2
        # Two headers at once: which one? Neither.
        twice = client.post(
            "/api/v1/query",
            json={"query": "x"},
            headers=[(b"X-Memcli-Db", os.fsencode(folder / "a.db"))] * 2,
        )
        assert twice.status_code == 400
        # The server serves on.
        assert client.get("/healthz").status_code == 200


def test_a_nul_byte_in_the_header_is_refused_not_a_500(folder) -> None:
    # HTTP/1.1 servers refuse a NUL in a header before the app sees it; another server (or
    # ASGI in-process) may pass it on: the app refuses it itself.
    databases = _databases(folder / "default.db")

    async def main() -> httpx.Response:
        async with (
            databases.running(),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(databases), base_url="http://localhost"
            ) as c,
        ):
            return await c.post(
                "/api/v1/query", json={"query": "x"}, headers=[(b"X-Memcli-Db", b"/tmp/a\x00b.db")]
            )

    try:
        answer = anyio.run(main)
    finally:
        databases.close_all()
    assert answer.status_code == 400
    assert "NUL" in answer.json()["error"]


def test_a_per_database_server_refuses_another_database_with_421(folder) -> None:
    own, other = folder / "own.db", folder / "other.db"
    databases = _databases(own, all_databases=False)
    with _served(databases, folder / "http.sock") as client:
        _remember(client, own, "kept here")  # naming its own database is fine
        refused = client.post(
            "/api/v1/query", json={"query": "kept"}, headers={"X-Memcli-Db": str(other)}
        )
        assert refused.status_code == 421
        assert "serves" in refused.json()["error"] and str(own) in refused.json()["error"]
        # Closing is the user's daemon's: a per-database server keeps its one database.
        databases.close(str(own))
        assert _texts(client, None, "kept") == ["kept here"]
    assert not other.exists()


def test_a_tcp_port_of_the_users_daemon_serves_its_default_database_only(folder) -> None:
    databases = _databases(folder / "default.db")
    try:
        with serving(databases) as url, httpx.Client(base_url=url, timeout=60) as client:
            answer = client.post(
                "/api/v1/query",
                json={"query": "x"},
                headers={"X-Memcli-Db": str(folder / "other.db")},
            )
            assert answer.status_code == 421
            assert client.post("/api/v1/query", json={"query": "x"}).status_code == 200
    finally:
        databases.close_all()
    assert not (folder / "other.db").exists()


def _server_connections(url: str) -> int:
    """Connections to the database of `url`, but for the one asking."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        sql = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        )
        return admin.execute(sql).fetchone()[0]


def _wal(db: Path) -> int:
    wal = Path(f"{db}-wal")
    return wal.stat().st_size if wal.exists() else 0


def _wait(done: threading.Event | None, what: str) -> None:
    assert done is not None and done.wait(30), what


def test_closing_a_database_checkpoints_its_wal_and_it_opens_again_on_use(folder) -> None:
    a = folder / "a.db"
    lines: list[bytes] = []
    databases = _databases(folder / "default.db", lines=lines)
    with _served(databases, folder / "http.sock") as client:
        _remember(client, a, "written before the close")
        assert _wal(a) > 0  # the holder keeps the WAL while the database is open
        served = databases.held(str(a))
        closer = threading.Thread(target=databases.close, args=(str(a),))  # the control thread
        closer.start()
        closer.join()
        _wait(served.closed, "the database was not closed")
        assert _wal(a) == 0
        assert b"C" + os.fsencode(a) in lines
        assert str(a) not in databases.open_locations()
        # The next request opens it again, its rows all there.
        assert _texts(client, a, "close") == ["written before the close"]
        assert str(a) in databases.open_locations()


def test_a_close_waits_for_the_requests_in_flight(folder, monkeypatch) -> None:
    monkeypatch.setenv("MEMCLI_BUSY_TIMEOUT", "60")
    a = folder / "a.db"
    databases = _databases(folder / "default.db")
    sock = folder / "http.sock"
    with _served(databases, sock) as client:
        _remember(client, a, "one")
        served = databases.held(str(a))
        with write_lock_held(a):  # another process's write: the next one waits for it

            def write() -> None:
                with httpx.Client(
                    transport=httpx.HTTPTransport(uds=str(sock)),
                    base_url="http://localhost",
                    timeout=60,
                ) as other:
                    _remember(other, a, "two")

            writer = threading.Thread(target=write)
            writer.start()
            deadline = time.monotonic() + 30
            while served.running == 0:
                assert time.monotonic() < deadline, "the write never reached the server"
                time.sleep(0.01)
            databases.close(str(a))
            assert not served.closed.wait(0.3)  # the write waits: the database stays open
        writer.join(60)
        _wait(served.closed, "the close did not follow the last request")
        assert _wal(a) == 0
        assert _texts(client, a, "one two") == ["one", "two"]


def test_a_database_nothing_used_for_a_while_is_closed(folder) -> None:
    a = folder / "a.db"
    lines: list[bytes] = []
    databases = _databases(folder / "default.db", idle_close=0.2, lines=lines)
    with _served(databases, folder / "http.sock") as client:
        _remember(client, a, "soon idle")
        served = databases.held(str(a))
        _wait(served.closed, "an unused database stayed open")
        assert _wal(a) == 0
        assert b"C" + os.fsencode(a) in lines
        deadline = time.monotonic() + 30
        while str(folder / "default.db") in databases.open_locations():
            assert time.monotonic() < deadline, "the unused default database stayed open"
            time.sleep(0.05)
        assert _texts(client, a, "idle") == ["soon idle"]


def test_postgresql_databases_each_get_their_own_pool(folder, pg_server) -> None:
    with scratch_database(pg_server) as one, scratch_database(pg_server) as two:
        first, second = with_database(pg_server, one), with_database(pg_server, two)
        databases = _databases(folder / "default.db")
        with _served(databases, folder / "http.sock") as client:
            for url, text in ((first, "Pia sails to Malta"), (second, "Raul sails to Crete")):
                made = client.post(
                    "/api/v1/memories", json={"text": text}, headers={"X-Memcli-Db": url}
                )
                assert made.status_code == 200, made.text
            for url, text in ((first, "Pia sails to Malta"), (second, "Raul sails to Crete")):
                found = client.post(
                    "/api/v1/query", json={"query": "sails"}, headers={"X-Memcli-Db": url}
                )
                assert [hit["text"] for hit in found.json()] == [text]
            assert _texts(client, None, "sails") == []
            assert databases.stats()["open"] >= 2  # a pool per server database
            # `postgres://` is the same database as `postgresql://`: no third pool.
            same = "postgres://" + first.split("://", 1)[1]
            assert databases.held(same) is databases.held(first)
            served = databases.held(first)
            databases.close(first)
            _wait(served.closed, "the pool was not closed")
            assert _server_connections(first) == 0


def test_every_databases_mcp_server_shares_the_tool_schemas_made_once(folder) -> None:
    # 26 JSON schemas, most of an app's build: made once per process, not once per database.
    built = [
        build_mcp(load_settings(folder / f"{name}.db"), Binding(), selectable=True)
        for name in ("a", "b")
    ]
    made = tool_schemas.cache_info().misses
    build_mcp(load_settings(folder / "c.db"), Binding(), selectable=True)
    assert tool_schemas.cache_info().misses == made
    assert made >= len(TOOLS) and len(built) == 2
