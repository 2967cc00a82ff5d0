"""`memcli-retry`: run a command, retrying it while it exits 75 (the database or a lock is busy).

Cron never retries, and every memcli command exits 75 when another process holds the write lock
or another run of the same lifecycle command holds its lock (README "Scheduling (cron)"). This
is the README's three-line shell script as an installed console script:

    memcli-retry [--attempts N] [--delay SECONDS] [--] COMMAND [ARG ...]

runs COMMAND up to N times (3), pausing SECONDS (300) between attempts, while it exits 75; any
other exit code is passed through at once, and 75 after the last attempt. Standard library only,
so it starts fast and imports nothing of memcli. The flags exist so a test (or an impatient
operator) can shorten the pause.
"""

from __future__ import annotations

import subprocess
import sys
import time

BUSY = 75  # EX_TEMPFAIL: memcli's "try again later"
ATTEMPTS = 3
DELAY = 300.0  # seconds: long enough for a normal write or lifecycle run to finish
USAGE = "usage: memcli-retry [--attempts N] [--delay SECONDS] [--] COMMAND [ARG ...]"


def _parse(argv: list[str]) -> tuple[int, float, list[str]]:
    """(attempts, delay, command) from the leading options; the command is the rest."""
    attempts, delay = ATTEMPTS, DELAY
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg in ("-h", "--help"):
            print(USAGE)
            raise SystemExit(0)
        name, sep, value = arg.partition("=")
        if name not in ("--attempts", "--delay"):
            break  # the command starts here
        if not sep:
            if i + 1 >= len(argv):
                raise ValueError(f"{name} needs a value")
            value = argv[i + 1]
            i += 1
        try:
            if name == "--attempts":
                attempts = int(value)
            else:
                delay = float(value)
        except ValueError:
            raise ValueError(f"{name} needs a number, not {value!r}") from None
        i += 1
    if attempts < 1 or delay < 0:
        raise ValueError("--attempts must be at least 1 and --delay not negative")
    return attempts, delay, argv[i:]


def run(argv: list[str]) -> int:
    """Run the command as the options say; its exit code (127: not found, 128+N: signal N)."""
    try:
        attempts, delay, command = _parse(argv)
        if not command:
            raise ValueError("no command to run")
    except ValueError as exc:
        print(f"memcli-retry: error: {exc} ({USAGE})", file=sys.stderr)
        return 2
    code = BUSY
    for attempt in range(1, attempts + 1):
        try:
            code = subprocess.call(command)
        except FileNotFoundError:
            print(f"memcli-retry: error: command not found: {command[0]}", file=sys.stderr)
            return 127
        except PermissionError:
            print(f"memcli-retry: error: cannot run {command[0]}", file=sys.stderr)
            return 126
        if code < 0:
            code = 128 - code  # killed by a signal, as a shell reports it
        if code != BUSY:
            return code
        if attempt < attempts:
            print(f"memcli-retry: busy (exit 75), attempt {attempt} of {attempts}; "
                  f"retrying in {delay:g} s", file=sys.stderr)
            time.sleep(delay)
    print(f"memcli-retry: still busy after {attempts} attempts", file=sys.stderr)
    return code


def main() -> None:
    try:
        sys.exit(run(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
