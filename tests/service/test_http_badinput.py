"""Bad input and a hostile environment over HTTP and MCP: ids beyond 64 bits, a full disk, a
write-protected database, bodies over the size limit. Each is a named 4xx/5xx with the CLI's
one-line message, never "a bug in memcli" nor a traceback in the log."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import socket
import subprocess
from pathlib import Path

import anyio
import pytest

from memcli.service.http.limits import MAX_BODY_BYTES
from tests.cli.test_badinput import _mount, protected  # noqa: F401 - a fixture
from tests.support.http_api import OPERATOR, Api, running_api
from tests.support.mcp import error_text, http_client, payload

HUGE = 99999999999999999999999  # beyond 64 bits: no row can have it


@pytest.fixture
def server(tmp_path, monkeypatch):
    with running_api(tmp_path, monkeypatch) as api:
        yield api


def _no_bug(response) -> None:
    assert "a bug in memcli" not in response.text and "Traceback" not in response.text


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", f"/api/v1/memories/{HUGE}/history", None),
    ("DELETE", f"/api/v1/memories/{HUGE}", None),
    ("DELETE", f"/apps/a1/memories/{HUGE}", None),
    ("POST", "/api/v1/tasks", {"task_id": HUGE, "status": "done"}),
    ("POST", "/api/v1/decisions", {"decision": "use tabs", "supersedes": HUGE}),
    ("GET", f"/api/v1/memories/1/history?limit={HUGE}", None),
])
def test_an_id_beyond_64_bits_is_422(server, method, path, body):
    with server.client() as c:
        r = c.request(method, path, json=body)
    assert r.status_code == 422, r.text
    _no_bug(r)
    assert r.json()["exit_code"] == 2


def test_mcp_tools_refuse_an_id_beyond_64_bits(server):
    calls = [("memory_forget", {"memory_id": HUGE}),
             ("memory_history", {"memory_id": HUGE}),
             ("memory_update_task", {"task_id": HUGE, "status": "done"}),
             ("memory_record_decision", {"decision": "x", "supersedes": HUGE})]

    async def main(url):
        headers = {"Authorization": f"Bearer {OPERATOR}", "X-Memcli-Tools": "all"}
        async with http_client(url, headers) as client:
            for name, arguments in calls:
                text = error_text(await client.call_tool(name, arguments))
                assert "a bug in memcli" not in text and "int too big" not in text, text
                assert "9223372036854775807" in text, text  # says what an id may be

    anyio.run(main, server.url + "/mcp")


def test_the_largest_id_is_not_found(server):
    with server.client() as c:
        for r in (c.get(f"/api/v1/memories/{2**63 - 1}/history"),
                  c.post("/api/v1/tasks", json={"task_id": 2**63 - 1, "status": "done"})):
            assert r.status_code == 404, r.text
            assert json.loads(r.text)["exit_code"] == 1


# -- a full disk -------------------------------------------------------------------------------
def _fill(folder: Path) -> None:
    """Take every free byte of the file system holding `folder`."""
    with open(folder / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    with contextlib.suppress(OSError), open(folder / "filler2", "wb") as f:
        while True:  # the last partial block
            f.write(b"\0" * 512)
            f.flush()


def test_a_full_disk_is_507_with_the_clis_message(tmp_path, monkeypatch, caplog):
    """A real full file system (a 2 MB tmpfs: root only, as CI runs): every write route answers
    507 naming the file, as the CLI names it, with no traceback in the log."""
    folder = tmp_path / "small"
    if os.geteuid() != 0 or not _mount(folder):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        with running_api(folder, monkeypatch) as api, api.client() as c:
            assert c.post("/api/v1/memories", json={"text": "kiwi pie"}).status_code == 200
            _fill(folder)
            message = f"disk full: cannot write {folder}/memory.db (free some space and retry)"
            writes = [("/api/v1/memories", lambda i: {"text": f"fig tart number {i}"}),
                      ("/api/v1/events", lambda i: {"session_id": "s1",
                                                    "content": {"text": f"{i} " + "y" * 9000}}),
                      ("/api/v1/tasks", lambda i: {"title": f"task {i}", "details": "z" * 9000}),
                      ("/api/v1/decisions", lambda i: {"decision": f"{i} " + "w" * 9000})]
            for path, body in writes:
                # The WAL may hold a few pages' room still: write until it is used up.
                r = next(r for i in range(200)
                         if (r := c.post(path, json=body(i))).status_code != 200)
                assert r.status_code == 507, (path, r.text)
                assert r.json() == {"error": message, "exit_code": 1}
            found = c.post("/api/v1/query", json={"query": "kiwi"})  # reads still answer
            assert found.status_code == 200 and found.json()[0]["text"] == "kiwi pie"
    finally:
        subprocess.run(["umount", str(folder)], check=False)
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


# -- a write-protected database ----------------------------------------------------------------
@contextlib.contextmanager
def _api_over(db: Path, tmp_path: Path, monkeypatch):
    """The HTTP API (tests.support.http_api's tokens and config) over the database file `db`."""
    from memcli.config import load_settings
    from memcli.service.http.auth import load_auth
    from memcli.service.http.fastapi_app import build_app
    from tests.support.http_api import NO_SPARSE, serving, write_token_file

    config = tmp_path / "config.yaml"
    config.write_text(NO_SPARSE, encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    settings = load_settings(db)
    auth = load_auth(host="127.0.0.1", port=0, settings=settings, no_token=False,
                     token_file=write_token_file(tmp_path / "tokens", [OPERATOR]))
    with serving(build_app(settings, auth)) as url:
        yield Api(url, db)


def test_a_write_protected_database_answers_every_read(protected, tmp_path, monkeypatch,  # noqa: F811
                                                       caplog):
    """The README's promise holds over HTTP and MCP too: query, acb build, history, decisions
    and the MCP reads answer; a write is refused naming the file."""
    with _api_over(protected, tmp_path, monkeypatch) as api, api.client() as c:
        found = c.post("/api/v1/query", json={"query": "kiwi"})
        assert found.status_code == 200, found.text
        assert [h["text"] for h in found.json()] == ["kiwi pie for the picnic"]
        bundle = c.post("/api/v1/acb/build", json={"query_text": "kiwi"})
        assert bundle.status_code == 200, bundle.text
        history = c.get(f"/api/v1/memories/{found.json()[0]['id']}/history")
        assert history.status_code == 200 and history.json(), history.text
        assert c.get("/api/v1/decisions/query").json() == []
        refused = c.post("/api/v1/memories", json={"text": "fig tart"})
        assert refused.json()["error"].startswith(f"database is read-only: {protected}"), \
            refused.text
        assert refused.status_code == 500 and "a bug" not in refused.text

        async def main(url):
            headers = {"Authorization": f"Bearer {OPERATOR}", "X-Memcli-Tools": "all"}
            async with http_client(url, headers) as client:
                hits = payload(await client.call_tool("memory_query", {"query": "kiwi"}))
                assert hits["result"][0]["text"] == "kiwi pie for the picnic"
                payload(await client.call_tool("memory_build_acb", {"query": "kiwi"}))
                payload(await client.call_tool("memory_query_decisions", {}))
                payload(await client.call_tool("memory_history",
                                               {"memory_id": hits["result"][0]["id"]}))

        anyio.run(main, api.url + "/mcp")
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


# -- bodies over the limit ---------------------------------------------------------------------
def _connect(api: Api) -> socket.socket:
    host, port = api.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _head(path: str, **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {OPERATOR}",
             "Content-Type: application/json", "Accept: application/json, text/event-stream",
             *(f"{k.replace('_', '-')}: {v}"
                                                 for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _response(sock: socket.socket) -> tuple[int, dict]:
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/query", "/mcp"])
def test_a_declared_length_over_the_limit_is_refused_before_the_body(server, path):
    """Content-Length of 100 MB and not one byte of body sent: the 413 comes anyway, so the
    server read none of it."""
    with _connect(server) as sock:
        sock.sendall(_head(path, Content_Length=str(100 * 1024 * 1024)))
        status, body = _response(sock)
    assert status == 413 and body["error"].startswith(f"the request body is over {MAX_BODY_BYTES}")


@pytest.mark.parametrize("path", ["/api/v1/events", "/mcp"])
def test_a_chunked_body_is_refused_at_the_limit(server, path):
    """A chunked body (no length) of up to 200 MB: answered 413 once it passes the limit; the
    server stops reading there, so most of it is never sent (socket buffers hold a few MB)."""
    chunk = b"[" + b" " * (1024 * 1024 - 2) + b"]"
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    sent, pending = 0, b""
    with _connect(server) as sock:
        sock.sendall(_head(path, Transfer_Encoding="chunked"))
        sock.setblocking(False)
        while sent < 200 * len(chunk):
            readable, writable, _ = select.select([sock], [sock], [], 30)
            if readable or not writable:
                break
            if writable:
                pending = pending or framed
                try:
                    done = sock.send(pending)
                except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                    break
                sent, pending = sent + done, pending[done:]
        sock.settimeout(10)
        status, body = _response(sock)
    assert status == 413 and "over" in body["error"]
    assert sent < 100 * len(chunk), sent
