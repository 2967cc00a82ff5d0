"""The MCP conformance check, run through the official `mcp` client over any transport (the
SDK's in-memory one, stdio, streamable HTTP): what a client that validates tools as Claude
Desktop, claude.ai and OpenAI-backed clients do would see.

`check_server(client)` lists the tools and, for each one: its name against both clients' name
rules; its input and output schemas against the JSON Schema metaschema (draft 2020-12, MCP's
dialect), the input one without a top-level `oneOf`/`anyOf`/`allOf` (the Anthropic API refuses
those); a description on every input property, nested ones too; the documented example in
its description, valid against its input schema, called (a lookup of an id the fresh database
does not hold may answer "not found", nothing else may fail); the result's `structuredContent`
against its `outputSchema`, and its text block the same JSON; the example with one argument
more, refused with a tool error naming it. Then the tools whose example names an id are called
with ids that exist, so every tool's output is checked at least once.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jsonschema import Draft202012Validator

from memcli.service.mcp_server import TOOLS

# Claude Desktop / claude.ai (a failing name withholds the whole server's tools), and OpenAI
# function names (Codex and other OpenAI-backed clients).
NAME_RULES = (re.compile(r"^[a-zA-Z0-9_-]{1,64}$"), re.compile(r"^[a-zA-Z0-9_-]+$"))
# What a lookup of an id the database does not hold answers.
NOT_FOUND = re.compile(r"\bno (memory|artifact|task|decision) with id|\bno artifact\b")


def undescribed(schema: dict[str, Any], where: str = "") -> list[str]:
    """The properties of `schema`, and of the objects nested in it, without a description."""
    missing = []
    for name, prop in (schema.get("properties") or {}).items():
        if not prop.get("description"):
            missing.append(f"{where}{name}")
        for nested in [prop, *prop.get("anyOf", [])]:
            missing += undescribed(nested, f"{where}{name}.")
    return missing


def structured(tool: Any, result: Any) -> dict[str, Any]:
    """A successful result's structuredContent, checked against the tool's outputSchema and
    against its text block (older clients read that one)."""
    assert not result.is_error, (tool.name, result.content[0].text)
    content = result.structured_content
    assert isinstance(content, dict), tool.name
    Draft202012Validator(tool.output_schema).validate(content)
    assert json.loads(result.content[0].text) == content, tool.name
    return content


async def check_server(client: Any) -> dict[str, dict[str, Any]]:
    """Run the check over `client` (connected, every tool offered); returns each tool's
    checked structuredContent."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == set(TOOLS)
    answers: dict[str, dict[str, Any]] = {}
    for name, tool in tools.items():
        assert all(rule.match(name) for rule in NAME_RULES), name
        Draft202012Validator.check_schema(tool.input_schema)
        assert tool.input_schema["type"] == "object", name
        # The Anthropic API refuses the whole tool list when one input schema has these at
        # its top level (anthropics/claude-code #5973).
        assert not {"oneOf", "anyOf", "allOf"} & set(tool.input_schema), name
        # Self-contained: Codex reads a `$ref` property as a string (openai/codex #3152).
        assert "$ref" not in json.dumps(tool.input_schema), name
        assert tool.output_schema is not None, f"{name} has no outputSchema"
        Draft202012Validator.check_schema(tool.output_schema)
        assert tool.output_schema["type"] == "object", name
        assert undescribed(tool.input_schema) == [], name
        example = TOOLS[name].example
        assert f"Example: {json.dumps(example, ensure_ascii=False)}" in tool.description, name
        Draft202012Validator(tool.input_schema).validate(example)
        result = await client.call_tool(name, example)
        if result.is_error:
            assert NOT_FOUND.search(result.content[0].text), (name, result.content[0].text)
        else:
            answers[name] = structured(tool, result)
        refused = await client.call_tool(name, {**example, "colour": "red"})
        assert refused.is_error and "colour" in refused.content[0].text, name
        assert "\n" not in refused.content[0].text, name  # one line, as the CLI's errors
    # The tools whose example names an id, with ids that exist.
    big = "\n".join(f"line {i}: " + "x" * 60 for i in range(1500))  # over 64 KB: an artifact
    result = await client.call_tool(
        "memory_record_event",
        {
            "kind": "tool_result",
            "content": {"tool": "fs.read_file", "path": "big.log", "text": big},
        },
    )
    artifact = structured(tools["memory_record_event"], result)["result"]["artifacts"][0]
    remembered = answers["memory_remember"]["result"]["id"]
    for name, arguments in (
        ("memory_get_artifact", {"artifact_id": artifact}),
        ("memory_history", {"memory_id": remembered}),
        ("memory_forget", {"memory_id": remembered}),
        ("memory_purge_app", {"app_id": "notes-app"}),
    ):
        answers.setdefault(name, structured(tools[name], await client.call_tool(name, arguments)))
    assert set(answers) == set(TOOLS)
    return answers
