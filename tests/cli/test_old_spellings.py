"""Old flag spellings (`--user`, `--tenant`, `--kind`, ...): still accepted until their removal
version, each use told in one line on stderr (never on stdout, whose JSON stays clean), and
`mcp`, `mcp install` and `hook` spelled like every other command (`--user-id`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memcli.cli.mcp_bridge import old_flags, parse_argv
from memcli.cli.options import OLD
from memcli.cli.output import OLD_SPELLINGS_UNTIL

pytestmark = pytest.mark.usefixtures("fast_cli")

# Hidden options that are not old spellings: what the CLI passes the daemon it starts.
INTERNAL = {"--auto-started", "--lock-fd"}


def _notice(old: str, new: str) -> str:
    return f"memcli: warning: {old} is deprecated, use {new} (removed in {OLD_SPELLINGS_UNTIL})\n"


def _hidden_options(command, ctx, path="memcli"):
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            yield path, param
    for name, sub in getattr(command, "commands", {}).items():
        yield from _hidden_options(sub, sub.make_context(name, [], parent=ctx,
                                                         resilient_parsing=True),
                                   f"{path} {name}")


def test_every_hidden_option_is_an_old_spelling_of_a_visible_one(command_built_once):
    """No alias without a removal date: a hidden option is an old spelling (listed with its
    removal version in docs/reference/cli.md) or the daemon's own switch."""
    ctx = command_built_once.make_context("memcli", [], resilient_parsing=True)
    found = []
    for path, param in _hidden_options(command_built_once, ctx):
        if param.opts[0] in INTERNAL:
            continue
        assert param.name.endswith(OLD), (path, param.opts)
        found.append((path, param.opts[0]))
    assert ("memcli mcp", "--user") in found and ("memcli hook record", "--tenant") in found
    assert ("memcli query", "--kind") in found and ("memcli view export", "--format") in found


def test_an_old_spelling_still_works_and_says_so_on_stderr(cli):
    done = cli("ingest", "--text", "Priya waters the plants on Mondays", "--user", "priya",
               "--session", "s1")
    assert done.exit_code == 0, done.stderr
    json.loads(done.stdout)
    assert done.stderr == _notice("--user", "--user-id") + _notice("--session", "--session-id")
    old = cli("query", "who waters the plants", "--user", "priya", "--return", "bullets",
              "--json")
    new = cli("query", "who waters the plants", "--user-id", "priya", "--return-format",
              "bullets", "--json")
    assert old.exit_code == new.exit_code == 0
    assert json.loads(old.stdout) == json.loads(new.stdout) != []
    assert old.stderr == (_notice("--user", "--user-id")
                          + _notice("--return", "--return-format"))
    assert new.stderr == ""


def test_a_command_specific_old_spelling_says_so_too(cli):
    stored = cli("remember", "deploy on Tuesdays", "--user-id", "priya", "--pin", "--json")
    assert stored.exit_code == 0, stored.stderr
    assert stored.stderr == _notice("--pin", "--pinned")
    built = cli("acb", "build", "--user-id", "priya", "--query-text", "when do we deploy",
                "--json")
    assert built.exit_code == 0, built.stderr
    evidence = [i["text"] for s in json.loads(built.stdout)["sections"] for i in s["items"]]
    assert any(text.endswith("deploy on Tuesdays") for text in evidence)
    assert built.stderr == _notice("--query-text", "--query")


def test_mcp_install_writes_the_one_spelling_and_takes_the_old(cli, db_path):
    new = cli("mcp", "install", "--client", "cursor", "--user-id", "alice", "--agent-id", "coder",
              "--command", "memcli")
    old = cli("mcp", "install", "--client", "cursor", "--user", "alice", "--agent", "coder",
              "--command", "memcli")
    assert new.exit_code == old.exit_code == 0, old.stderr
    args = json.loads(new.stdout)["mcpServers"]["memcli"]["args"]
    assert args == ["mcp", "--db", str(Path(db_path).resolve()), "--user-id", "alice",
                    "--agent-id", "coder"]
    assert json.loads(old.stdout) == json.loads(new.stdout)
    assert new.stderr == ""
    assert old.stderr == _notice("--user", "--user-id") + _notice("--agent", "--agent-id")


