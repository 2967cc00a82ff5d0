"""`memcli mcp install`: the config snippet each coding agent reads, printed or merged in.

Formats, from each client's documentation:
- Claude Desktop (claude_desktop_config.json) and Cursor (~/.cursor/mcp.json, or a project's
  .cursor/mcp.json): `{"mcpServers": {NAME: {"command", "args", "env"}}}`
  (modelcontextprotocol.io "Connect to local MCP servers"; docs.cursor.com "Model Context
  Protocol").
- VS Code (.vscode/mcp.json): `{"servers": {NAME: {"type": "stdio", "command", "args"}}}`
  (code.visualstudio.com "Use MCP servers in VS Code").
- Codex (~/.codex/config.toml): a `[mcp_servers.NAME]` table with `command`, `args`, `env`
  (developers.openai.com/codex "MCP"; openai/codex docs/config.md).
- Claude Code: `claude mcp add --transport stdio --scope user NAME -- COMMAND ARGS...`
  (docs.claude.com "Connect Claude Code to tools via MCP"); `--write` writes the project's
  .mcp.json instead (`{"mcpServers": {NAME: {"type": "stdio", ...}}}`), the file `--scope
  project` creates.

`--write` merges: other servers and settings in the file are kept, only NAME is replaced, and
the old file is copied to `<file>.bak` first.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

from memcli.errors import UsageError

CLIENTS = ("claude-code", "claude-desktop", "cursor", "vscode", "codex")


def server_entry(client: str, command: str, args: list[str],
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """One server's entry in a JSON client config."""
    entry: dict[str, Any] = {"command": command, "args": args}
    if client in ("vscode", "claude-code"):
        entry = {"type": "stdio", **entry}
    if env:
        entry["env"] = env
    return entry


def _servers_key(client: str) -> str:
    return "servers" if client == "vscode" else "mcpServers"


def snippet(client: str, name: str, command: str, args: list[str],
            env: dict[str, str] | None = None) -> str:
    """What `memcli mcp install --client CLIENT` prints."""
    if client == "claude-code":
        env_flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
        return shlex.join(["claude", "mcp", "add", "--transport", "stdio", "--scope", "user",
                           *env_flags, name, "--", command, *args])
    if client == "codex":
        return codex_table(name, command, args, env)
    document = {_servers_key(client): {name: server_entry(client, command, args, env)}}
    return json.dumps(document, indent=2, ensure_ascii=False)


def _toml_string(value: str) -> str:
    # A JSON string is a valid TOML basic string (same escapes, \uXXXX included).
    return json.dumps(value, ensure_ascii=False)


def codex_table(name: str, command: str, args: list[str],
                env: dict[str, str] | None = None) -> str:
    """The `[mcp_servers.NAME]` table of Codex's config.toml."""
    lines = [f"[mcp_servers.{_toml_key(name)}]",
             f"command = {_toml_string(command)}",
             "args = [" + ", ".join(_toml_string(a) for a in args) + "]"]
    if env:
        pairs = ", ".join(f"{_toml_key(k)} = {_toml_string(v)}" for k, v in env.items())
        lines.append(f"env = {{ {pairs} }}")
    return "\n".join(lines)


def _toml_key(key: str) -> str:
    bare = key.replace("_", "").replace("-", "").isalnum() and key.isascii()
    return key if bare else _toml_string(key)


def write(client: str, path: Path, name: str, command: str, args: list[str],
          env: dict[str, str] | None = None) -> dict[str, Any]:
    """Merge the server into the client's config file at `path` (created if missing; the
    previous file kept as `<path>.bak`). Returns what was done."""

    old = path.read_text(encoding="utf-8") if path.exists() else None
    if client == "codex":
        new = _merge_toml(old or "", name, codex_table(name, command, args, env), path)
    else:
        try:
            document = json.loads(old) if old and old.strip() else {}
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path} is not valid JSON ({exc.msg}, line {exc.lineno})",
                             "fix it or pass another --config-path") from None
        if not isinstance(document, dict):
            raise UsageError(f"{path} does not hold a JSON object", "pass another --config-path")
        servers = document.setdefault(_servers_key(client), {})
        if not isinstance(servers, dict):
            raise UsageError(f"{path}: {_servers_key(client)} is not an object",
                             "fix it or pass another --config-path")
        servers[name] = server_entry(client, command, args, env)
        new = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    if old is not None:
        backup = path.with_name(path.name + ".bak")
        shutil.copy2(path, backup)
    tmp = path.with_name(path.name + ".memcli-tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(path)
    return {"client": client, "path": str(path), "server": name,
            "backup": str(backup) if backup else None}


def _merge_toml(old: str, name: str, table: str, path: Path) -> str:
    """`old` with the `[mcp_servers.NAME]` table (and its sub-tables) replaced by `table`, or
    `table` appended. Parsed before and after, so a broken file is refused, never made worse."""
    import tomllib

    try:
        tomllib.loads(old)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path} is not valid TOML ({exc})",
                         "fix it or pass another --config-path") from None
    header = f"[mcp_servers.{_toml_key(name)}"
    kept, skipping = [], False
    for line in old.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            skipping = stripped.startswith(header + "]") or stripped.startswith(header + ".")
        if not skipping:
            kept.append(line)
    body = "\n".join(kept).rstrip()
    new = (body + "\n\n" if body else "") + table + "\n"
    try:
        tomllib.loads(new)  # e.g. the server also defined inline: never write a broken file
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"cannot merge into {path} ({exc})",
                         f"remove the {name!r} server from it by hand, then retry") from None
    return new
