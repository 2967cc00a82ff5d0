"""The docs site's generated references are current: each is generated again, in memory, from
the code (the Typer app, /openapi.json, the MCP server) and compared with the committed page, so
a new command, flag, route or tool without regenerated docs fails here, naming the command that
regenerates them."""

from __future__ import annotations

import pytest

from docs import gen


@pytest.mark.parametrize("name", sorted(gen.PAGES))
def test_the_generated_reference_is_current(name: str) -> None:
    page = gen.REFERENCE / name
    assert page.exists(), f"docs/reference/{name} is missing: run `{gen.REGENERATE}`"
    committed = page.read_text(encoding="utf-8")
    assert committed == gen.PAGES[name](), (
        f"docs/reference/{name} is out of date: run `{gen.REGENERATE}` and commit the result")


def test_the_cli_reference_names_every_command() -> None:
    from tests.cli.test_cli import COMMANDS

    text = (gen.REFERENCE / "cli.md").read_text(encoding="utf-8")
    missing = [" ".join(p) for p in COMMANDS if f"## memcli {' '.join(p)}\n" not in text]
    assert missing == []


def test_the_mcp_reference_names_every_tool() -> None:
    from memcli.service.mcp_server import TOOLS

    text = (gen.REFERENCE / "mcp.md").read_text(encoding="utf-8")
    assert [name for name in TOOLS if f"## {name}\n" not in text] == []


def test_the_http_reference_names_every_route() -> None:
    doc = gen.openapi_document()
    text = (gen.REFERENCE / "http.md").read_text(encoding="utf-8")
    routes = [f"`{method.upper()} {path}`" for path, ops in doc["paths"].items() for method in ops]
    assert len(routes) == 14
    assert [route for route in routes if route not in text] == []
