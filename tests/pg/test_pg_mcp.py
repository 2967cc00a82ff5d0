"""`memcli mcp` on stdio, without a daemon, on PostgreSQL.

An agent's MCP server lives as long as the agent's session and answers many tool calls. On a
server location it holds a small connection pool for its whole life, as `memcli serve` does:
every call borrows a connection that stays open, rather than connecting, authenticating and
checking the schema again per call. Seen from the server: the same backend process answers
call after call, and it is gone once the MCP process ends. Real process, real server.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import psycopg
from mcp import Client

from tests.support.daemon import wait_until
from tests.support.mcp import child_env, payload, stdio_params


def _backends(url: str) -> set[int]:
    """Server processes connected to the test's database, other than this one."""
    with psycopg.connect(url, autocommit=True) as admin:
        return {r[0] for r in admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()")}


def test_stdio_keeps_its_connections_across_calls(tmp_path: Path, pg_db: str) -> None:  # noqa: F811
    env = child_env(tmp_path, pg_db)  # type: ignore[arg-type]
    seen: list[set[int]] = []

    async def main() -> None:
        async with Client(stdio_params(env, "--user-id", "ann", "--no-daemon"), mode="legacy",
                          read_timeout_seconds=120) as client:
            for i in range(4):
                payload(await client.call_tool(
                    "memory_record_event", {"text": f"note {i} about the harbour",
                                            "event_id": f"ev-{i}"}))
                found = payload(await client.call_tool("memory_query", {"query": "harbour"}))
                assert len(found["result"]) == i + 1
                seen.append(_backends(pg_db))

    anyio.run(main)
    assert seen[0], "no connection kept open between calls"
    # Connections kept from the first call answer every later call (a process connecting per
    # call would show disjoint sets). The pool may add one: a returned connection is reset by a
    # pool worker, and a borrow that comes before the reset ends grows the pool rather than
    # wait (psycopg_pool's design); a connection opened for one call may be gone at the next.
    assert set.intersection(*seen), seen
    assert len(set().union(*seen)) <= len(seen[0]) + 2, seen
    assert wait_until(lambda: not _backends(pg_db), timeout=10)  # closed with the process
