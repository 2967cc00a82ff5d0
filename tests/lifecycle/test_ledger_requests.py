"""The ledger's requests, one model per operation: each field of a decision, task or checkpoint
request is a flag of its command named for it with its help; the HTTP body (or query
parameters) and the MCP tool of the same operation carry the same fields with the same
descriptions; the flags of before still work, hidden."""

from __future__ import annotations

import json

import anyio
import pytest

from memcli.cli.app import app
from memcli.config import load_settings
from memcli.operations import ledger_ops
from memcli.service import api as service_api
from memcli.service.api import Binding
from memcli.service.mcp_server import build_mcp, select_tools
from tests.support.cli import check_flags
from tests.support.http_api import OPERATOR, running_api

pytestmark = pytest.mark.usefixtures("fast_cli")

# Per command: its request model and the fields it takes as arguments, or leaves to the
# other command of the same operation (a scope a write names, what only an update changes).
ADD_ONLY = {"scope", "user_id", "session_id", "agent_id", "app_id", "channel", "sensitivity"}
COMMANDS = {
    ("decision", "add"): (ledger_ops.DecisionRequest, {"decision", "supersedes", "reason"}),
    ("decision", "supersede"): (ledger_ops.DecisionRequest, {"decision", "supersedes"} | ADD_ONLY),
    ("decision", "list"): (ledger_ops.DecisionsQuery, set()),
    ("task", "add"): (ledger_ops.TaskRequest, {"task_id", "title"}),
    ("task", "update"): (ledger_ops.TaskRequest, {"task_id"} | ADD_ONLY),
    ("task", "list"): (ledger_ops.TasksQuery, set()),
    ("checkpoint", "save"): (ledger_ops.CheckpointSave, set()),
    ("checkpoint", "load"): (ledger_ops.CheckpointLoad, set()),
}
OLD_FLAGS = {
    ("decision", "add"): ["--constraint", "--alternative", "--consequence", "--ref", "--tenant",
                          "--user", "--session", "--agent", "--app"],
    ("task", "update"): ["--ref", "--tenant"],
    ("decision", "list"): ["--tenant", "--user", "--app"],
    ("checkpoint", "load"): ["--thread", "--user", "--tenant"],
}


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_every_ledger_request_field_is_a_flag_with_its_help(path) -> None:
    model, elsewhere = COMMANDS[path]
    options = check_flags(app, model, path, elsewhere)
    assert all(info.description for field, info in model.model_fields.items()
               if field not in elsewhere)
    for old in OLD_FLAGS.get(path, []):
        assert options[old].hidden, old


# operation -> (its model, the route's path and method, the MCP tool's name)
OPERATIONS = {
    "record_decision": (ledger_ops.DecisionRequest, "/api/v1/decisions", "post"),
    "query_decisions": (ledger_ops.DecisionsQuery, "/api/v1/decisions/query", "get"),
    "record_task": (ledger_ops.TaskRequest, "/api/v1/tasks", "post"),
    "get_artifact": (ledger_ops.ArtifactRequest, "/api/v1/artifacts/{artifact_id}", "get"),
}


def _route_fields(doc: dict, path: str, method: str) -> dict[str, dict]:
    """A route's request fields: its body's properties, or its parameters."""
    op = doc["paths"][path][method]
    if "requestBody" in op:
        ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        return doc["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"]
    return {p["name"]: {"description": p.get("description"), **p["schema"]}
            for p in op["parameters"]}


TASK_TOOLS = ("memory_record_task", "memory_update_task")


def test_a_ledger_operation_has_one_declaration_for_route_and_tool(tmp_path, monkeypatch):
    with running_api(tmp_path, monkeypatch) as api, api.client(None) as client:
        doc = client.get("/openapi.json").json()
    server = build_mcp(load_settings(tmp_path / "m.db"), Binding(), select_tools("all"))
    tools = {t.name: t.input_schema["properties"] for t in anyio.run(server.list_tools)}
    for name, (model, path, method) in OPERATIONS.items():
        route = _route_fields(doc, path, method)
        for field, info in model.model_fields.items():
            assert info.description, f"{name}: {field} has no description"
            assert route[field]["description"] == info.description, f"{name} route: {field}"
        # the tools' arguments: a subset, the scope bound (a task is added by one tool and
        # changed by another, both of the one model)
        names = TASK_TOOLS if name == "record_task" else (f"memory_{name}",)
        for tool in [tools[t] for t in names]:
            for field, schema in tool.items():
                assert schema["description"] == model.model_fields[field].description, (
                    name, field)
            assert set(tool) <= set(route), name
        if "{" not in path:  # a whole body or query: validated once, handed on as the model
            marked = getattr(service_api, name).request_model[0]
            assert marked is model, name


def test_the_field_flags_and_the_old_ones_write_the_same(cli) -> None:
    new = cli("decision", "add", "Use SQLite", "--constraints", "one file", "--refs", "evt_1",
              "--agent-id", "planner", "--user-id", "priya", "--json")
    old = cli("decision", "add", "Use SQLite too", "--constraint", "one file", "--ref", "evt_1",
              "--agent", "planner", "--user", "priya", "--json")
    assert new.exit_code == 0 and old.exit_code == 0, new.stderr + old.stderr
    a, b = json.loads(new.stdout), json.loads(old.stdout)
    for key in ("constraints", "refs", "agent_id", "user_id"):
        assert a[key] == b[key] and a[key], key
    saved = cli("checkpoint", "save", "--data", '{"step": 2}', "--user-id", "priya",
                "--thread-id", "t1", "--json")
    assert saved.exit_code == 0, saved.stderr
    loaded = cli("checkpoint", "load", "--user", "priya", "--thread", "t1", "--json")
    assert json.loads(loaded.stdout)["data"] == {"step": 2}


def test_a_bad_ledger_flag_is_one_line_exit_2(cli) -> None:
    cli("task", "add", "seed")
    bad = cli("task", "list", "--limit", "0")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1, bad.stderr
    secret = cli("task", "add", "x", "--sensitivity", "secret")
    assert secret.exit_code == 2 and "never stored" in secret.stderr
    assert secret.stderr.startswith("memcli: error: ") and secret.stderr.count("\n") == 1


def test_an_empty_tenant_is_refused_not_read_as_the_default(tmp_path, monkeypatch, cli) -> None:
    """`tenant_id: ""` names no tenant: a usage error on the CLI and 422 over HTTP, never the
    configured tenant in its place (the shared scope base every request model uses)."""
    for args in (("decision", "add", "Use SQLite", "--tenant-id", ""),
                 ("query", "sqlite", "--tenant", "")):
        out = cli(*args)
        assert out.exit_code == 2 and "tenant_id" in out.stderr, (args, out.stderr)
    with running_api(tmp_path, monkeypatch) as api, api.client(OPERATOR) as client:
        for path, body in (("/api/v1/decisions", {"decision": "Use SQLite", "tenant_id": ""}),
                           ("/api/v1/query", {"query": "sqlite", "tenant_id": ""})):
            answer = client.post(path, json=body)
            assert answer.status_code == 422, (path, answer.text)
