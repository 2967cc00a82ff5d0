"""The HTTP server on 127.0.0.1 under the scripted stubs (llmstub, rerankstub): a free port,
a thread serving it, and a clean stop (not a test module)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["StubHandler", "StubServer"]


class StubHandler(BaseHTTPRequestHandler):
    """A stub's request handler: reads a JSON body, sends bytes, logs nothing."""

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output clean

    def read_body(self) -> Any:
        """The request's JSON body; {} when empty, {"_raw": text} when not JSON."""
        length = int(self.headers.get("Content-Length") or 0)
        text = self.rfile.read(length).decode("utf-8", "replace")
        try:
            return json.loads(text) if text else {}
        except json.JSONDecodeError:
            return {"_raw": text}

    def send_body(self, status: int, body: Any, content_type: str = "application/json",
                  headers: dict[str, str] | None = None) -> None:
        """`body` as it is (text or bytes), or as JSON."""
        if isinstance(body, str | bytes):
            data = body.encode() if isinstance(body, str) else body
        else:
            data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test): nothing to tell it


class StubServer:
    """`start()` (or `with`) binds a free port; `close()` stops it. A stub gives its request
    handler class in `handler()`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Set on close so handlers sleeping out a `delay` wake up instead of outliving the test.
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    def handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def start(self) -> Self:
        if self._server is None:
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
            self._server.daemon_threads = True
            threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            ).start()
        return self

    def close(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        assert self._server is not None, "stub not started"
        return self._server.server_address[1]