def test_mcp_and_hook_show_the_one_spelling_in_help(cli):
    for path in (("mcp",), ("mcp", "install"), ("hook", "record"), ("hook", "session-start")):
        shown = cli(*path, "--help").stdout
        assert "--user-id" in shown and "--tenant-id" in shown and "--app-id" in shown, path
        assert "--user " not in shown and "--tenant " not in shown, path


def test_hook_record_takes_the_old_spelling(cli, db_path):
    hook = json.dumps({"session_id": "S", "prompt": "remember: the plants need water",
                       "hook_event_name": "UserPromptSubmit"})
    done = cli("hook", "record", "--user", "alice", "--strict", input=hook)
    assert done.exit_code == 0, done.stderr
    assert done.stdout == "" and done.stderr == _notice("--user", "--user-id")
    history = cli("history", "--user-id", "alice", "--json")
    assert history.exit_code == 0 and json.loads(history.stdout) != []


def test_an_old_spelling_beats_the_environment_as_it_did(cli, monkeypatch, db_path):
    """`MEMCLI_USER=ann memcli mcp install --user bob` bound bob before; it still does."""
    monkeypatch.setenv("MEMCLI_USER", "ann")
    done = cli("mcp", "install", "--client", "cursor", "--user", "bob", "--command", "memcli")
    assert done.exit_code == 0, done.stderr
    args = json.loads(done.stdout)["mcpServers"]["memcli"]["args"]
    assert args[-2:] == ["--user-id", "bob"]


def test_the_mcp_bridge_reads_both_spellings():
    env = {"MEMCLI_USER": "env-user"}
    new = parse_argv(["mcp", "--db", "x.db", "--user-id", "ann", "--agent-id=coder"], env)
    old = parse_argv(["mcp", "--db", "x.db", "--user", "ann", "--agent=coder"], env)
    assert new == old == ("x.db", {"X-Memcli-User": "ann", "X-Memcli-Agent": "coder"})
    assert old_flags(["mcp", "--db", "x.db", "--user", "ann", "--agent=coder"]) == [
        "--user", "--agent"]
    # A value that looks like an old flag is a value, not a flag.
    assert parse_argv(["mcp", "--tenant-id", "--user"], {}) == (
        None, {"X-Memcli-Tenant": "--user"})
    assert old_flags(["mcp", "--tenant-id", "--user"]) == []


@pytest.mark.daemon
def test_the_mcp_bridge_says_an_old_spelling_once(tmp_path):
    """`memcli mcp --user ann` forwarded to a running `memcli serve` (the bridge, which never
    reaches Typer): the notice on stderr once, nothing but MCP on stdout."""
    from tests.support.mcp import child_env, daemon

    db = tmp_path / "memory.db"
    env = child_env(tmp_path, db)
    with daemon(env, db):
        done = subprocess.run([sys.executable, "-m", "memcli", "mcp", "--user", "ann"],
                              input="", env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == _notice("--user", "--user-id")


def test_hook_session_start_spells_the_budget_as_acb_build_does(cli):
    """`--budget-tokens`, as `acb build` spells it; `--max-tokens` still read, with the notice."""
    assert "--budget-tokens" in cli("hook", "session-start", "--help").stdout
    cli("remember", "the plants need water on Mondays", "--user-id", "alice")
    hook = json.dumps({"session_id": "S", "cwd": "/tmp/plants", "hook_event_name": "SessionStart"})
    new = cli("hook", "session-start", "--user-id", "alice", "--budget-tokens", "3000", "--strict",
              input=hook)
    old = cli("hook", "session-start", "--user-id", "alice", "--max-tokens", "3000", "--strict",
              input=hook)
    assert new.exit_code == old.exit_code == 0, old.stderr
    assert json.loads(old.stdout)["hookSpecificOutput"]["additionalContext"]
    assert new.stderr == "" and old.stderr == _notice("--max-tokens", "--budget-tokens")
