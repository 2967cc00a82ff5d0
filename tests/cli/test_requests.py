"""One request model per operation, the single source of its fields: a field of the query,
acb or ingest request is a CLI flag named for it (kebab case) with its help, a property of
the HTTP body's schema, and an argument of the MCP tool with the same description; old flag
spellings keep working, hidden; every validation error reads by one rule."""

from __future__ import annotations

import json

import anyio
import pytest

from memcli.cli.app import app
from memcli.cli.options import LEGACY_FLAGS, flag_name
from memcli.config import load_settings
from memcli.errors import UsageError
from memcli.operations import curation
from memcli.operations.requests import (
    AcbRequest,
    IngestRequest,
    QueryRequest,
    parse_query_request,
)
from memcli.operations.requests import parse_acb_request as parse_request
from memcli.service.api import Binding
from memcli.service.mcp_server import build_mcp
from tests.support.cli import check_flags, command_options
from tests.support.http_api import running_api
from tests.support.records import ndjson, turns

pytestmark = pytest.mark.usefixtures("fast_cli")


def test_every_request_field_is_a_flag_named_for_it_with_its_help() -> None:
    check_flags(app, QueryRequest, ("query",), {"query", "filters"})
    check_flags(app, AcbRequest, ("acb", "build"), {"caps", "since"})
    check_flags(app, IngestRequest, ("ingest",),
              {"tenant_id", "user_id", "session_id", "app_id"})  # worded as defaults there
    for model, path in ((curation.CorrectRequest, ("correct",)),
                        (curation.EntityRequest, ("entity",)),
                        (curation.RelatedRequest, ("related",)),
                        (curation.ExportRequest, ("export",)),
                        (curation.ImportRequest, ("import",)),
                        (curation.ViewApplyRequest, ("view", "apply")),
                        (curation.RebuildRequest, ("rebuild",)),
                        (curation.DoctorRequest, ("doctor",))):
        check_flags(app, model, path, set())
    # The view's own wording of whose items it holds.
    check_flags(app, curation.ViewExportRequest, ("view", "export"), {"user_id", "app_id"})


def test_old_spellings_are_hidden_aliases_of_the_field_flags() -> None:
    options = command_options(app, "query")
    for field, old in LEGACY_FLAGS.items():
        assert options[old].hidden and options[old].name == f"{field}__legacy", old
        assert not options[flag_name(field)].hidden
    build = command_options(app, "acb", "build")
    assert build["--query-text"].hidden and build["-q"] is build["--query"]
    assert build["--agent"].hidden and build["--checkpoint"].hidden
    for path in (("correct",), ("entity",), ("related",), ("export",), ("import",),
                 ("view", "export"), ("view", "apply")):
        assert command_options(app, *path)["--tenant"].hidden, path
    export = command_options(app, "export")
    assert export["-o"] is export["--out"] and export["--user"].hidden
    view = command_options(app, "view", "export")
    assert view["--format"].hidden and view["-f"] is view["--file-format"]


def test_one_declaration_drives_the_http_body_and_the_mcp_schema(tmp_path, monkeypatch):
    with running_api(tmp_path, monkeypatch) as api, api.client(None) as client:
        doc = client.get("/openapi.json").json()
    served = doc["components"]["schemas"]["QueryRequest"]["properties"]
    for field, info in QueryRequest.model_fields.items():
        assert served[info.alias or field].get("description") == info.description, field

    server = build_mcp(load_settings(tmp_path / "m.db"), Binding(),
                       ("memory_query", "memory_build_acb"))
    tools = {t.name: t.input_schema["properties"] for t in anyio.run(server.list_tools)}
    for name in ("query", "top_k", "session_id", "return_format", "budget_tokens", "as_of"):
        described = QueryRequest.model_fields[name].description
        assert tools["memory_query"][name]["description"] == described, name
        assert served[QueryRequest.model_fields[name].alias or name]["description"] == described
    assert tools["memory_query"]["top_k"]["maximum"] == 1000  # the field's rule, too
    assert tools["memory_build_acb"]["budget_tokens"]["description"] == (
        AcbRequest.model_fields["budget_tokens"].description)


