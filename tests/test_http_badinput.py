"""Bad input and a hostile environment over HTTP and MCP: ids beyond 64 bits, a full disk, a
write-protected database, bodies over the size limit. Each is a named 4xx/5xx with the CLI's
one-line message, never "a bug in memcli" nor a traceback in the log."""

from __future__ import annotations

import json

import anyio
import pytest
from http_support import OPERATOR, running_api
from mcp_support import error_text, http_client

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
    calls = [("memory.forget", {"memory_id": HUGE}),
             ("memory.history", {"memory_id": HUGE}),
             ("memory.record_task", {"task_id": HUGE, "status": "done"}),
             ("memory.record_decision", {"decision": "x", "supersedes": HUGE})]

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
        r = c.get(f"/api/v1/memories/{2**63 - 1}/history")
        assert r.status_code == 200 and r.json() == []
        r = c.post("/api/v1/tasks", json={"task_id": 2**63 - 1, "status": "done"})
        assert r.status_code == 404, r.text
    assert json.loads(r.text)["exit_code"] == 1
