"""Progress bars: a rich bar on stderr when stderr is a terminal (a real pseudo-terminal here),
nothing on a pipe or with TERM=dumb, and stdout byte-identical either way."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest


def _records(n: int) -> str:
    return "".join(json.dumps({"event_id": f"evt_{i:04d}", "session_id": f"s{i % 7}",
                               "user_id": "u1", "ts": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
                               "text": f"note {i}: Alice met Bob in Paris about plan {i}"}) + "\n"
                   for i in range(n))


def _env(tmp_path: Path, term: str) -> dict[str, str]:
    # Built from scratch: nothing of the parent shell (FORCE_COLOR, TTY_COMPATIBLE, TERM).
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "TERM": term,
            "MEMCLI_EMBEDDER": "hash", "LANG": "C.UTF-8", "MEMCLI_AUTOSTART": "0",
            "PYTHONPATH": os.environ.get("PYTHONPATH", "")}


def _run(args: list[str], env: dict[str, str], stdin: str, *, tty: bool
         ) -> tuple[int, bytes, bytes]:
    """Run memcli with stdout on a pipe and stderr on a pipe or a pseudo-terminal."""
    cmd = [sys.executable, "-m", "memcli", *args]
    if not tty:
        done = subprocess.run(cmd, input=stdin.encode(), env=env, capture_output=True,
                              timeout=300)
        return done.returncode, done.stdout, done.stderr
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=slave, env=env)
        os.close(slave)
        slave = -1
        reader.start()
        try:
            out, _ = proc.communicate(stdin.encode(), timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.join(timeout=30)
    finally:
        if slave != -1:
            os.close(slave)
        os.close(master)
    return proc.returncode, out, b"".join(chunks)


@pytest.fixture
def records() -> str:
    return _records(300)


@pytest.mark.long  # real processes on a pseudo-terminal, seconds each
def test_no_progress_on_a_pipe_and_stdout_identical(tmp_path, records):
    env = _env(tmp_path, "xterm-256color")
    piped = _run(["ingest", "-", "--db", str(tmp_path / "a.db")], env, records, tty=False)
    assert piped[0] == 0
    assert piped[2] == b""  # not one byte of progress (or anything else) on a pipe
    shown = _run(["ingest", "-", "--db", str(tmp_path / "b.db")], env, records, tty=True)
    assert shown[0] == 0
    assert shown[1] == piped[1]  # the payload does not depend on who watches stderr
    report = json.loads(piped[1])
    assert len(report["created"]) == 300


@pytest.mark.long  # real processes on a pseudo-terminal, seconds each
def test_bar_on_a_terminal(tmp_path, records):
    env = _env(tmp_path, "xterm-256color")
    code, out, err = _run(["ingest", "-", "--db", str(tmp_path / "t.db")], env, records,
                          tty=True)
    assert code == 0, err
    text = err.decode("utf-8", "replace")
    assert "embedding" in text and "writing" in text
    assert "300/300" in text  # rich's M/N column: the last step was drawn
    assert json.loads(out)["memory_ids"]
    code, out, err = _run(["reindex", "--db", str(tmp_path / "t.db")], env, "", tty=True)
    assert code == 0
    assert "embedding" in err.decode("utf-8", "replace")
    assert json.loads(out)["embedded"] == 300
    code, out, err = _run(["rebuild", "--db", str(tmp_path / "t.db")], env, "", tty=True)
    assert code == 0
    text = err.decode("utf-8", "replace")
    assert "rebuild" in text and "entities" in text and "sparse terms" in text
    assert json.loads(out)["episodes"]["expected"] == 300


@pytest.mark.long  # real processes on a pseudo-terminal, seconds each
def test_no_bar_on_a_dumb_terminal(tmp_path, records):
    env = _env(tmp_path, "dumb")
    code, out, err = _run(["ingest", "-", "--db", str(tmp_path / "d.db")], env, records,
                          tty=True)
    assert code == 0
    assert b"embedding" not in err and b"writing" not in err