@pytest.mark.parametrize("flag", ["--user-id", "--user"])
def test_the_field_flag_and_its_old_spelling_read_the_same(cli, flag) -> None:
    records = turns("s1", ["Priya drinks green tea."], user="priya") + turns(
        "s2", ["Omar drinks green tea."], user="omar")
    assert cli("ingest", "-", input=ndjson(records)).exit_code == 0
    result = cli("query", "green tea", flag, "omar", "--json")
    assert result.exit_code == 0, result.stderr
    assert [h["user_id"] for h in json.loads(result.stdout)] == ["omar"]


def test_a_flag_wins_over_the_same_field_of_a_json_request(cli) -> None:
    records = turns("s1", ["Priya drinks green tea."], user="priya") + turns(
        "s2", ["Omar drinks green tea."], user="omar")
    assert cli("ingest", "-", input=ndjson(records)).exit_code == 0
    request = {"query": "green tea", "filters": {"user_id": "priya"}, "top_k": 5}
    flagged = cli("query", "-", "--user-id", "omar", input=json.dumps(request))
    assert flagged.exit_code == 0, flagged.stderr
    assert [h["user_id"] for h in json.loads(flagged.stdout)] == ["omar"]
    # The spec's nested filters, or the same key at the top level: one field.
    top = cli("query", "-", input=json.dumps({"query": "green tea", "user_id": "priya"}))
    assert [h["user_id"] for h in json.loads(top.stdout)] == ["priya"]
    # A number given as 0 is given (not taken for "left out").
    none = cli("query", "green tea", "--importance-max", "0", "--json")
    assert none.exit_code == 0 and json.loads(none.stdout) == []


def test_every_validation_error_reads_by_one_rule() -> None:
    with pytest.raises(UsageError) as acb:
        parse_request({"max_tokens": 0, "colour": "red"})
    assert str(acb.value) == ("bad acb request: max_tokens: Input should be greater than or "
                              "equal to 1 (and 1 more)")
    with pytest.raises(UsageError) as query:
        parse_query_request({"query": "x", "top_k": 0, "colour": "red"})
    assert str(query.value).startswith("bad query request: top_k: Input should be greater "
                                       "than or equal to 1 (and 1 more)")


def test_a_request_is_validated_once_on_its_way_to_the_operation(tmp_path, monkeypatch):
    """FastAPI validates an HTTP body against the operation's model and the route hands that
    model on; an MCP tool builds the model from its arguments once; the operation itself takes
    only the model and never validates it again."""
    from memcli.operations import requests
    from memcli.service import api

    seen: list[str] = []
    real = requests.validated

    def counting(model, data, *args, **kwargs):
        seen.append(model.__name__)
        return real(model, data, *args, **kwargs)

    monkeypatch.setattr(requests, "validated", counting)
    with running_api(tmp_path, monkeypatch) as served, served.client() as client:
        assert client.post("/api/v1/query", json={"query": "green tea"}).status_code == 200
        bad = client.post("/api/v1/query", json={"query": "tea", "top_k": 0})
        assert bad.status_code == 422 and "top_k" in bad.json()["error"]
        assert client.post("/api/v1/acb/build", json={"max_tokens": 300}).status_code == 200
    assert seen == []  # FastAPI's validation was the only one

    async def tools() -> tuple[object, object]:
        from mcp import Client

        server = build_mcp(load_settings(served.db), Binding(), ("memory_query",))
        async with Client(server) as mcp:
            good = await mcp.call_tool("memory_query", {"query": "green tea", "top_k": 3})
            assert seen == ["QueryRequest"]  # built once, by the tool
            wrong = await mcp.call_tool("memory_query", {"query": "   "})
        return good, wrong

    good, wrong = anyio.run(tools)
    assert not good.is_error
    assert wrong.is_error and wrong.content[0].text.count("\n") == 0
    assert "query" in wrong.content[0].text
    with pytest.raises(TypeError, match="takes a QueryRequest"):
        api.query(None, Binding(), {"query": "green tea"})


def test_all_tenants_with_a_tenant_names_the_field_flag(cli) -> None:
    """The refusal of `--all-tenants` beside a tenant names the flag `--help` shows."""
    cli("ingest", "--text", "hello", "--user-id", "u")
    for args in (("purge", "--all-tenants", "--tenant", "t1", "--user-id", "u", "--dry-run"),
                 ("export", "--all-tenants", "--tenant", "t1")):
        out = cli(*args)
        assert out.exit_code == 2, (args, out.stderr)
        assert "--all-tenants and --tenant-id exclude each other" in out.stderr, out.stderr
