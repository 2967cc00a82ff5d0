"""`memcli mcp` (an MCP server on stdio) and `memcli mcp install` (client config snippets).

`memcli mcp` forwards to the daemon (`memcli serve`) when one serves the database: a stdlib
bridge (memcli/cli/mcp_bridge.py), so the agent's `initialize` is answered by a warm process
and every session shares one writer. Without a daemon it serves in-process with the MCP SDK
(memcli/service/mcp_server.py), its imports paid once per session. The identity options are shared
with `memcli hook` (memcli/cli/hook.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from memcli.cli.options import DbOpt, old_spellings
from memcli.errors import UsageError

TenantOpt = Annotated[str | None, typer.Option(
    "--tenant-id", envvar="MEMCLI_TENANT", show_envvar=True,
    help="Tenant this server answers for (default: the configured tenant).")]
UserOpt = Annotated[str | None, typer.Option(
    "--user-id", envvar="MEMCLI_USER", show_envvar=True,
    help="User the tools read and write as (default: not bound: the tenant's memories).")]
AgentOpt = Annotated[str | None, typer.Option(
    "--agent-id", envvar="MEMCLI_AGENT", show_envvar=True,
    help="Agent id: its category allowlist applies, its events are tagged with it.")]
AppOpt = Annotated[str | None, typer.Option(
    "--app-id", envvar="MEMCLI_APP", show_envvar=True, help="App id (app-scoped memory).")]
# The spellings of the identity options before they matched every other command's (`mcp`,
# `mcp install`, `hook`).
OLD_IDENTITY = {"tenant_id": "--tenant", "user_id": "--user", "agent_id": "--agent",
                "app_id": "--app"}
ToolsOpt = Annotated[str | None, typer.Option(
    "--tools", help="Tools to offer: 'default', 'all', or a comma-separated list of names, "
                    "with or without `memory_` (query,build_acb,record_event,get_artifact,"
                    "query_decisions,remember,forget,record_decision,record_task,update_task,"
                    "history,app_memories,purge_app).")]


def serve_stdio(db: str | None, tenant: str | None, user: str | None, agent: str | None,
                app: str | None, tools: str | None, no_daemon: bool) -> int:
    """Forward to the daemon, else serve in-process. Returns the exit code."""
    import os

    from memcli.cli import mcp_bridge

    # The entry point removes `--no-daemon` from the argv Typer sees (memcli.service.daemon.client):
    # the original command line and MEMCLI_NO_DAEMON still say it.
    no_daemon = (no_daemon or "--no-daemon" in sys.argv[1:]
                 or os.environ.get("MEMCLI_NO_DAEMON", "") not in ("", "0"))
    socket_path = None if no_daemon else mcp_bridge.daemon_http_socket(
        str(db) if db is not None else None, os.environ)
    headers = mcp_bridge.scope_headers(tenant, user, agent, app)
    if tools:
        headers["X-Memcli-Tools"] = tools
    if socket_path is not None and all(v.isascii() for v in headers.values()):
        return mcp_bridge.forward(socket_path, headers)  # the entry point's bridge missed it
    from memcli.cli.output import errors

    with errors():
        from memcli.config import load_settings
        from memcli.service.api import Binding
        from memcli.service.mcp_server import run_stdio, select_tools

        settings = load_settings(db)
        selected = select_tools(tools or settings.mcp_tools)
        run_stdio(settings, Binding(tenant=tenant, user_id=user, agent=agent, app_id=app),
                  selected)
    return 0


@old_spellings(OLD_IDENTITY)
def mcp_cmd(
    ctx: typer.Context,
    db: DbOpt = None, tenant_id: TenantOpt = None, user_id: UserOpt = None,
    agent_id: AgentOpt = None, app_id: AppOpt = None, tools: ToolsOpt = None,
    no_daemon: Annotated[bool, typer.Option(
        "--no-daemon", help="Serve in-process even when `memcli serve` runs.")] = False,
) -> None:
    """Serve memcli's memory tools over MCP on stdin/stdout (what a coding agent starts).

    Forwards to `memcli serve` when it runs for the database (fast start, one writer for
    every session); else serves in-process. Identity is bound here, never by the model."""
    if ctx.invoked_subcommand is not None:
        return
    raise typer.Exit(serve_stdio(db, tenant_id, user_id, agent_id, app_id, tools, no_daemon))


@old_spellings(OLD_IDENTITY)
def install_cmd(
    client: Annotated[str, typer.Option(
        "--client", help="claude-code, claude-desktop, cursor, vscode or codex.")],
    write: Annotated[bool, typer.Option(
        "--write", help="Merge into the client's config file (old file kept as .bak) "
                        "instead of printing.")] = False,
    config_path: Annotated[Path | None, typer.Option(
        "--config-path", help="The client's config file (default: where the client "
                              "reads it).")] = None,
    name: Annotated[str, typer.Option("--name", help="Server name in the config.")] = "memcli",
    command: Annotated[str | None, typer.Option(
        "--command", help="Command the client starts (default: this memcli, by its "
                          "absolute path).")] = None,
    db: DbOpt = None, tenant_id: TenantOpt = None, user_id: UserOpt = None,
    agent_id: AgentOpt = None, app_id: AppOpt = None, tools: ToolsOpt = None,
) -> None:
    """Print (or --write) the config snippet that makes a coding agent start `memcli mcp`
    on the database this shell uses (`--db`, else $MEMCLI_DB, ...: pinned in the snippet)."""
    from memcli.cli import mcp_install
    from memcli.cli.output import errors

    with errors():
        from memcli.config import load_settings

        # A config the server could not start with is refused here. The database is pinned
        # (`--db`, absolute): the client starts the server without this shell's MEMCLI_DB,
        # data folder or working folder, and would open another memory.
        settings = load_settings(db)
        if client not in mcp_install.CLIENTS:
            raise UsageError(f"unknown client: {client}",
                             "choose " + ", ".join(mcp_install.CLIENTS))
        if tools:
            from memcli.service.mcp_server import select_tools

            # Checked, and written by today's names (a dotted one goes in 0.2.0).
            selected = select_tools(tools)
            if tools.strip() not in ("all", "default"):
                tools = ",".join(selected)
        location = _absolute(str(settings.db))
        _refuse_a_password(location)
        args = ["mcp"]
        for flag, value in (("--db", location),
                            ("--tenant-id", tenant_id), ("--user-id", user_id),
                            ("--agent-id", agent_id), ("--app-id", app_id), ("--tools", tools)):
            if value:
                args += [flag, value]
        program = command or _this_program()
        if not write:
            print(mcp_install.snippet(client, name, program, args))
            return
        from memcli.config import mcp_client_config_paths

        path = config_path or mcp_client_config_paths()[client]
        import json

        done = mcp_install.write(client, path, name, program, args)
        print(json.dumps(done, ensure_ascii=False))


def register(app: typer.Typer) -> None:
    mcp_app = typer.Typer(help="MCP server for coding agents (stdio), and its client config.",
                          invoke_without_command=True, no_args_is_help=False)

    mcp_app.callback()(mcp_cmd)
    mcp_app.command("install")(install_cmd)
    app.add_typer(mcp_app, name="mcp")


def _this_program() -> str:
    """This memcli's absolute path, so a client with a short PATH finds it (else `memcli`)."""
    import shutil

    argv0 = Path(sys.argv[0])
    if argv0.name == "memcli" and argv0.exists():
        return str(argv0.resolve())
    return shutil.which("memcli") or "memcli"


def _refuse_a_password(location: str) -> None:
    """A password in a PostgreSQL location would sit in plain text in the client's config
    (and, for Claude Code, in the shell history of the printed line): refused, naming the
    places libpq reads a password from instead, as memcli's PostgreSQL guide does."""
    import shlex

    from memcli.core.locations import without_password

    bare = without_password(location)
    if bare is None:
        return
    raise UsageError(
        "the database location holds a password, which the client's config would keep in "
        "plain text",
        "put the password in ~/.pgpass, the file PGPASSFILE names or a service file, and give "
        f"--db {shlex.quote(bare)}; see docs/guides/postgresql.md")


def _absolute(db: str) -> str:
    """A file location as an absolute path (the client starts the server from anywhere); a
    URL or connection string as given."""
    from memcli.core.locations import is_dsn, is_url

    if is_url(db) or is_dsn(db):
        return db
    return str(Path(db).expanduser().resolve())
