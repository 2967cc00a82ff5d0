"""The `memcli` entry point: the fast path for `query` and `acb build`, else the Typer app."""

from __future__ import annotations

import os
import sys


def main() -> None:
    from memcli.config import thread_defaults

    thread_defaults()  # before any native library loads
    # pydantic otherwise scans every installed package's entry points for plugins (~20 ms of
    # each start-up); memcli uses none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from memcli.cli import fast

    if fast.run(sys.argv[1:]):
        _exit_now()
    from memcli.cli.app import run_typer

    run_typer()


def _exit_now() -> None:
    """End a finished fast-path command without the interpreter's teardown.

    Everything is written and closed by now (the database inside the command's `with`), and
    tearing down the modules a query imports (pydantic, numpy, the models) measured ~40 ms of
    a ~250 ms process: more than parsing the command line. Output is flushed first."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader went away: as `errors()` does, not an error
        pass
    os._exit(0)
