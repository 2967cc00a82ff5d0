"""`memcli serve --port N` on a port another socket holds: one line naming the port, exit 1,
and none of the daemon's files left behind (a client would otherwise find a dead socket)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memcli.service.daemon import paths
from tests.support.daemon import daemon_env, start_serve, stop
from tests.support.net import refused_port

pytestmark = pytest.mark.daemon  # a `memcli serve` process


def test_a_taken_port_is_one_line_and_leaves_nothing_behind(tmp_path):
    db = tmp_path / "m.db"
    env = daemon_env(tmp_path / "home", db)
    ep = paths.endpoint(str(db), env)
    with refused_port() as port:
        proc = start_serve(env, "--db", str(db), "--port", str(port), "--no-token")
        code, out, err = stop(proc) if proc.wait(timeout=120) is None else (
            proc.returncode, *proc.communicate())
    assert code == 1, err
    assert err.splitlines() == [f"memcli: error: cannot listen on 127.0.0.1:{port}: Address "
                                "already in use (choose another --port or --host)"]
    assert out == ""
    left = [p for p in (ep.socket, ep.http_socket, ep.pid) if Path(p).exists()]
    assert left == []
