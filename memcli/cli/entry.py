"""The `memcli` entry point: a running `memcli serve` answers the command, else the Typer app.

Only the standard library is imported until the daemon client (`memcli.service.daemon.client`) knows
whether a daemon answered: forwarding must not pay for pydantic, numpy or Typer.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    if sys.argv[1:2] == ["mcp"]:  # an agent's MCP session: bridge to a daemon (mcp_bridge.py)
        from memcli.cli.mcp_bridge import main_hook as mcp_hook

        code = mcp_hook(sys.argv[1:])
        if code is not None:
            _exit_now(code)
    from memcli.service.daemon.client import main_hook

    code, argv = main_hook(sys.argv[1:])
    if code is not None:
        _exit_now(code)
    from memcli.config import thread_defaults

    thread_defaults()  # before any native library loads
    # pydantic otherwise scans every installed package's entry points for plugins (~20 ms of
    # each start-up); memcli uses none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from memcli.cli.app import run_typer

    run_typer(argv)


def _exit_now(code: int) -> None:
    """End a forwarded command: its output went straight from the daemon to our stdout and
    stderr, so there is nothing to flush but our own (nothing) and no teardown worth running."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass
    os._exit(code)
