"""Usage errors and ids out of range: one line on stderr, `memcli: error: <what> (<hint>)`,
exit 2, never Typer's usage box nor "a bug in memcli"."""

from __future__ import annotations

import pytest

from tests.support.fuzz import run_cli

HUGE = "99999999999999999999999"  # beyond 64 bits: no row can have it


@pytest.fixture(autouse=True)
def env(monkeypatch, db_path):
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    monkeypatch.setenv("MEMCLI_DB", str(db_path))
    assert run_cli(["remember", "kiwi pie for the picnic"]).exit_code == 0


@pytest.mark.parametrize(("args", "what"), [
    (["query"], "missing argument 'text'"),
    (["query", "kiwi", "--no-such-flag"], "no such option: --no-such-flag"),
    (["query", "kiwi", "--format", "xml"], "'xml' is not one of 'json', 'jsonl', 'text'"),
    (["query", "kiwi", "--top-k", "many"], "invalid value for '--top-k'"),
    (["history", "--limit", "zero"], "invalid value for '--limit'"),
    (["frobnicate"], "no such command 'frobnicate'"),
    (["task", "update", "one", "--status", "done"], "invalid value for 'ID'"),
])
def test_a_usage_error_is_one_line(args, what):
    result = run_cli(args)
    assert result.exit_code == 2
    line, = result.stderr.splitlines()
    assert line.startswith("memcli: error: ") and what in line, line
    assert line.endswith("--help')"), line
    assert result.stdout == ""


@pytest.mark.parametrize("args", [
    ["history", HUGE], ["forget", HUGE], ["restore", HUGE], ["pin", HUGE], ["unpin", HUGE],
    ["confirm", HUGE], ["related", HUGE], ["correct", HUGE, "new text"],
    ["purge", "--memory", HUGE], ["task", "update", HUGE, "--status", "done"],
    ["decision", "supersede", HUGE, "a new decision"], ["proposals", "accept", HUGE],
    ["proposals", "reject", HUGE], ["history", "--limit", HUGE], ["forget", "0"],
])
def test_an_id_beyond_64_bits_is_bad_input(args):
    result = run_cli(args)
    assert result.exit_code == 2, result.stderr
    line, = result.stderr.splitlines()
    assert line.startswith("memcli: error: invalid value for "), line
    assert "a bug in memcli" not in line


def test_the_largest_id_is_a_real_lookup():
    result = run_cli(["forget", str(2**63 - 1)])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"memcli: error: no memory with id {2**63 - 1}"]
