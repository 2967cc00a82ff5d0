"""Helpers for tests/trust/test_fuzz.py: generated inputs turned into bytes, the CLI run in-process
or as a real process, and the checks every run must pass (no traceback, known exit codes,
one-line errors, no partial write)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.cli import CliRunner

EXIT_CODES = {0, 1, 2, 75}
# Placeholders a generated value may hold; `to_bytes` swaps them in after json.dumps, because
# these inputs cannot be written by json.dumps itself (invalid UTF-8, integers of more than
# 4,300 digits, nesting deeper than Python's json module can write).
BAD_BYTES = "\u2063BADBYTES\u2063"
HUGE_INT = "\u2063HUGEINT\u2063"
DEEP = "\u2063DEEP{}\u2063"


def to_bytes(text: str) -> bytes:
    """`text` (JSON written by json.dumps) as bytes, with the placeholders swapped in."""
    import re

    text = text.replace(json.dumps(HUGE_INT)[1:-1], "x")  # in case ensure_ascii escaped it
    text = text.replace(f'"{HUGE_INT}"', "1" * 5000)
    text = re.sub('"\u2063DEEP(\\d+)\u2063"', lambda m: "[" * int(m[1]) + "]" * int(m[1]), text)
    data = text.encode("utf-8", errors="surrogatepass")  # lone surrogates: invalid UTF-8
    return data.replace(BAD_BYTES.encode(), b"\xff\xfe\xc3(")


def run_cli(args: list[str], stdin: bytes | None = None, env: dict[str, str] | None = None):
    """The real Typer app in-process (as conftest's `cli`; its command built once), with bytes
    on stdin."""
    from memcli.cli.app import app

    return CliRunner().invoke(app, args, input=stdin, env=env, catch_exceptions=False)


def run_process(args: list[str], stdin: bytes | None, env: dict[str, str],
                timeout: float = 120) -> subprocess.CompletedProcess:
    """The installed `memcli` entry point as a real process."""
    cmd = [sys.executable, "-c", "from memcli.cli.entry import main; main()", *args]
    full_env = {**os.environ, **env}
    return subprocess.run(cmd, input=stdin or b"", env=full_env, capture_output=True,
                          timeout=timeout, check=False)


def check_output(code: int, stderr: str, *, what: str) -> None:
    """Exit code known; stderr made of `memcli: error:` / `memcli: warning:` lines (usage
    errors too); never a traceback, never an internal error."""
    assert code in EXIT_CODES, f"{what}: exit {code}\n{stderr}"
    assert "Traceback" not in stderr, f"{what}: traceback\n{stderr}"
    assert "unexpected error" not in stderr, f"{what}: internal error\n{stderr}"
    for line in stderr.splitlines():
        assert line.startswith(("memcli: error: ", "memcli: warning: ")), (
            f"{what}: stderr line not in the memcli format: {line!r}\n{stderr}")


def counts(db: Path) -> tuple[int, int]:
    """(events, memories) in the database file (0, 0 when there is none yet)."""
    if not db.exists() or db.stat().st_size == 0:
        return 0, 0
    # On a read-only file system no -shm can be made: read it as immutable there.
    flag = "" if os.access(db.parent, os.W_OK) else "&immutable=1"
    conn = sqlite3.connect(f"file:{db}?mode=ro{flag}", uri=True)
    try:
        return tuple(conn.execute(  # type: ignore[return-value]
            "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM memories)").fetchone())
    finally:
        conn.close()


def event_ids(db: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute("SELECT event_id FROM events")}
    finally:
        conn.close()


def check_ingest(result_code: int, stdout: str, stderr: str, db: Path,
                 before: tuple[int, int], good: list[str], *, what: str) -> dict[str, Any] | None:
    """No partial write: events and memories grew by exactly what the report says was
    created, and every good record of the batch is stored (or was a repeat)."""
    check_output(result_code, stderr, what=what)
    assert result_code in (0, 2), f"{what}: ingest exit {result_code}\n{stderr}"
    after = counts(db)
    if not stdout.strip():  # a usage error: nothing written at all
        assert after == before, f"{what}: wrote without a report"
        return None
    report = json.loads(stdout)
    assert after[0] - before[0] == len(report["created"]), f"{what}: events {before}->{after}"
    assert after[1] - before[1] == len(report["memory_ids"]), f"{what}: memories"
    if good:
        stored = event_ids(db)
        missing = [g for g in good if g not in stored]
        assert not missing, f"{what}: good records lost: {missing}\n{stderr}"
    assert (result_code == 2) == bool(report["rejected"]), f"{what}: exit vs rejected"
    assert len(stderr.splitlines()) >= len(report["rejected"]), f"{what}: unreported rejection"
    return report
