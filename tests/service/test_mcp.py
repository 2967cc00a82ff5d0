"""The MCP server through the SDK's own client: `memcli mcp` as a stdio child process (served
in-process, and bridged to a daemon's /mcp), and the /mcp endpoint over streamable HTTP.
Plus `memcli mcp install` and the agent hooks."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import anyio
import apsw
import pytest
from mcp import Client

from memcli.service.mcp_server import DEFAULT_TOOLS, TOOLS
from tests.support.mcp import (
    child_env,
    error_text,
    http_client,
    mcp_app,
    payload,
    serving,
    stdio_params,
)

pytestmark = pytest.mark.daemon  # `memcli mcp` over stdio, `memcli serve`: child processes

DEFAULT = {"memory_query", "memory_build_acb", "memory_record_event", "memory_get_artifact",
           "memory_query_decisions", "memory_remember", "memory_forget"}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def env(tmp_path: Path, db: Path) -> dict[str, str]:
    return child_env(tmp_path, db)


def _stdio(env: dict[str, str], *args: str) -> Client:
    return Client(stdio_params(env, *args), mode="legacy", read_timeout_seconds=120)


def test_default_tools_and_their_hints_over_stdio(env):
    async def main():
        async with _stdio(env, "--user", "alice") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == DEFAULT == set(DEFAULT_TOOLS)
        for name, tool in tools.items():
            assert tool.annotations.read_only_hint is TOOLS[name].read_only, name
            assert tool.annotations.destructive_hint is TOOLS[name].destructive, name
            # short (every tool costs context): when to call it, and one example call
            assert len(tool.description) < 320 and "Example: {" in tool.description, name
            # identity is never a tool argument
            assert not {"tenant", "tenant_id", "user_id", "agent_id"} & set(
                tool.input_schema.get("properties", {})), name
        assert tools["memory_forget"].annotations.destructive_hint is True
        assert tools["memory_query"].annotations.read_only_hint is True
        async with _stdio(env, "--tools", "all") as client:
            names = {t.name for t in (await client.list_tools()).tools}
        assert names == set(TOOLS) and "memory_purge_app" in names
        config = Path(env["MEMCLI_CONFIG"])
        config.write_text(config.read_text(encoding="utf-8") + "mcp_tools: query,remember\n",
                          encoding="utf-8")
        async with _stdio(env) as client:
            names = {t.name for t in (await client.list_tools()).tools}
        assert names == {"memory_query", "memory_remember"}

    anyio.run(main)


def test_results_name_the_bound_scope_and_errors_are_tool_errors(env):
    async def main():
        async with _stdio(env, "--user", "alice", "--agent", "supervisor") as client:
            stored = payload(await client.call_tool(
                "memory_remember", {"text": "Alice deploys with blue-green releases"}))
            assert stored["scope"] == {"tenant": "default", "user": "alice", "agent": "supervisor",
                                       "app": None}
            found = payload(await client.call_tool("memory_query", {"query": "blue-green"}))
            assert found["scope"]["user"] == "alice"
            assert any("blue-green" in hit["text"] for hit in found["result"])
            missing = await client.call_tool("memory_forget", {"memory_id": 987654})
            assert "no memory with id 987654" in error_text(missing)
            no_args = await client.call_tool("memory_query", {})
            assert no_args.is_error
            # the id it was given is forgotten, and that is a success
            forgot = payload(await client.call_tool("memory_forget",
                                                    {"memory_id": stored["result"]["id"]}))
            assert forgot["scope"]["user"] == "alice"

    anyio.run(main)


def test_forgiving_arguments(env):
    async def main():
        async with _stdio(env, "--user", "alice") as client:
            for text in ("tabs over spaces in Go", "tabs in Makefiles", "tabs in TSV files"):
                payload(await client.call_tool("memory_remember", {"content": text}))
            # aliases (text, k), a number as a string, a bare string for a list
            found = payload(await client.call_tool(
                "memory_query", {"text": "tabs", "k": "2", "category": "knowledge"}))
            assert 1 <= len(found["result"]) <= 2
            recorded = payload(await client.call_tool(
                "memory_record_event", {"message": "we use tabs", "tag": "style",
                                        "session_id": "s1", "event_id": "e-1"}))
            assert recorded["result"]["created"] == ["e-1"]
            bundle = payload(await client.call_tool("memory_build_acb", {"query": "tabs",
                                                                         "budget": 2000}))
            assert bundle["result"]["budget_tokens"] == 2000
            # the query drives retrieval (the Agent Memory System PRD's query_text): the fact
            # comes back as evidence
            evidence = [i for s in bundle["result"]["sections"]
                        if s["name"] == "retrieved_evidence" for i in s["items"]]
            assert any("tabs" in i["text"] for i in evidence), bundle["result"]["sections"]

    anyio.run(main)


def test_identity_cannot_be_overridden_by_arguments(env):
    async def main():
        async with _stdio(env, "--user", "alice") as client:
            payload(await client.call_tool("memory_remember",
                                           {"text": "Alice's locker code is kept offline"}))
            for key in ("user_id", "user"):
                refused = await client.call_tool("memory_query",
                                                 {"query": "locker", key: "bob"})
                assert "identity is bound by the server" in error_text(refused)
            refused = await client.call_tool("memory_remember",
                                             {"text": "x", "tenant_id": "other"})
            assert "tenant 'other'" in error_text(refused)
            # naming the bound scope itself is harmless
            same = payload(await client.call_tool("memory_query",
                                                  {"query": "locker", "user_id": "alice"}))
            assert same["result"]
        async with _stdio(env, "--user", "bob") as client:
            other = payload(await client.call_tool("memory_query", {"query": "locker"}))
            assert other["scope"]["user"] == "bob"
            assert not any("locker" in hit["text"] for hit in other["result"])

    anyio.run(main)


def test_streamable_http_in_the_api_binds_identity_from_token_and_headers(tmp_path,
                                                                          monkeypatch):
    """/mcp of the real HTTP app: the bearer token is required, a tenant-bound token answers
    for its tenant only, the scope headers narrow it, X-Memcli-Tools picks the tool list."""
    from tests.support.http_api import OPERATOR, T1_TOKEN, running_api

    auth = {"Authorization": f"Bearer {T1_TOKEN}"}

    async def main(url):
        async with http_client(url, {**auth, "X-Memcli-User": "carol"}) as client:
            assert {t.name for t in (await client.list_tools()).tools} == DEFAULT
            stored = payload(await client.call_tool("memory_remember",
                                                    {"text": "Carol reviews on Fridays"}))
            assert stored["scope"] == {"tenant": "t1", "user": "carol", "agent": None,
                                       "app": None}
            for arguments in ({"user": "dave"}, {"tenant_id": "t2"}):
                refused = await client.call_tool("memory_query", {"query": "Fridays",
                                                                  **arguments})
                assert "identity is bound by the server" in error_text(refused)
            hidden = await client.call_tool("memory_purge_app", {"app_id": "x"})
            assert "not enabled" in error_text(hidden)
        async with http_client(url, {**auth, "X-Memcli-User": "dave",
                                     "X-Memcli-Tools": "all"}) as client:
            assert {t.name for t in (await client.list_tools()).tools} == set(TOOLS)
            found = payload(await client.call_tool("memory_query", {"query": "Fridays"}))
            assert found["scope"]["user"] == "dave" and found["result"] == []
        async with http_client(url, {"Authorization": f"Bearer {OPERATOR}",
                                     "X-Memcli-Tenant": "t2"}) as client:
            other = payload(await client.call_tool("memory_query", {"query": "Fridays"}))
            assert other["scope"]["tenant"] == "t2" and other["result"] == []

    with running_api(tmp_path, monkeypatch) as api:
        url = api.url + "/mcp"
        anyio.run(main, url)
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        accept = {"Accept": "application/json, text/event-stream"}
        with api.client(token=None, **accept) as http:
            assert http.post("/mcp", json=body).status_code == 401
        with api.client(token=T1_TOKEN, **accept, **{"X-Memcli-Tenant": "t2"}) as http:
            assert http.post("/mcp", json=body).status_code == 403


def test_memcli_mcp_bridges_to_a_daemon_socket(tmp_path, db, env, monkeypatch):
    """With a daemon's HTTP socket present, `memcli mcp` forwards: the answers come from the
    daemon's database (another file than the child's MEMCLI_DB) and its bound identity
    travels as headers."""
    daemon_db = tmp_path / "daemon.db"
    for key, value in env.items():
        if key.startswith(("MEMCLI_", "HOME", "XDG_")):
            monkeypatch.setenv(key, value)
    base = tmp_path / "run" / "d"
    env = {**env, "MEMCLI_SOCKET": f"{base}.sock"}

    async def main():
        async with _stdio(env, "--user", "erin") as client:
            stored = payload(await client.call_tool("memory_remember",
                                                    {"text": "Erin's builds run on the daemon"}))
            assert stored["scope"]["user"] == "erin"
            refused = await client.call_tool("memory_query", {"query": "x", "user_id": "z"})
            assert refused.is_error

    with serving(mcp_app(daemon_db), uds=Path(f"{base}.http.sock")):
        anyio.run(main)
    rows = apsw.Connection(str(daemon_db)).execute(
        "SELECT count(*) FROM memories WHERE user_id = 'erin'").fetchone()[0]
    assert rows == 1
    assert not db.exists()  # the child never opened its own database


def _memcli(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memcli", *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=120)


def test_install_snippets_parse(env, db, tmp_path):
    pinned = ["--db", str(db.resolve())]  # MEMCLI_DB of the shell (env), which no client reads
    for client in ("claude-desktop", "cursor", "vscode"):
        out = _memcli(env, "mcp", "install", "--client", client, "--user", "alice",
                      "--command", "memcli")
        assert out.returncode == 0, out.stderr
        document = json.loads(out.stdout)
        servers = document["servers" if client == "vscode" else "mcpServers"]
        assert servers["memcli"]["command"] == "memcli"
        assert servers["memcli"]["args"] == ["mcp", *pinned, "--user-id", "alice"]
    codex = _memcli(env, "mcp", "install", "--client", "codex", "--command", "memcli",
                    "--tools", "all")
    table = tomllib.loads(codex.stdout)["mcp_servers"]["memcli"]
    assert table == {"command": "memcli", "args": ["mcp", *pinned, "--tools", "all"]}
    claude = _memcli(env, "mcp", "install", "--client", "claude-code", "--command", "memcli")
    assert claude.stdout.split()[:3] == ["claude", "mcp", "add"]
    assert claude.stdout.split()[-5:] == ["--", "memcli", "mcp", *pinned]
    bad = _memcli(env, "mcp", "install", "--client", "emacs")
    assert bad.returncode == 2 and "unknown client" in bad.stderr


def test_install_write_merges_and_keeps_a_backup(env, tmp_path):
    desktop = tmp_path / "claude_desktop_config.json"
    old = {"globalShortcut": "Ctrl+Space",
           "mcpServers": {"files": {"command": "npx", "args": ["server-files"]},
                          "memcli": {"command": "stale"}}}
    desktop.write_text(json.dumps(old), encoding="utf-8")
    out = _memcli(env, "mcp", "install", "--client", "claude-desktop", "--write",
                  "--config-path", str(desktop), "--command", "memcli")
    assert out.returncode == 0, out.stderr
    new = json.loads(desktop.read_text(encoding="utf-8"))
    assert new["globalShortcut"] == "Ctrl+Space"
    assert new["mcpServers"]["files"] == old["mcpServers"]["files"]
    assert new["mcpServers"]["memcli"] == {"command": "memcli",
                                           "args": ["mcp", "--db", env["MEMCLI_DB"]]}
    assert json.loads(Path(f"{desktop}.bak").read_text(encoding="utf-8")) == old

    codex = tmp_path / "config.toml"
    codex.write_text('model = "o3"\n\n[mcp_servers.files]\ncommand = "npx"\n\n'
                     '[mcp_servers.memcli]\ncommand = "stale"\n\n'
                     '[mcp_servers.memcli.env]\nX = "1"\n\n[profiles.fast]\nmodel = "o4"\n',
                     encoding="utf-8")
    for _ in range(2):  # idempotent
        out = _memcli(env, "mcp", "install", "--client", "codex", "--write", "--config-path",
                      str(codex), "--command", "memcli", "--user", "alice")
        assert out.returncode == 0, out.stderr
    merged = tomllib.loads(codex.read_text(encoding="utf-8"))
    assert merged["model"] == "o3" and merged["profiles"]["fast"]["model"] == "o4"
    assert merged["mcp_servers"]["files"] == {"command": "npx"}
    assert merged["mcp_servers"]["memcli"] == {
        "command": "memcli", "args": ["mcp", "--db", env["MEMCLI_DB"], "--user-id", "alice"]}

    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    out = _memcli(env, "mcp", "install", "--client", "cursor", "--write", "--config-path",
                  str(broken))
    assert out.returncode == 2 and broken.read_text(encoding="utf-8") == "{not json"


def _transcript(path: Path) -> None:
    lines = [
        {"type": "user", "uuid": "u-1", "sessionId": "S", "timestamp": "2026-11-20T10:00:00Z",
         "message": {"role": "user", "content": "Please use pnpm, not npm, in this repo"}},
        {"type": "assistant", "uuid": "a-1", "sessionId": "S",
         "message": {"role": "assistant", "content": [
             {"type": "text", "text": "Understood: pnpm from now on."},
             {"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "ls"}}]}},
        {"type": "user", "uuid": "u-2", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "file list"}]}},
        "not json at all",
    ]
    path.write_text("\n".join(json.dumps(x) if isinstance(x, dict) else x for x in lines)
                    + "\n", encoding="utf-8")


def _events(db: Path) -> list[tuple[str, str]]:
    with apsw.Connection(str(db)) as conn:
        return conn.execute("SELECT event_id, session_id FROM events ORDER BY event_id").fetchall()


def test_hook_record_is_idempotent(env, db, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _transcript(transcript)
    hook = json.dumps({"session_id": "S", "transcript_path": str(transcript),
                       "hook_event_name": "Stop"})
    for _ in range(2):
        out = _memcli(env, "hook", "record", "--user", "alice", "--strict", stdin=hook)
        assert out.returncode == 0, out.stderr
        assert out.stdout == ""
    events = _events(db)
    assert len(events) == 2 and {s for _, s in events} == {"S"}
    # a UserPromptSubmit payload without a transcript records its prompt, once
    prompt = json.dumps({"session_id": "S2", "prompt": "remember: deploys on Tuesdays",
                         "hook_event_name": "UserPromptSubmit"})
    for _ in range(2):
        assert _memcli(env, "hook", "record", "--strict", stdin=prompt).returncode == 0
    assert len(_events(db)) == 3


def test_hook_session_start_injects_a_bundle(env, db):
    _memcli(env, "remember", "The billing service ships on Tuesdays")
    out = _memcli(env, "hook", "session-start", "--strict",
                  stdin=json.dumps({"session_id": "S", "source": "startup",
                                    "cwd": "/src/billing-service",
                                    "hook_event_name": "SessionStart"}))
    assert out.returncode == 0, out.stderr
    output = json.loads(out.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "SessionStart"
    assert "Tuesdays" in output["additionalContext"]


def test_hooks_never_fail_the_agent(env, tmp_path):
    not_a_db = tmp_path / "folder"
    not_a_db.mkdir()
    log = Path(env["XDG_DATA_HOME"]) / "memcli" / "hooks.log"
    for command in ("record", "session-start"):
        for stdin in ("\x00garbage{", json.dumps({"transcript_path": "/nonexistent",
                                                  "prompt": "hi"})):
            out = _memcli(env, "hook", command, "--db", str(not_a_db), stdin=stdin)
            assert out.returncode == 0, (command, stdin, out.stderr)
            assert out.stdout == "" and out.stderr == ""
    assert log.read_text(encoding="utf-8").count("hook ") >= 2
    strict = _memcli(env, "hook", "session-start", "--db", str(not_a_db), "--strict")
    assert strict.returncode != 0 and strict.stderr.startswith("memcli: error:")


def test_sessions_share_a_running_memcli_serve(tmp_path, db, env):
    """Two agent sessions (`memcli mcp` children) against a real `memcli serve`: both write
    through the daemon, each under its own bound user, and both writes land once. The
    children get a broken config file: served in-process they would fail on it, the bridge
    never reads it."""
    from tests.support.mcp import daemon

    broken = tmp_path / "broken.yaml"
    broken.write_text("retrieval: [\n", encoding="utf-8")
    children = {**env, "MEMCLI_CONFIG": str(broken)}

    async def session(user: str) -> None:
        async with _stdio(children, "--db", str(db), "--user", user) as client:
            stored = payload(await client.call_tool(
                "memory_record_event", {"text": f"{user} ran the daemon test",
                                        "event_id": f"ev-{user}"}))
            assert stored["scope"]["user"] == user
            again = payload(await client.call_tool(
                "memory_record_event", {"text": f"{user} ran the daemon test",
                                        "event_id": f"ev-{user}"}))
            assert again["result"]["skipped"] == [f"ev-{user}"]

    async def main():
        async with anyio.create_task_group() as tasks:
            for user in ("ann", "ben"):
                tasks.start_soon(session, user)

    with daemon(env, db):
        anyio.run(main)
    with apsw.Connection(str(db)) as conn:
        rows = conn.execute("SELECT event_id, user_id FROM events ORDER BY event_id").fetchall()
    assert rows == [("ev-ann", "ann"), ("ev-ben", "ben")]
