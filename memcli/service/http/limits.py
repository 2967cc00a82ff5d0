"""The request body limit of `memcli serve`'s HTTP app, enforced before a body is buffered.

An ASGI middleware rather than a check after `request.body()`: a body over the limit is
refused (413) on its `Content-Length` before one byte of it is read, and a chunked body (no
length given) is counted as its `http.request` messages arrive and refused once the count
passes the limit, before any route runs (the API's or the MCP SDK's): the server never holds
more than the limit of one request. Checked after reading, three concurrent 100 MB posts took
the daemon from 512 to 921 MB resident (bench/results/experiments.md; bench/trust_attacks.py
measures it).
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

MAX_BODY_BYTES = 32 * 1024 * 1024  # a batch of events; anything bigger is refused (413)


class BodyLimit:
    """ASGI middleware refusing HTTP request bodies over `limit` bytes with 413, before the
    route (the API's, or the MCP SDK's) runs."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None:
            # The server reads exactly this many bytes (h11 holds a body to its length).
            if length.strip().isdigit() and int(length) > self.limit:
                await _refuse(scope, receive, send, self.limit)  # nothing of it read
                return
            await self.app(scope, receive, send)
            return
        # Chunked, or no body: read it here, at most `limit` bytes, then hand it on whole
        # (the route would have read it whole anyway).
        parts: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return
            parts.append(message.get("body", b""))
            received += len(parts[-1])
            if received > self.limit:
                await _refuse(scope, receive, send, self.limit)  # the rest is never read
                return
            if not message.get("more_body", False):
                break
        body = b"".join(parts)
        parts.clear()
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _refuse(scope: dict[str, Any], receive: Any, send: Any, limit: int) -> None:
    """413 with the API's error body; the connection is closed after it (the body unread)."""

    error = f"the request body is over {limit} bytes (send fewer events per request)"
    response = JSONResponse({"error": error, "exit_code": 2}, status_code=413,
                            headers={"Connection": "close"})
    await response(scope, receive, send)
