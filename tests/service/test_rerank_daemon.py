"""The reranker through a real `memcli serve`: a forwarded `memcli query` (the default route of
the CLI) and `POST /api/v1/query` reorder by the scripted reranking server on 127.0.0.1
(tests/support/rerankstub.py), and a server that fails leaves the fused order with the warning
on the caller's stderr."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.daemon import Daemon, daemon_env, last_route, run_client, wait_until
from tests.support.records import ndjson, turns
from tests.support.rerankstub import RerankStub

pytestmark = pytest.mark.daemon

TEA = [
    "Alice drinks green tea every morning",
    "Alice likes tea with milk",
    "the oolong tea Alice bought in Taipei",
    "jasmine tea is what Alice brews on Sundays",
]
ASK = ["query", "what tea does Alice drink", "--user-id", "alice", "--json"]


def test_the_daemon_reranks_forwarded_and_http_queries(tmp_path):
    db = tmp_path / "rerank.db"
    env = daemon_env(tmp_path / "home", db)
    routes = tmp_path / "routes.log"
    with RerankStub(scores={"jasmine": 3.0, "oolong": 2.0}) as stub:
        env["MEMCLI_RERANK_URL"] = stub.url
        with Daemon(db, env, "--port", "0", "--no-token"):
            wrote = run_client(
                ["ingest", "-"], env, routes=routes, stdin=ndjson(turns("s1", TEA, user="alice"))
            )
            assert wrote.returncode == 0, wrote.stderr
            found = run_client(ASK, env, routes=routes)
            assert found.returncode == 0, found.stderr
            assert last_route(routes).startswith("daemon")
            hits = json.loads(found.stdout)
            assert [h["text"] for h in hits[:2]] == [TEA[3], TEA[2]]
            assert hits[0]["rerank_score"] == pytest.approx(3.0)

            def http_url() -> str | None:
                state = run_client(["serve", "status"], env, routes=routes)
                return json.loads(state.stdout).get("http_url") if state.returncode == 0 else None

            assert wait_until(lambda: http_url() is not None, timeout=120)
            with httpx.Client(base_url=http_url(), timeout=60) as client:
                answer = client.post(
                    "/api/v1/query", json={"query": "what tea does Alice drink", "user_id": "alice"}
                )
            assert answer.status_code == 200, answer.text
            assert [h["text"] for h in answer.json()[:2]] == [TEA[3], TEA[2]]

            stub.fail(status=503)
            failed = run_client(ASK, env, routes=routes)
            assert failed.returncode == 0, failed.stderr
            assert last_route(routes).startswith("daemon")
            warning = failed.stderr.decode().strip().splitlines()
            assert warning == [
                f"memcli: warning: rerank skipped: {stub.url} answered HTTP 503: "
                '{"error": "scripted failure"} (the fused order stands)'
            ]
            assert all(h["rerank_skipped"] for h in json.loads(failed.stdout))
