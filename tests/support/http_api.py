"""A real uvicorn server on 127.0.0.1 for the HTTP API tests, and the token file it trusts.

The server runs in a thread of the test process (uvicorn installs no signal handlers off the
main thread) on a socket bound to a free port; leaving the block stops it and joins the thread,
so no server outlives its test."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn

from memcli.config import load_settings
from memcli.service.http.auth import load_auth
from memcli.service.http.fastapi_app import build_app

NO_SPARSE = "retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0, entity: 0.5, trigram: 0.5}\n"
# Tokens of the test token file: an operator (unbound) and one bound to each tenant.
OPERATOR = "operator-token-0123456789abcdef"
T1_TOKEN = "tenant-one-token-0123456789abcd"
T2_TOKEN = "tenant-two-token-0123456789abcd"


@contextlib.contextmanager
def serving(app, host: str = "127.0.0.1", uds: Path | None = None) -> Iterator[str]:
    """`app` served by uvicorn on a free port of `host` (or on the Unix socket `uds`); yields
    its base URL."""
    if uds is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(uds))
        uds.chmod(0o600)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((host, 0))
    port = 0 if uds is not None else sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        yield "http://localhost" if uds is not None else f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()
        assert not thread.is_alive(), "the server thread did not stop"


def write_token_file(path: Path, lines: list[str], mode: int = 0o600) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(mode)
    return path


@dataclass
class Api:
    """A running API and clients for it, one per token."""

    url: str
    db: Path
    uds: Path | None = None

    def client(self, token: str | None = OPERATOR, **headers: str) -> httpx.Client:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        transport = httpx.HTTPTransport(uds=str(self.uds), verify=_TLS) if self.uds else None
        return httpx.Client(
            base_url=self.url, headers=headers, timeout=60, transport=transport, verify=_TLS
        )


# httpx's TLS context, made once: a client makes its own by default, reading the CA bundle
# (~30 ms of CPU per client; the suite makes a few hundred), and these talk plain HTTP anyway.
_TLS = httpx.create_ssl_context()


@contextlib.contextmanager
def running_api(tmp_path: Path, monkeypatch, uds: Path | None = None,
                **auth_options) -> Iterator[Api]:
    """The HTTP API over a fresh database in tmp_path (hash embedder, no SPLADE leg), with a
    token file holding OPERATOR, T1_TOKEN (tenant t1) and T2_TOKEN (tenant t2)."""
    config = tmp_path / "config.yaml"
    config.write_text(NO_SPARSE, encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    db = tmp_path / "memory.db"
    settings = load_settings(db)
    options = {"token_file": write_token_file(tmp_path / "tokens", [
        "# tokens for the tests", OPERATOR, f"{T1_TOKEN} tenant=t1", f"{T2_TOKEN} tenant=t2"]),
        "no_token": False, **auth_options}
    auth = load_auth(host="127.0.0.1", port=0, settings=settings, **options)
    with serving(build_app(settings, auth), uds=uds) as url:
        yield Api(url, db, uds)
