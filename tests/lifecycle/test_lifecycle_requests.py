"""The memory's life (consolidate, decay, reflect, insights, remember, confirm, pin, unpin,
proposals, forget, restore, stats, artifact, an app's memories) takes one request model per
operation: each field is the command's flag, named for it, with its help; the HTTP route's
body or query parameters and the MCP tool's arguments carry the same fields with the same
descriptions; the old flag spellings still work, hidden."""

from __future__ import annotations

import json

import anyio
import pytest
import typer.main

from memcli.cli.app import app
from memcli.cli.options import flag_name
from memcli.config import load_settings
from memcli.operations import ledger_ops
from memcli.operations import lifecycle_requests as life
from memcli.operations.requests import HistoryRequest
from memcli.service.api import Binding
from memcli.service.mcp_server import build_mcp
from tests.support.http_api import running_api

pytestmark = pytest.mark.usefixtures("fast_cli")

# command path -> (its request model, the fields it takes as arguments)
COMMANDS = {
    ("consolidate",): (life.ConsolidateRequest, ()),
    ("decay",): (life.DecayRequest, ()),
    ("reflect",): (life.ReflectRequest, ()),
    ("insights",): (life.ReflectRequest, ()),
    ("remember",): (life.RememberRequest, ("text",)),
    ("confirm",): (life.MemoryRequest, ("memory_id",)),
    ("pin",): (life.MemoryRequest, ("memory_id",)),
    ("unpin",): (life.MemoryRequest, ("memory_id",)),
    ("forget",): (life.MemoryRequest, ("memory_id",)),
    ("restore",): (life.MemoryRequest, ("memory_id",)),
    ("stats",): (life.StatsRequest, ()),
    ("artifact",): (ledger_ops.ArtifactRequest, ("artifact_id",)),
    ("proposals", "list"): (life.ProposalsRequest, ()),
    ("proposals", "accept"): (life.ProposalRequest, ("proposal_id",)),
    ("proposals", "reject"): (life.RejectRequest, ("proposal_id",)),
}


def _command(path: tuple[str, ...]):
    command = typer.main.get_command(app)
    for word in path:
        command = command.commands[word]  # type: ignore[attr-defined]
    return command


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_every_field_is_a_flag_named_for_it_with_its_help(path) -> None:
    model, arguments = COMMANDS[path]
    command = _command(path)
    options = {flag: p for p in command.params for flag in (*p.opts, *p.secondary_opts)}
    names = {p.name for p in command.params}
    for field, info in model.model_fields.items():
        if field in arguments:
            assert field in names, f"{' '.join(path)}: no argument {field}"
            continue
        option = options.get(flag_name(field))
        assert option is not None, f"{' '.join(path)}: no {flag_name(field)}"
        assert option.help == info.description and not option.hidden, field


@pytest.mark.parametrize(("path", "old"), [
    (("consolidate",), "--tenant"), (("consolidate",), "--user"),
    (("consolidate",), "--session"), (("reflect",), "--user"), (("remember",), "--step"),
    (("remember",), "--pin"), (("remember",), "--app"), (("proposals", "list"), "--user"),
])
def test_old_spellings_are_hidden_aliases(path, old) -> None:
    options = {flag: p for p in _command(path).params for flag in p.opts}
    assert options[old].hidden, old


def test_the_old_and_new_spellings_remember_the_same(cli) -> None:
    old = cli("remember", "Deploy on Fridays is banned.", "--user", "priya", "--pin", "--json")
    assert old.exit_code == 0, old.stderr
    new = cli("remember", "Tea at four.", "--user-id", "omar", "--pinned", "--app-id", "crm",
              "--json")
    assert new.exit_code == 0, new.stderr
    rows = json.loads(cli("query", "tea", "--user-id", "omar", "--json").stdout)
    assert [(r["user_id"], r["app_id"]) for r in rows][:1] == [("omar", "crm")]
    steps = cli("remember", "--procedural", "--step", "Pull", "--steps", "Test", "--json")
    assert steps.exit_code == 0, steps.stderr


# operation -> (HTTP method, path, its request model, the path's fields)
ROUTES = {
    "remember": ("post", "/api/v1/memories", life.RememberRequest, ()),
    "forget": ("delete", "/api/v1/memories/{memory_id}", life.MemoryRequest, ("memory_id",)),
    "memory_history": ("get", "/api/v1/memories/{memory_id}/history", HistoryRequest,
                       ("memory_id",)),
    "app_memories": ("get", "/apps/{app_id}/memories", life.AppMemoriesRequest, ("app_id",)),
    "delete_app_memories": ("delete", "/apps/{app_id}/memories", life.AppMemoriesRequest,
                            ("app_id",)),
}
TOOLS = {"remember": "memory_remember", "forget": "memory_forget",
         "memory_history": "memory_history", "app_memories": "memory_app_memories",
         "delete_app_memories": "memory_purge_app"}


def test_the_route_and_the_tool_carry_the_models_fields(tmp_path, monkeypatch) -> None:
    with running_api(tmp_path, monkeypatch) as api, api.client(None) as client:
        doc = client.get("/openapi.json").json()
    server = build_mcp(load_settings(tmp_path / "m.db"), Binding(), tuple(TOOLS.values()))
    tools = {t.name: t.input_schema["properties"] for t in anyio.run(server.list_tools)}
    for name, (method, path, model, in_path) in ROUTES.items():
        route = doc["paths"][path][method]
        if method == "post":
            ref = route["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            served = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"]
        else:
            served = {p["name"]: p for p in route["parameters"] if p["in"] == "query"}
        fields = {f: i for f, i in model.model_fields.items() if f not in in_path}
        assert set(served) == set(fields), name
        for field, info in fields.items():
            assert served[field].get("description") == info.description, (name, field)
        arguments = tools[TOOLS[name]]
        assert arguments, name
        for argument, schema in arguments.items():
            assert schema["description"] == model.model_fields[argument].description, (
                name, argument)


def test_a_command_given_an_id_acts_in_the_tenant_it_names(cli) -> None:
    made = cli("remember", "The office moves in May.", "--tenant", "acme", "--json")
    memory_id = str(json.loads(made.stdout)["id"])
    elsewhere = cli("pin", memory_id, "--json")
    assert elsewhere.exit_code == 1 and "no memory with id" in elsewhere.stderr
    pinned = cli("pin", memory_id, "--tenant-id", "acme", "--json")
    assert pinned.exit_code == 0 and json.loads(pinned.stdout)["pinned"] is True
    forgot = cli("forget", memory_id, "--tenant", "acme", "--json")
    assert forgot.exit_code == 0, forgot.stderr
    restored = cli("restore", memory_id, "--tenant-id", "acme", "--json")
    assert json.loads(restored.stdout)["id"] == int(memory_id)
