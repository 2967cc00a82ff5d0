"""Read your own writes through a real `memcli serve`: a write acknowledged on any path
(forwarded CLI, HTTP `POST /api/v1/events`, MCP over streamable HTTP with the official client)
is the very next query's first hit, found by the full-text leg before its vector is written and
by the dense leg too once the indexer wrote its vector (docs/design/read-your-writes.md).

The indexer is held with SIGSTOP while the pairs run, so every write waits for its vector and
no assertion depends on how fast the indexer drains; 30 indexed neighbours give the dense and
sparse legs hits of their own for every query. bench/read_your_writes.py runs 1,000 pairs per
path, idle and under load.
"""

from __future__ import annotations

import json
import os
import signal

import anyio
import httpx
import pytest

from tests.support.daemon import Daemon, daemon_env, run_client, wait_until
from tests.support.mcp import http_client

pytestmark = pytest.mark.daemon

PAIRS = 4  # per path: each one missed before the fix (the neighbours outrank a lone lexical hit)


def _text(n: int) -> str:
    return f"the zebra{n}quokka report is due"


def _status(env, routes) -> dict:
    done = run_client(["serve", "status"], env, routes=routes)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _ready(env, routes) -> dict:
    """The daemon's status once its models are warm, its HTTP address bound and its backlog
    drained."""
    def ready() -> bool:
        state = _status(env, routes)
        return bool(state["models_ready"] and state["http_url"]
                    and state["backlog"]["waiting"] == 0
                    and state["backlog"]["indexer"]["busy"] is False)

    assert wait_until(ready, timeout=120)
    return _status(env, routes)


def _cli_pair(env, routes, n: int) -> dict:
    done = run_client(["ingest", "--text", _text(n), "--user-id", "u"], env, routes=routes)
    assert done.returncode == 0, done.stderr
    found = run_client(["query", f"zebra{n}quokka", "--top-k", "1", "--json"], env,
                       routes=routes)
    assert found.returncode == 0, found.stderr
    return json.loads(found.stdout)[0]


def _http_pair(client: httpx.Client, n: int) -> dict:
    wrote = client.post("/api/v1/events", json={
        "user_id": "u", "kind": "message", "actor": {"type": "human", "id": "u"},
        "content": {"text": _text(n)}})
    assert wrote.status_code == 200, wrote.text
    found = client.post("/api/v1/query", json={"query": f"zebra{n}quokka", "top_k": 1})
    assert found.status_code == 200, found.text
    return found.json()[0]


def _tool(names: set[str], short: str) -> str:
    """The MCP tool named `short`, whichever separator the server's names use."""
    return next(name for name in names if name.replace(".", "_") in (f"memory_{short}", short))


async def _mcp_pairs(url: str, numbers: range) -> list[str]:
    """Each pair's first hit text, through the SDK's client over streamable HTTP."""
    texts = []
    async with http_client(f"{url}/mcp", {"X-Memcli-User": "u"}) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        record, query = _tool(set(tools), "record_event"), _tool(set(tools), "query")
        shape = tools[record].input_schema.get("properties", {})
        for n in numbers:
            content = ({"text": _text(n)} if "text" in shape
                       else {"content": {"text": _text(n)}})
            wrote = await client.call_tool(record, content)
            assert not wrote.is_error, wrote.content[0].text
            found = await client.call_tool(query, {"query": f"zebra{n}quokka", "top_k": 1})
            assert not found.is_error, found.content[0].text
            texts.append(found.content[0].text)
    return texts


def test_a_write_is_the_next_querys_hit_on_every_path(tmp_path):
    db = tmp_path / "ryw.db"
    env = daemon_env(tmp_path / "home", db)
    env["MEMCLI_INDEXER_IDLE_EXIT"] = "3600"  # held below once idle: it must not exit first
    routes = tmp_path / "routes.log"
    neighbours = "".join(json.dumps({"text": _text(n), "user_id": "u"}) + "\n"
                         for n in range(30))
    with Daemon(db, env, "--port", "0", "--no-token"):
        assert run_client(["ingest", "-"], env, routes=routes, stdin=neighbours).returncode == 0
        state = _ready(env, routes)
        url, indexer = state["http_url"], state["backlog"]["indexer"]["pid"]
        os.kill(indexer, signal.SIGSTOP)  # idle, outside any transaction: writes wait for it
        try:
            for n in range(100, 100 + PAIRS):
                hit = _cli_pair(env, routes, n)
                assert _text(n) == hit["text"], f"CLI write {n} missed: {hit['text']}"
                assert "lexical" in hit["scores"] and "dense" not in hit["scores"]
            with httpx.Client(base_url=url, timeout=60) as client:
                for n in range(200, 200 + PAIRS):
                    hit = _http_pair(client, n)
                    assert _text(n) == hit["text"], f"HTTP write {n} missed: {hit['text']}"
                    assert "lexical" in hit["scores"] and "dense" not in hit["scores"]
            numbers = range(300, 300 + PAIRS)
            for n, text in zip(numbers, anyio.run(_mcp_pairs, url, numbers), strict=True):
                assert _text(n) in text, f"MCP write {n} missed: {text[:300]}"
        finally:
            os.kill(indexer, signal.SIGCONT)
        # Once indexed, the dense and sparse legs find the write too.
        _ready(env, routes)
        with httpx.Client(base_url=url, timeout=60) as client:
            hit = client.post("/api/v1/query", json={"query": "zebra201quokka",
                                                     "top_k": 1}).json()[0]
        assert hit["text"] == _text(201)
        assert {"lexical", "dense"} <= set(hit["scores"]), hit["scores"]
