"""`memcli serve --port`'s TCP socket: Nagle's algorithm off on every connection it accepts.

With Nagle on, a response's body waits for the client's ACK of its headers, which the client
delays by up to 40 ms: every request after the first on a kept-alive connection (a browser's
next page, an agent's next call) took 40 ms more. Checked on the socket itself, not by timing.
"""

from __future__ import annotations

import asyncio
import socket

from memcli.service.daemon.http_process import _tcp_socket


def test_accepted_connections_have_nagle_off():
    listener = _tcp_socket("127.0.0.1", 0)
    try:
        with socket.create_connection(listener.getsockname()[:2]):
            conn, _ = listener.accept()
            with conn:
                assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        listener.close()


def test_asyncio_serves_the_socket_with_nagle_off():
    """What uvicorn does with the bound socket: asyncio's server transports."""
    seen: list[int] = []

    async def main() -> None:
        listener = _tcp_socket("127.0.0.1", 0)
        done = asyncio.Event()

        def accepted(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()
            done.set()

        server = await asyncio.start_server(accepted, sock=listener)
        async with server:
            _reader, writer = await asyncio.open_connection(*listener.getsockname()[:2])
            await asyncio.wait_for(done.wait(), 30)
            writer.close()

    asyncio.run(main())
    assert seen and seen[0] != 0
