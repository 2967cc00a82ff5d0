"""A loopback port where a connection is refused, for the whole of a test.

Bound and never listening: a connection to it is refused, and no other process (the other
xdist worker's test server, a PostgreSQL server picking its port) can bind it meanwhile, as it
could a port bound and released at once ("free a moment ago").
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]
