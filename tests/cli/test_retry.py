"""`memcli-retry`, the cron wrapper of the README: retries a command while it exits 75.

Run for real: the installed console script (or `python -m memcli.cli.retry`) starts a child
Python process whose exit codes come from a counter file, so each attempt is a real process."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Exits with the next code of CODES (one per call), counting its calls in a file.
CHILD = (
    "import sys, pathlib; p = pathlib.Path(sys.argv[1]); n = int(p.read_text() or 0)"
    " if p.exists() else 0; p.write_text(str(n + 1)); codes = [int(c) for c in sys.argv[2:]];"
    " sys.exit(codes[min(n, len(codes) - 1)])"
)


def retry(tmp_path: Path, *codes: int, options: tuple[str, ...] = ("--delay", "0")):
    counter = tmp_path / "calls"
    script = shutil.which("memcli-retry", path=str(Path(sys.executable).parent))
    head = [script] if script else [sys.executable, "-m", "memcli.cli.retry"]
    proc = subprocess.run(
        [*head, *options, "--", sys.executable, "-c", CHILD, str(counter), *map(str, codes)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    calls = int(counter.read_text()) if counter.exists() else 0
    return proc, calls


def test_the_console_script_is_installed():
    from importlib.metadata import entry_points

    scripts = {e.name: e.value for e in entry_points(group="console_scripts")}
    assert scripts.get("memcli-retry") == "memcli.cli.retry:main"


def test_busy_then_done_is_retried_until_it_succeeds(tmp_path):
    proc, calls = retry(tmp_path, 75, 0)
    assert proc.returncode == 0, proc.stderr
    assert calls == 2
    assert "busy (exit 75), attempt 1 of 3" in proc.stderr


def test_gives_up_with_75_after_the_attempts(tmp_path):
    proc, calls = retry(tmp_path, 75, options=("--attempts", "2", "--delay", "0"))
    assert (proc.returncode, calls) == (75, 2)
    assert "still busy after 2 attempts" in proc.stderr


@pytest.mark.parametrize("code", [0, 1, 2])
def test_any_other_exit_code_passes_through_at_once(tmp_path, code):
    proc, calls = retry(tmp_path, code, 0)
    assert (proc.returncode, calls) == (code, 1)


def test_the_pause_is_waited_between_attempts(tmp_path):
    import time

    start = time.monotonic()
    proc, calls = retry(tmp_path, 75, 0, options=("--delay", "0.3"))
    assert (proc.returncode, calls) == (0, 2)
    assert time.monotonic() - start >= 0.3


def test_bad_usage_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "memcli.cli.retry", "--attempts", "x", "true"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("memcli-retry: error: --attempts needs a number")
    missing = subprocess.run([sys.executable, "-m", "memcli.cli.retry", "--delay", "0",
                              "no-such-command-xyz"], capture_output=True, text=True,
                             timeout=60, check=False)
    assert missing.returncode == 127
