"""The CLI contract: output formats, one-line errors and exit codes, help, README, entry points."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
import typer.testing

import memcli
from memcli.cli.app import app
from tests.support.backend import write_lock_held
from tests.support.records import ndjson, turns

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


pytestmark = pytest.mark.usefixtures("fast_cli")  # conftest: no SPLADE, one click command


def command_paths() -> list[tuple[str, ...]]:
    """Every runnable command, as its words after `memcli` (groups recurse into subcommands)."""
    paths: list[tuple[str, ...]] = []

    def walk(command, prefix: tuple[str, ...]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in sorted(subcommands.items()):
                walk(sub, (*prefix, name))
        else:
            paths.append(prefix)

    walk(typer.main.get_command(app), ())
    return paths


COMMANDS = command_paths()


def test_the_foundation_commands_exist():
    names = {p[0] for p in COMMANDS}
    assert {
        "ingest",
        "query",
        "embed",
        "reindex",
        "history",
        "purge",
        "forget",
        "restore",
        "stats",
        "artifact",
        "demo",
    } <= names


# -- output formats -------------------------------------------------------------------------


@pytest.fixture
def stored(cli):
    result = cli("ingest", "-", input=ndjson(turns("s1", ["kiwi pie", "kiwi jam", "fig tart"])))
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_json_is_the_default_off_a_terminal(cli, stored):
    result = cli("stats")
    assert result.exit_code == 0 and result.stderr == ""
    assert json.loads(result.stdout)["events"] == 3


@pytest.mark.parametrize("flags", [["--json"], ["--format", "json"], ["-f", "json"]])
def test_json(cli, stored, flags):
    hits = json.loads(cli("query", "kiwi", *flags).stdout)
    assert isinstance(hits, list) and {h["text"] for h in hits} >= {"kiwi pie", "kiwi jam"}


@pytest.mark.backends  # history and forget on both engines
def test_jsonl(cli, stored):
    lines = cli("query", "kiwi", "--format", "jsonl").stdout.splitlines()
    hits = [json.loads(line) for line in lines]
    assert len(hits) == 3 and {h["text"] for h in hits} == {"kiwi pie", "kiwi jam", "fig tart"}
    history = [json.loads(line) for line in cli("history", "-f", "jsonl").stdout.splitlines()]
    assert [h["op"] for h in history] == ["ADD"] * 3
    stats = cli("stats", "--format", "jsonl").stdout.splitlines()
    assert len(stats) == 1 and json.loads(stats[0])["memories"] == 3


@pytest.mark.backends  # history and forget on both engines
def test_text(cli, stored):
    result = cli("query", "kiwi", "--format", "text")
    assert result.exit_code == 0 and "kiwi pie" in result.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)
    stats = cli("stats", "--format", "text")
    assert stats.exit_code == 0 and "events" in stats.stdout
    history = cli("history", "--format", "text").stdout.splitlines()
    assert len(history) == 3 and all(" ADD " in line for line in history)


def test_json_output_keeps_unicode_readable(cli):
    cli("ingest", "--text", "我们在成都吃了火锅 🥘")
    assert "我们在成都吃了火锅 🥘" in cli("query", "成都火锅").stdout


def test_unknown_format_is_a_usage_error(cli):
    result = cli("stats", "--format", "yaml")
    assert result.exit_code == 2 and result.stdout == ""


# -- errors and exit codes --------------------------------------------------------------------


def _one_error_line(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("memcli: error: ") and "Traceback" not in result.stderr
    return lines[0]


def test_usage_errors_exit_2(cli, stored):
    assert "unknown leg" in _one_error_line(cli("query", "kiwi", "--legs", "lexical,magic"), 2)
    assert "empty query" in _one_error_line(cli("query", ""), 2)
    assert "purge needs a scope" in _one_error_line(cli("purge"), 2)
    assert "nothing to ingest" in _one_error_line(cli("ingest"), 2)
    # A rejected record: its report is still the payload on stdout, the reason one line on stderr.
    result = cli("ingest", "--text", "x", "--channel", "radio")
    assert result.exit_code == 2 and json.loads(result.stdout)["rejected"][0]["line"] == 1
    assert re.fullmatch(r"memcli: error: --text:1: channel: .+\n", result.stderr)


@pytest.mark.backends  # history and forget on both engines
def test_runtime_errors_exit_1(cli, stored):
    assert "no artifact" in _one_error_line(cli("artifact", "art_missing"), 1)
    assert "no memory with id 4242" in _one_error_line(cli("forget", "4242"), 1)


def test_error_hint_is_in_parentheses(cli, stored):
    line = _one_error_line(cli("query", "kiwi", "--agent-id", "planner", "--categories", "tone"), 2)
    assert re.fullmatch(r"memcli: error: .+ \(.+\)", line), line


def test_bad_option_is_exit_2(cli):
    result = cli("query", "kiwi", "--no-such-option")
    assert result.exit_code == 2 and result.stdout == ""
    assert "no-such-option" in result.stderr


def test_busy_database_exits_75(cli, db_path, stored, monkeypatch):
    monkeypatch.setenv("MEMCLI_BUSY_TIMEOUT", "0.2")
    with write_lock_held(db_path):  # as another process would
        line = _one_error_line(cli("ingest", "--text", "blocked"), 75)
        assert "busy" in line
        # Reading still works while a writer holds the lock (WAL), and access counting yields.
        assert cli("query", "kiwi").exit_code == 0
    assert cli("ingest", "--text", "unblocked").exit_code == 0


def test_unwritable_database_path_is_one_line(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = cli("stats", "--db", str(blocker / "sub" / "memory.db"))
    _one_error_line(result, 1)


# -- database location ------------------------------------------------------------------------


def test_db_option_then_env_then_data_dir(cli, tmp_path, monkeypatch, isolated_env):
    explicit = tmp_path / "explicit.db"
    assert cli("ingest", "--text", "one", "--db", str(explicit)).exit_code == 0
    assert explicit.exists()
    monkeypatch.delenv("MEMCLI_DB")
    assert cli("ingest", "--text", "two").exit_code == 0
    default = isolated_env / "data" / "memcli" / "memory.db"
    assert default.exists()
    assert json.loads(cli("stats", "--db", str(explicit)).stdout)["events"] == 1


# -- version, help, README --------------------------------------------------------------------


def test_version(cli):
    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"memcli {memcli.__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", memcli.__version__)


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_every_command_has_help(cli, path):
    result = cli(*path, "--help")
    assert result.exit_code == 0, result.stderr
    assert "Usage:" in result.stdout and " ".join(path) in result.stdout
    summary = typer.main.get_command(app)
    for word in path:
        summary = summary.commands[word]
    assert (summary.help or "").strip(), f"{' '.join(path)} has no help text"


def test_top_level_help_lists_every_command(cli):
    result = cli("--help")
    assert result.exit_code == 0
    for name in {p[0] for p in COMMANDS}:
        assert re.search(rf"^\s+{re.escape(name)}\b", result.stdout, re.M), name


DOCS_HOME = ROOT / "docs" / "index.md"


def test_every_command_is_in_the_docs():
    """The docs' home page names every command in its table ("Commands at a glance"), so a new
    command gets a line a reader finds (the CLI reference, generated, lists its options)."""
    text = DOCS_HOME.read_text(encoding="utf-8")
    missing = [" ".join(p) for p in COMMANDS if f"memcli {' '.join(p)}" not in text]
    assert missing == []


def test_the_readme_is_a_short_tour():
    """README.md: what memcli is, its two commands and a tour of the rest, under 250 lines."""
    text = README.read_text(encoding="utf-8")
    tour = ("ingest", "query", "acb build", "serve", "mcp install", "import --from")
    assert [name for name in tour if f"memcli {name}" not in text] == []
    assert len(text.splitlines()) < 250


def test_python_dash_m(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MEMCLI_DB": str(tmp_path / "m.db"),
           "MEMCLI_AUTOSTART": "0"}
    result, version = (
        subprocess.run([sys.executable, "-m", "memcli", flag], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
        for flag in ("--help", "--version"))
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout and "query" in result.stdout
    assert version.stdout.strip() == f"memcli {memcli.__version__}"


def test_each_command_maps_to_the_module_that_registers_it():
    """main() registers only the group named on the command line; the map must not drift."""
    from memcli.cli import app as app_module

    everything = {p[0] for p in COMMANDS}
    assert set(app_module.COMMAND_MODULES) == everything
    for module in app_module.MODULES:
        group = typer.main.get_command(app_module.build_app((module,)))
        owned = {n for n, m in app_module.COMMAND_MODULES.items() if m is module}
        assert set(group.commands) == owned, module.__name__


@pytest.mark.long  # memcli as child processes
def test_a_single_group_process_behaves_like_the_full_app(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MEMCLI_DB": str(tmp_path / "m.db"),
           "MEMCLI_EMBEDDER": "hash", "MEMCLI_AUTOSTART": "0"}

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "memcli", *args], cwd=ROOT, env=env,
                              input=stdin, capture_output=True, text=True, timeout=60)

    assert run("ingest", "-", stdin=ndjson(turns("s1", ["kiwi pie", "fig tart"]))).returncode == 0
    hits = json.loads(run("query", "kiwi", "--legs", "lexical", "--json").stdout)
    assert hits[0]["text"] == "kiwi pie"
    bad = run("query", "kiwi", "--no-such-flag")
    assert bad.returncode == 2 and "no such option" in bad.stderr
    assert run("query", "--help").stdout.startswith("Usage: memcli query [OPTIONS]")


# -- demo ---------------------------------------------------------------------------------------


def test_demo_with_the_test_embedder(cli, db_path):
    result = cli("demo")
    assert result.exit_code == 0, result.stderr
    hits = json.loads(result.stdout)
    assert 1 <= len(hits) <= 3 and all(h["user_id"] == "priya" for h in hits)
    assert "memcli demo: ingested 10 events" in result.stderr
    # The question the hits answer is said (stderr: stdout carries the hits alone).
    assert "memcli demo: the hits for 'When does Anika visit?'" in result.stderr
    asked = cli("demo", "Where does Priya live?", "--json")
    assert "'Where does Priya live?'" in asked.stderr and json.loads(asked.stdout)
    assert not db_path.exists()  # the demo uses a scratch database, not the user's


@pytest.mark.slow
def test_demo_with_the_default_e5_embedder(cli, monkeypatch):
    """The out-of-the-box experience: default embedder (e5-small) and default legs (SPLADE on)."""
    monkeypatch.delenv("MEMCLI_EMBEDDER")
    monkeypatch.delenv("MEMCLI_CONFIG")
    result = cli("demo", "--format", "text")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("Q: When does Anika visit?")
    answers = result.stdout.splitlines()[1:]
    assert len(answers) == 3 and all(re.match(r"\d\. \(\d\.\d\d\) ", a) for a in answers)
    assert "Anika visits on 21 March 2025" in answers[0], result.stdout
