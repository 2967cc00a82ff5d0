"""The category policy fails closed (the memory system spec: `categories ⊆ allowlist[agent]`).

- An agent that `allowlists:` does not name reads the `default:` entry: as shipped, every
  unrestricted category (what a person reads); a file without `default:` refuses it (exit 2,
  HTTP 403, an MCP tool error). Without an agent everything stays readable.
- A write naming a category the file does not declare is refused with the close matches (exit 2,
  HTTP 422, an MCP tool error) on every path: remember, ingest, HTTP events, MCP tools; nothing
  is stored. `free_categories: true` accepts any.
- The shipped allowlists agree with the categories the code files memories under: the
  supervisor reads every one of them but the restricted ones.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import anyio

import memcli
from memcli.policy.categories import load_categories
from tests.support.http_api import OPERATOR, running_api
from tests.support.lifecycle import memory_rows
from tests.support.mcp import error_text, http_client, payload

UNLISTED = "nobody"
AUTH = {"Authorization": f"Bearer {OPERATOR}"}


def _one_line(result, code: int = 2) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memcli: error: "), result.stderr
    return lines[0]


def _categories_file(tmp_path: Path, monkeypatch, old: str, new: str) -> None:
    """The shipped categories.yaml with `old` replaced by `new`, as MEMCLI_CATEGORIES."""
    shipped = (Path(memcli.__file__).parent / "categories.yaml").read_text(encoding="utf-8")
    assert old in shipped
    path = tmp_path / "categories.yaml"
    path.write_text(shipped.replace(old, new), encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CATEGORIES", str(path))


def _seed(cli) -> None:
    for text, category in (("Priya prefers green tea", "preferences"),
                           ("Priya plans the Lisbon trip", "tasks")):
        out = cli("remember", text, "--user", "priya", "--category", category, "--json")
        assert out.exit_code == 0, out.stderr


# -- agents the allowlists do not name ---------------------------------------------------------
def test_an_unlisted_agent_reads_what_a_person_reads_but_restricted_categories(cli):
    """The shipped categories.yaml's `default: ["*"]` (the Agent Memory System PRD's A1 agent
    `coder` gets its bundles): every category but the restricted ones, on query and acb build
    alike."""
    _seed(cli)
    stored = cli("remember", "Deploy: build; push", "--procedural", "--user-id", "priya")
    assert stored.exit_code == 0
    person = json.loads(cli("query", "Priya", "--user-id", "priya", "--json").stdout)
    agent = json.loads(cli("query", "Priya", "--user-id", "priya", "--agent-id", UNLISTED,
                           "--json").stdout)
    assert {h["category"] for h in agent} == {h["category"] for h in person} == {
        "preferences", "tasks"}
    line = _one_line(cli("query", "deploy", "--agent-id", UNLISTED, "--categories", "procedural"))
    assert f"agent {UNLISTED!r} may not read category procedural" in line
    bundle = cli("acb", "build", "--user-id", "priya", "--agent-id", "coder", "-q", "Priya",
                 "--json")
    assert bundle.exit_code == 0, bundle.stderr
    assert "green tea" in bundle.stdout


def test_without_a_default_entry_an_unlisted_agent_is_refused(cli, tmp_path, monkeypatch):
    _seed(cli)
    _categories_file(tmp_path, monkeypatch, '  default: ["*"]\n', "")
    for args in (("query", "Priya", "--agent-id", UNLISTED),
                 ("acb", "build", "--user-id", "priya", "--agent-id", UNLISTED, "-q", "Priya")):
        line = _one_line(cli(*args))
        assert f"agent {UNLISTED!r} has no category allowlist" in line
        assert "default:" in line  # the hint says how to grant one
    # No agent: a person at the shell reads every category, as before.
    anyone = json.loads(cli("query", "Priya", "--json").stdout)
    assert {h["category"] for h in anyone} == {"preferences", "tasks"}


def test_a_default_entry_grants_unlisted_agents_its_categories(cli, tmp_path, monkeypatch):
    _seed(cli)
    _categories_file(tmp_path, monkeypatch, 'default: ["*"]', "default: [preferences]")
    hits = json.loads(cli("query", "Priya", "--agent-id", UNLISTED, "--json").stdout)
    assert [h["category"] for h in hits] == ["preferences"]
    line = _one_line(cli("query", "Priya", "--agent-id", UNLISTED, "--categories", "tasks"))
    assert f"agent {UNLISTED!r} may not read category tasks" in line


def test_http_and_mcp_refuse_an_unlisted_agent_without_a_default(tmp_path, monkeypatch):
    _categories_file(tmp_path, monkeypatch, '  default: ["*"]\n', "")

    async def mcp(url: str) -> None:
        async with http_client(url, {**AUTH, "X-Memcli-Agent": UNLISTED}) as client:
            refused = await client.call_tool("memory_query", {"query": "green tea"})
            assert f"agent {UNLISTED!r} has no category allowlist" in error_text(refused)
        async with http_client(url, {**AUTH, "X-Memcli-Agent": "supervisor"}) as client:
            found = payload(await client.call_tool("memory_query", {"query": "green tea"}))
            assert [h["category"] for h in found["result"]] == ["preferences"]

    with running_api(tmp_path, monkeypatch) as api:
        with api.client() as c:
            assert c.post("/api/v1/memories", json={"text": "Priya likes green tea",
                                                    "category": "preferences"}).status_code == 200
        with api.client(**{"X-Memcli-Agent": UNLISTED}) as c:
            for path, body in (("/api/v1/query", {"query": "green tea"}),
                               ("/api/v1/acb/build", {"query_text": "green tea"})):
                r = c.post(path, json=body)
                assert r.status_code == 403, r.text
                assert "has no category allowlist" in r.json()["error"]
        anyio.run(mcp, api.url + "/mcp")


# -- categories a write names ------------------------------------------------------------------
def test_a_category_typo_is_refused_with_the_close_match(cli, db_path):
    line = _one_line(cli("remember", "Priya likes green tea", "--category", "prefrences"))
    assert "unknown category 'prefrences'" in line and "did you mean preferences" in line
    record = {"text": "Priya likes green tea", "session_id": "s1", "category": "prefrences"}
    ingested = cli("ingest", "-", "--json", input=json.dumps(record))
    assert ingested.exit_code == 2
    assert "did you mean preferences" in json.loads(ingested.stdout)["rejected"][0]["reason"]
    flagged = cli("ingest", "--text", "Priya likes green tea", "--category", "Tasks", "--json")
    assert flagged.exit_code == 2 and "did you mean tasks" in flagged.stderr
    assert memory_rows(db_path) == []  # nothing stored, not even the event's turn
    # Declared categories are taken, and a category-less record still files as `event`.
    assert cli("remember", "Priya likes green tea", "--category", "preferences").exit_code == 0
    assert cli("ingest", "--text", "hello there", "--session", "s1").exit_code == 0
    assert sorted(r["category"] for r in memory_rows(db_path)) == ["event", "preferences"]


def test_free_categories_accepts_any(cli, tmp_path, monkeypatch, db_path):
    _categories_file(tmp_path, monkeypatch, "free_categories: false", "free_categories: true")
    assert cli("remember", "Priya likes green tea", "--category", "hobbies").exit_code == 0
    assert cli("ingest", "--text", "we went climbing", "--category", "outings").exit_code == 0
    assert sorted(r["category"] for r in memory_rows(db_path)) == ["hobbies", "outings"]


def test_the_spec_layout_declares_system_and_custom_categories(cli, tmp_path, monkeypatch,
                                                               db_path):
    path = tmp_path / "spec.yaml"
    path.write_text("categories:\n  system:\n    - name: profile\n      context: all\n"
                    "    - name: preferences\n  custom: [hobbies]\n"
                    "allowlists:\n  stylist: [preferences, hobbies]\n", encoding="utf-8")
    assert load_categories(path).names == ("profile", "preferences", "hobbies")
    monkeypatch.setenv("MEMCLI_CATEGORIES", str(path))
    assert cli("remember", "Priya climbs", "--category", "hobbies").exit_code == 0
    assert "did you mean hobbies" in _one_line(cli("remember", "x", "--category", "hobby"))
    hits = json.loads(cli("query", "Priya climbs", "--agent", "stylist", "--json").stdout)
    assert [h["category"] for h in hits] == ["hobbies"]


def test_http_and_mcp_writes_refuse_an_unknown_category(tmp_path, monkeypatch):
    async def mcp(url: str) -> None:
        async with http_client(url, AUTH) as client:
            for tool, arguments in (("memory_remember", {"text": "Priya likes tea"}),
                                    ("memory_record_event", {"text": "Priya likes tea"})):
                refused = await client.call_tool(tool, {**arguments, "category": "prefrences"})
                assert "did you mean preferences" in error_text(refused), tool
            ok = payload(await client.call_tool("memory_remember", {
                "text": "Priya likes tea", "category": "preferences"}))
            assert ok["result"]["status"] == "created"

    with running_api(tmp_path, monkeypatch) as api:
        with api.client() as c:
            remembered = c.post("/api/v1/memories", json={"text": "Priya likes green tea",
                                                          "category": "prefrences"})
            assert remembered.status_code == 422, remembered.text
            assert "did you mean preferences" in remembered.json()["error"]
            events = c.post("/api/v1/events", json={"text": "Priya likes green tea",
                                                    "session_id": "s1",
                                                    "category": "prefrences"})
            assert events.status_code == 422, events.text
            assert events.json()["created"] == []
        assert memory_rows(api.db) == []
        anyio.run(mcp, api.url + "/mcp")
        assert [r["category"] for r in memory_rows(api.db)] == ["preferences"]


# -- the shipped defaults agree with what the code files ---------------------------------------
def _constants(node: ast.AST | None) -> list[str]:
    """The string constants an expression can evaluate to: `"x"`, `a or "x"`, `"x" if c else y`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.BoolOp):
        return [c for value in node.values for c in _constants(value)]
    if isinstance(node, ast.IfExp):
        return _constants(node.body) + _constants(node.orelse)
    return []


