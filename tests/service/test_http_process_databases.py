"""The daemon's HTTP process serving every database, as a real process: its control lines
(`e<location>`, `c<location>`, the pipe's end) and its reports (`O`/`C<location>`), two
databases' rows apart over HTTP and MCP; and a real per-database `memcli serve` refusing a
request for another database (421)."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.daemon import ROOT, daemon_env, wait_for_socket
from tests.support.mcp import daemon, payload
from tests.support.sockets import short_tempdir

pytestmark = pytest.mark.daemon

# The HTTP process as the user's daemon forks it (memcli/service/daemon/main_process.py):
# its plan prepared (the unix socket bound), then `run` with the control and report pipes.
_HTTP_PROCESS = """
import sys
from memcli.config import load_settings
from memcli.service.daemon import http_process, paths
settings = load_settings()
ep = paths.endpoint_for_socket(sys.argv[1])
log = lambda line: print(line, file=sys.stderr, flush=True)
plan = http_process.HttpPlan.prepare(settings, ep, http_process.HttpOptions(), 5.0, log)
http_process.run(settings, plan, None, int(sys.argv[2]), int(sys.argv[3]), log,
                 all_databases=True, idle_close=0)
"""


class HttpProcess:
    """The running process, its control pipe and the lines it reports."""

    def __init__(self, proc: subprocess.Popen, control: int, reports: int) -> None:
        self.proc, self.control, self.reports = proc, control, reports
        self.lines: list[bytes] = []
        self._buffer = b""

    def order(self, line: bytes) -> None:
        os.write(self.control, line + b"\n")

    def wait_for(self, line: bytes, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while line not in self.lines:
            left = deadline - time.monotonic()
            assert left > 0, f"no {line!r} among {self.lines}"
            if select.select([self.reports], [], [], left)[0]:
                data = os.read(self.reports, 65536)
                assert data, f"the process ended before {line!r}: {self.lines}"
                *done, self._buffer = (self._buffer + data).split(b"\n")
                self.lines += done


@contextlib.contextmanager
def http_process(folder: Path, env: dict[str, str]) -> Iterator[HttpProcess]:
    control_r, control_w = os.pipe()
    reports_r, reports_w = os.pipe()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _HTTP_PROCESS,
            str(folder / "d.sock"),
            str(control_r),
            str(reports_w),
        ],
        env=env,
        cwd=ROOT,
        pass_fds=(control_r, reports_w),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    os.close(control_r)
    os.close(reports_w)
    try:
        wait_for_socket(folder / "d.http.sock", proc)
        yield HttpProcess(proc, control_w, reports_r)
    finally:
        with contextlib.suppress(OSError):
            os.close(control_w)  # its end: close every database and exit
        try:
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(reports_r)
            proc.stderr.close()


def _wal(db: Path) -> int:
    wal = Path(f"{db}-wal")
    return wal.stat().st_size if wal.exists() else 0


def _client(sock: Path) -> httpx.Client:
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://localhost", timeout=60
    )


def test_the_http_process_serves_every_database_and_closes_one_when_told() -> None:
    with tempfile.TemporaryDirectory(dir=short_tempdir()) as name:
        folder = Path(name)
        a, b, default = folder / "a.db", folder / "b.db", folder / "default.db"
        env = daemon_env(folder / "home", default)
        sock = folder / "d.http.sock"

        async def mcp_texts(db: Path, text: str) -> list[str]:
            http = httpx2.AsyncClient(
                transport=httpx2.AsyncHTTPTransport(uds=str(sock)),
                headers={"X-Memcli-Db": str(db)},
                timeout=60,
            )
            async with Client(
                streamable_http_client("http://localhost/mcp", http_client=http), mode="legacy"
            ) as session:
                payload(await session.call_tool("memory_remember", {"text": text}))
                found = payload(await session.call_tool("memory_query", {"query": "visits"}))
            return sorted(hit["text"] for hit in found["result"])

        with http_process(folder, env) as served, _client(sock) as client:
            for db, text in ((a, "Alma visits Quito"), (b, "Bruno visits Cairo")):
                answer = client.post(
                    "/api/v1/memories", json={"text": text}, headers={"X-Memcli-Db": str(db)}
                )
                assert answer.status_code == 200, answer.text
            served.wait_for(b"O" + os.fsencode(a))
            served.wait_for(b"O" + os.fsencode(b))
            assert anyio.run(mcp_texts, a, "Alma visits Lima") == [
                "Alma visits Lima",
                "Alma visits Quito",
            ]
            assert anyio.run(mcp_texts, b, "Bruno visits Accra") == [
                "Bruno visits Accra",
                "Bruno visits Cairo",
            ]
            assert client.post("/api/v1/query", json={"query": "visits"}).json() == []
            refused = client.get("/healthz", headers={"X-Memcli-Db": "memory.db"})
            assert refused.status_code == 400

            # `c<location>`: closed, its WAL checkpointed; B stays open.
            assert _wal(a) > 0 and _wal(b) > 0
            served.order(b"c" + os.fsencode(a))
            served.wait_for(b"C" + os.fsencode(a))
            assert _wal(a) == 0
            assert _wal(b) > 0
            # `e<location>`: a command used it: held open again (no request needed).
            served.order(b"e" + os.fsencode(a))
            served.wait_for(b"O" + os.fsencode(a))
        # The pipe's end: every database closed, every WAL checkpointed, exit 0.
        assert served.proc.returncode == 0, served.proc.stderr
        assert _wal(a) == 0 and _wal(b) == 0


def test_a_per_database_daemon_refuses_a_request_for_another_database(tmp_path) -> None:
    with tempfile.TemporaryDirectory(dir=short_tempdir()) as name:
        folder = Path(name)
        own, other = folder / "own.db", folder / "other.db"
        env = daemon_env(folder / "home", own)
        with daemon(env, own) as sock, _client(sock) as client:
            refused = client.post(
                "/api/v1/memories", json={"text": "lost"}, headers={"X-Memcli-Db": str(other)}
            )
            assert refused.status_code == 421
            error = refused.json()["error"]
            assert "serves" in error and str(own) in error and "\n" not in error
            kept = client.post(
                "/api/v1/memories", json={"text": "kept"}, headers={"X-Memcli-Db": str(own)}
            )
            assert kept.status_code == 200, kept.text
        assert not other.exists()
