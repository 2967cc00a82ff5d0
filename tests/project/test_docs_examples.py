"""Every `memcli` command line in the README and the docs names a command and options that exist,
spelled as `--help` shows them (not a hidden older spelling).

The examples themselves run in tests/service/test_daemon.py (a long test: every `sh` block, through
a daemon and in-process); this is the fast check beside it, over every fenced shell block (`sh`,
`console`, `shell`, `bash` and the `cron` table too, so examples that need a server are held to it
as well): a renamed command or flag fails here in milliseconds, naming the page and line.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

import tests.support.cli
from memcli.cli.app import app
from memcli.service.daemon.client import NO_DAEMON_FLAG

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(sh|console|shell|bash|cron)\n(.*?)^```", re.S | re.M)
# Words that end a command line inside a shell line.
SEPARATORS = {"&&", "||", "|", ";", "&", ">", ">>", "2>&1", "<"}
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def command_lines() -> list[tuple[str, list[str]]]:
    """(where, words after `memcli`) for each `memcli` invocation in a shell block."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            first = text.count("\n", 0, match.start(2)) + 1
            for offset, line in enumerate(match.group(2).replace("\\\n", " \n").splitlines()):
                where = f"{page.relative_to(ROOT)}:{first + offset}"
                found.extend((where, words) for words in _invocations(line))
    return found


def _invocations(line: str) -> list[list[str]]:
    """The words after each `memcli` in command position: at the start of the line or after a
    separator, an environment assignment, `--` or `memcli-retry` (not `ruff check memcli`)."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # a line that continues a quoted JSON request, not a command
        return []
    runs, current, previous = [], None, None
    for word in words:
        if word in SEPARATORS or word.endswith(";"):
            if current is not None:
                runs.append(current)
            current = None
        elif current is not None:
            current.append(word)
        elif (word == "memcli" or word.endswith("/memcli")) and (
                previous is None or previous in SEPARATORS or previous.endswith(";")
                or previous in ("--", "memcli-retry") or ENV.match(previous)):
            current = []
        previous = word
    if current is not None:
        runs.append(current)
    return runs


def _options(command) -> dict[str, bool]:
    """Each option name of `command`, and whether it takes a value."""
    return {opt: not (getattr(param, "is_flag", False) or getattr(param, "count", False))
            for param in command.params for opt in (*param.opts, *param.secondary_opts)
            if opt.startswith("-")}


def _hidden(command) -> set[str]:
    """The option names `command` keeps out of `--help`: old spellings the docs do not teach."""
    return {opt for param in command.params if getattr(param, "hidden", False)
            for opt in (*param.opts, *param.secondary_opts)}


def problems(words: list[str]) -> list[str]:
    """What in `memcli WORDS` the app does not know (an unknown command or option)."""
    root = tests.support.cli.command(app)  # built once per process, not once a line
    command, path, rest = root, ["memcli"], list(words)
    known = {**_options(root), NO_DAEMON_FLAG: False}
    while rest:
        word = rest.pop(0)
        if word == "--":
            break  # what follows is another program's (memcli-retry's command)
        if word.startswith("-") and word != "-":
            name, _, value = word.partition("=")
            options = {**known, **_options(command)}
            if name not in options:
                return [f"{' '.join(path)}: no option {name}"]
            if name in _hidden(command):
                return [f"{' '.join(path)}: {name} is a hidden old spelling"]
            if options[name] and not value and rest:
                rest.pop(0)  # the option's value
            continue
        subcommands = getattr(command, "commands", None)
        if subcommands is None or word == "-":
            continue  # an argument
        if word not in subcommands:
            return [f"{' '.join(path)}: no command {word}"]
        command = subcommands[word]
        path.append(word)
    return []


LINES = command_lines()


def test_the_docs_have_command_lines() -> None:
    pages = {where.split(":")[0] for where, _ in LINES}
    assert "README.md" in pages and "docs/guides/memory.md" in pages
    assert len(LINES) > 50


@pytest.mark.parametrize("where, words", LINES, ids=[where for where, _ in LINES])
def test_each_documented_command_line_exists(where: str, words: list[str]) -> None:
    assert problems(words) == [], f"{where}: memcli {' '.join(words)}"


def test_an_unknown_flag_or_command_is_found() -> None:
    assert problems(["query", "tea", "--top-k", "3"]) == []
    assert problems(["query", "tea", "--topk", "3"]) == ["memcli query: no option --topk"]
    assert problems(["acb", "biuld"]) == ["memcli acb: no command biuld"]
    assert problems(["--db", "x.db", "doctor", "--fix"]) == []


def test_a_hidden_old_spelling_is_found() -> None:
    """The docs teach the flag `--help` shows (`--user-id`), not its hidden older spelling."""
    assert problems(["query", "tea", "--user-id", "priya"]) == []
    assert problems(["query", "tea", "--user", "priya"]) == [
        "memcli query: --user is a hidden old spelling"]
