"""Helpers for the MCP tests: the environment of a `memcli mcp` child process, the SDK's
client over stdio and over streamable HTTP, and uvicorn serving the MCP endpoint on 127.0.0.1
or a unix socket (in a thread, stopped by the context manager)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# A config file without the SPLADE leg (a real model, slow): these tests are about MCP.
CONFIG = "retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0, entity: 0.5, trigram: 0.5}\n"


def child_env(tmp_path: Path, db: Path) -> dict[str, str]:
    """The environment of a `memcli` child: its own home, the hash embedder, the database,
    a runtime dir of its own (so no real daemon is found), never the parent's MEMCLI_*."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCLI_")}
    run = tmp_path / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"),
               XDG_CONFIG_HOME=str(home / "config"), XDG_RUNTIME_DIR=str(run),
               MEMCLI_DB=str(db), MEMCLI_EMBEDDER="hash", MEMCLI_CONFIG=str(config),
               MEMCLI_AUTOSTART="0")  # no daemon starts by itself (tests/conftest.py)
    return env


def stdio_params(env: dict[str, str], *args: str) -> Any:
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=["-m", "memcli", "mcp", *args],
                                 env=env)


def payload(result: Any) -> dict[str, Any]:
    """A successful tool result's JSON (`{"scope": ..., "result": ...}`)."""
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def error_text(result: Any) -> str:
    assert result.is_error, result.content[0].text
    return result.content[0].text


def mcp_app(db: Path, *, tools: tuple[str, ...] | None = None) -> Any:
    """A Starlette app with memcli's MCP endpoint at /mcp over `db` (its lifespan runs the
    SDK's session manager), as `memcli serve` mounts it."""
    from starlette.applications import Starlette

    from memcli.config import load_settings
    from memcli.service.api import Service
    from memcli.service.mcp_server import http_routes

    settings = load_settings(db)
    service = Service(settings)
    routes, lifespan = http_routes(settings, service, tools)

    @contextlib.asynccontextmanager
    async def life(app: Any) -> Any:
        try:
            async with lifespan():
                yield
        finally:
            service.close()

    return Starlette(routes=routes, lifespan=life)


@contextlib.contextmanager
def serving(app: Any, *, uds: Path | None = None) -> Iterator[str]:
    """uvicorn serving `app` on 127.0.0.1 (an ephemeral port) or on the unix socket `uds`,
    in a thread; yields the base URL (or the socket path); stopped and joined on exit."""
    import uvicorn

    if uds is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(uds))
        where = str(uds)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        where = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        yield where
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        if uds is not None:
            with contextlib.suppress(FileNotFoundError):
                uds.unlink()


def http_client(url: str, headers: dict[str, str] | None = None) -> Any:
    """The SDK's client for streamable HTTP at `url`, sending `headers`."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers or {},
                                                                           timeout=60))
    return Client(transport, mode="legacy")


@contextlib.contextmanager
def daemon(env: dict[str, str], db: Path) -> Iterator[Path]:
    """A real `memcli serve --db DB` child process (tests/support/daemon.py's, so the guard
    against leftover daemons sees it); yields its HTTP socket once it accepts connections."""
    from memcli.service.daemon import paths
    from tests.support.daemon import Daemon, wait_for_socket

    http_sock = Path(paths.endpoint(str(db), env).http_socket)
    with Daemon(db, env) as served:
        assert served.proc is not None
        wait_for_socket(http_sock, served.proc)
        yield http_sock
