"""MCP that every client loads: the conformance check (tests/support/mcp_conformance.py) through
the official `mcp` client, in-process here and over stdio (`memcli mcp`) and streamable HTTP
(`memcli serve`'s /mcp) in the daemon tier; the event tool taking the event model of `POST
/api/v1/events`; required arguments declared; unknown ones refused by name; `memcli mcp
install` pinning the database of the shell it runs in."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import apsw
import httpx2
import pytest
from jsonschema import Draft202012Validator, ValidationError
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memcli.config import load_settings
from memcli.core.records import EventIn
from memcli.service.api import Binding
from memcli.service.mcp_server import TOOLS, build_mcp, select_tools
from tests.support.mcp import CONFIG, child_env, daemon, error_text, payload, stdio_params
from tests.support.mcp_conformance import check_server


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG, encoding="utf-8")  # no SPLADE leg: a real model, slow
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    return build_mcp(
        load_settings(tmp_path / "memory.db"), Binding(user_id="alice"), select_tools("all")
    )


def test_every_tool_conforms_in_process(server):
    answers = anyio.run(_checked, server)
    assert answers["memory_record_event"]["scope"]["user"] == "alice"


async def _checked(server):
    async with Client(server) as client:
        return await check_server(client)


def test_the_event_tool_takes_the_events_route_model(server, tmp_path):
    """memory_record_event's arguments are EventIn's fields (the body of POST /api/v1/events)
    less the scope the server binds, described as the model describes them; a tool result
    keeps its tool, path and line range, a decision event its rationale and what it
    supersedes."""
    tools = {t.name: t for t in anyio.run(server.list_tools)}
    schema = tools["memory_record_event"].input_schema
    bound = {"tenant_id", "user_id", "agent_id", "app_id"}
    assert set(schema["properties"]) == set(EventIn.model_fields) - bound
    for name, prop in schema["properties"].items():
        assert prop["description"] == EventIn.model_fields[name].description, name
    assert schema["required"] == ["content"]
    content = schema["properties"]["content"]["properties"]
    assert {"text", "tool", "path", "line_range", "rationale", "supersedes"} <= set(content)

    async def main():
        async with Client(server) as client:
            made = payload(
                await client.call_tool(
                    "memory_record_event",
                    {
                        "kind": "decision",
                        "content": {"decision": "Use SQLite", "rationale": ["one file"]},
                    },
                )
            )["result"]
            (first,) = payload(await client.call_tool("memory_query_decisions", {}))["result"]
            # the receipt names the ledger row the event wrote
            assert made["ledger"] == [{"event_id": made["event_id"], "decision_id": first["id"]}]
            payload(
                await client.call_tool(
                    "memory_record_event",
                    {
                        "kind": "decision",
                        "channel": "team",
                        "sensitivity": "low",
                        "refs": ["https://example.org/adr/7"],
                        "session_id": "s1",
                        "actor": {"type": "agent", "id": "planner"},
                        "content": {
                            "decision": "Use PostgreSQL",
                            "rationale": "row-level security",
                            "supersedes": first["id"],
                        },
                    },
                )
            )
            read = payload(
                await client.call_tool(
                    "memory_record_event",
                    {
                        "kind": "tool_result",
                        "event_id": "read-1",
                        "content": {
                            "tool": "fs.read_file",
                            "path": "README.md",
                            "text": "# memcli\nmemory",
                            "line_range": [1, 2],
                        },
                    },
                )
            )
            decisions = payload(await client.call_tool("memory_query_decisions", {"status": "all"}))
            return first, read, decisions

    first, read, decisions = anyio.run(main)
    assert read["result"]["created"] == ["read-1"]
    newer = next(d for d in decisions["result"] if d["decision"] == "Use PostgreSQL")
    assert newer["supersedes"] == first["id"]
    assert newer["rationale"] == ["row-level security"]
    assert "https://example.org/adr/7" in newer["refs"]
    db = apsw.Connection(str(tmp_path / "memory.db"))
    event = db.execute(
        "SELECT channel, sensitivity, actor_type, actor_id, session_id, refs "
        "FROM events WHERE kind = 'decision' ORDER BY seq DESC"
    ).fetchone()
    assert event == ("team", "low", "agent", "planner", "s1", '["https://example.org/adr/7"]')
    (content,) = db.execute("SELECT content FROM events WHERE event_id = 'read-1'").fetchone()
    stored = json.loads(content)
    assert (stored["tool"], stored["path"], stored["line_range"]) == (
        "fs.read_file",
        "README.md",
        [1, 2],
    )


def test_required_arguments_are_declared_and_unknown_ones_refused(server):
    tools = {t.name: t for t in anyio.run(server.list_tools)}
    for name, missing in (
        ("memory_record_task", {"status": "open"}),
        ("memory_update_task", {"status": "done"}),
        ("memory_record_event", {"tags": ["x"]}),
        ("memory_remember", {}),
        ("memory_query", {}),
    ):
        with pytest.raises(ValidationError):  # the schema a client reads refuses it
            Draft202012Validator(tools[name].input_schema).validate(missing)

    async def main():
        async with Client(server) as client:
            untitled = await client.call_tool("memory_record_task", {"status": "open"})
            assert error_text(untitled) == "bad memory_record_task arguments: title: Field required"
            two = await client.call_tool(
                "memory_query", {"query": "x", "colour": "red", "shape": "round"}
            )
            assert "does not take colour, shape" in error_text(two)
            # an alias is not unknown, nor a scope key naming the bound scope
            payload(await client.call_tool("memory_query", {"q": "x", "user_id": "alice"}))
            shorthand = payload(
                await client.call_tool(
                    "memory_record_event", {"text": "Priya ships on Fridays", "role": "human"}
                )
            )
            assert shorthand["result"]["created"]

    anyio.run(main)


def test_tools_takes_new_names_and_the_dotted_ones_until_their_removal():
    assert select_tools("query,memory_remember") == ("memory_query", "memory_remember")
    assert select_tools("memory.query,memory.record_task") == (
        "memory_query",
        "memory_record_task",
        "memory_update_task",
    )
    assert set(select_tools("all")) == set(TOOLS)


def test_install_writes_the_tools_by_their_names(cli):
    out = cli(
        "mcp",
        "install",
        "--client",
        "codex",
        "--command",
        "memcli",
        "--tools",
        "memory.query,remember",
    )
    assert out.exit_code == 0, out.stderr
    assert '"--tools", "memory_query,memory_remember"' in out.stdout


def test_install_pins_the_database_of_the_shell(cli, db_path):
    """With MEMCLI_DB set (the cli fixture sets it), every client's config names the database:
    the client starts `memcli mcp` without the shell's environment."""
    for client in ("claude-desktop", "cursor", "vscode", "claude-code", "codex"):
        out = cli("mcp", "install", "--client", client, "--command", "memcli")
        assert out.exit_code == 0, out.stderr
        assert "--db" in out.stdout and str(db_path.resolve()) in out.stdout, (client, out.stdout)