def assigned_categories() -> set[str]:
    """Every category memcli's code files a memory under by itself: `category=` arguments,
    `"category":` keys and `category = ...` assignments with a literal, plus the defaults of
    consolidation's lists and of the facts view."""
    from memcli.editable_views.format import DEFAULT_CATEGORY
    from memcli.lifecycle.extract import KINDS

    found = {category for _, category in KINDS.values()} | {DEFAULT_CATEGORY}
    for path in Path(memcli.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "category":
                found.update(_constants(node.value))
            elif isinstance(node, ast.Dict):
                found.update(c for key, value in zip(node.keys, node.values, strict=True)
                             if _constants(key) == ["category"] for c in _constants(value))
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "category" for t in node.targets):
                found.update(_constants(node.value))
    return found


def test_every_category_the_code_assigns_is_declared_and_read_by_the_supervisor():
    assigned = assigned_categories()
    # The scan finds what ingest, remember, consolidation, the ledger and reflection file.
    assert {"event", "knowledge", "preferences", "decisions", "tasks", "procedural",
            "activity", "relationship_dynamic", "profile"} <= assigned
    shipped = load_categories(None)
    assert assigned <= set(shipped.names)
    for category in assigned:
        if category in shipped.restricted:  # procedures go to the agents that act on them
            assert category in shipped.allowlists["executor"]
        else:
            assert category in shipped.allowed("supervisor"), category


def test_the_supervisor_sees_what_remember_files(cli):
    assert cli("remember", "The staging database listens on port 5433").exit_code == 0
    hits = json.loads(cli("query", "staging database port", "--agent", "supervisor",
                          "--json").stdout)
    assert [h["category"] for h in hits] == ["knowledge"]