# A location with a password -> the location the refusal gives instead (quoted for a shell).
PASSWORDS = {
    "postgresql://agent:s3cret@db.internal:5432/memory": (
        "postgresql://agent@db.internal:5432/memory"
    ),
    "postgresql://db.internal/memory?sslmode=require&password=s3cret": (
        "'postgresql://db.internal/memory?sslmode=require'"
    ),
    "host=db.internal dbname=memory user=agent password='s3cret'": (
        "'host=db.internal dbname=memory user=agent'"
    ),
}


@pytest.mark.parametrize("source", ["flag", "env"])
def test_install_never_writes_a_database_password(cli, tmp_path, monkeypatch, source):
    """A PostgreSQL location holding a password (in a URL's user part or its query, or a
    keyword string) is refused before anything is printed or written: the client's config
    would keep it in plain text. The one-line refusal names where libpq reads it instead and
    gives the location without it, which is then pinned as given."""
    config = tmp_path / "claude_desktop_config.json"
    write = ["--write", "--config-path", str(config), "--command", "memcli"]
    for location, bare in PASSWORDS.items():
        if source == "env":
            monkeypatch.setenv("MEMCLI_DB", location)
        given = ["--db", location] if source == "flag" else []
        for extra in ([], write):
            out = cli("mcp", "install", "--client", "claude-desktop", *extra, *given)
            assert out.exit_code == 2, (location, out.stdout)
            assert "s3cret" not in out.stdout + out.stderr
            assert out.stdout == "" and out.stderr.count("\n") == 1
            assert "~/.pgpass" in out.stderr and f"--db {bare};" in out.stderr
            assert not config.exists()
    bare = "postgresql://agent@db.internal:5432/memory"
    out = cli("mcp", "install", "--client", "claude-desktop", *write, "--db", bare)
    assert out.exit_code == 0, out.stderr
    entry = json.loads(config.read_text(encoding="utf-8"))["mcpServers"]["memcli"]
    assert entry["args"] == ["mcp", "--db", bare]


# -- over the transports clients use (child processes: the daemon tier) -----------------------


@pytest.mark.daemon
def test_every_tool_conforms_over_stdio(tmp_path):
    env = child_env(tmp_path, tmp_path / "memory.db")

    async def main():
        async with Client(
            stdio_params(env, "--no-daemon", "--tools", "all"),
            mode="legacy",
            read_timeout_seconds=120,
        ) as client:
            return await check_server(client)

    assert anyio.run(main)["memory_query"]["scope"]["tenant"] == "default"


@pytest.mark.daemon
def test_every_tool_conforms_over_streamable_http_of_memcli_serve(tmp_path):
    db = tmp_path / "memory.db"
    env = child_env(tmp_path, db)

    async def main(sock: Path):
        transport = httpx2.AsyncHTTPTransport(uds=str(sock))
        http = httpx2.AsyncClient(
            transport=transport,
            timeout=120,
            headers={"X-Memcli-Tools": "all", "X-Memcli-User": "ann"},
        )
        async with Client(
            streamable_http_client("http://localhost/mcp", http_client=http), mode="legacy"
        ) as client:
            return await check_server(client)

    with daemon(env, db) as sock:
        answers = anyio.run(main, sock)
    assert answers["memory_remember"]["scope"]["user"] == "ann"
