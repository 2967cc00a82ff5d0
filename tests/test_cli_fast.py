"""The fast path for `query` and `acb build`: same options, same values, same output as Typer."""

from __future__ import annotations

import json
import os
from enum import Enum
from pathlib import Path

import pytest
from conftest import run_entry_point
from typer.testing import CliRunner

from memcli.cli import fast
from memcli.cli import run as bodies
from memcli.cli.app import build_app
from tests.conftest import ndjson, turns


def test_spec_file_matches_the_typer_commands():
    """fast_spec.json is exported from the Typer declarations; regenerate it with
    `python -m memcli.cli.fast --write` after changing an option."""
    assert fast.SPEC_FILE.read_text(encoding="utf-8") == fast.spec_text()


def _typer_kwargs(monkeypatch, argv: list[str]) -> dict:
    """The arguments Typer's command hands to the shared body for this command line."""
    seen: dict = {}
    body = "acb_build" if argv[0] == "acb" else "query"

    def record(*args, **kwargs):
        names = {"query": "text", "acb_build": "request"}
        seen.update({names[body]: args[0] if args else None}, **kwargs)

    monkeypatch.setattr(bodies, body, record)
    result = CliRunner().invoke(build_app(), argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return {k: v.value if isinstance(v, Enum) else v for k, v in seen.items()}


PARITY = [
    ["query", "hello world"],
    ["query", "hello", "--user", "u1", "--session", "s1", "--tenant", "t"],
    ["query", "-", "--top-k", "5", "--json"],
    ["query", "--top-k=7", "hi", "-k3", "--return", "bullets", "--explain"],
    ["query", "hi", "--category", "a", "--category", "b", "--kind", "fact", "--pinned"],
    ["query", "hi", "--unpinned", "--importance-min", "0.2", "--importance-max", "1e0"],
    ["query", "hi", "--legs", "lexical,entity", "--no-widen", "--db", "x.db", "-f", "jsonl"],
    ["query", "hi", "--threshold", "0.5", "--budget-tokens", "300", "--channel", "public",
     "--sensitivity", "low", "--updated-after", "2025-01-01", "--agent", "coder"],
    ["query", "--", "-starts with a dash"],
    ["query", "hi", "--user", "--session"],  # an option's value may look like an option
    ["acb", "build"],
    ["acb", "build", "-", "--query", "what next", "--max-tokens", "4000", "--json"],
    ["acb", "build", "-q", "x", "--cap", "rules=10", "--cap", "identity=5", "--no-track",
     "--handoff", "a", "--handoff", "b", "--checkpoint", "--since", "3", "-f", "markdown",
     "--app", "app1", "--channel", "public", "--category", "event", "--intent", "plan"],
]


@pytest.mark.parametrize("argv", PARITY, ids=lambda a: " ".join(a)[:60])
def test_fast_parser_gives_the_body_what_typer_gives(monkeypatch, argv):
    routed = fast.route(argv)
    assert routed is not None, "the fast path should take this command line"
    body, kwargs = routed
    assert body == ("acb_build" if argv[0] == "acb" else "query")
    assert kwargs == _typer_kwargs(monkeypatch, argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["query"],  # missing argument
        ["query", "hi", "--help"],
        ["query", "hi", "--bogus"],
        ["query", "hi", "--top-k", "0"],  # below the range
        ["query", "hi", "--top-k", "1001"],
        ["query", "hi", "-k", "2.5"],
        ["query", "hi", "--top-k"],  # no value
        ["query", "hi", "--return", "short"],  # not a choice
        ["query", "hi", "--importance-min", "high"],
        ["query", "hi", "--explain=yes"],  # a flag takes no value
        ["query", "one", "two"],  # extra argument
        ["acb", "build", "--max-tokens", "0"],
        ["acb", "build", "-f", "html"],
        ["acb", "show", "rules"],  # not a fast command
        ["ingest", "-"],
        ["--version"],
        [],
    ],
    ids=lambda a: " ".join(a) or "(none)",
)
def test_anything_unusual_is_left_to_typer(argv):
    assert fast.route(argv) is None


def test_shell_completion_is_left_to_typer(monkeypatch):
    monkeypatch.setenv("_MEMCLI_COMPLETE", "complete_bash")
    assert fast.route(["query", "hi"]) is None


_run = run_entry_point  # conftest


@pytest.fixture
def proc_env(tmp_path, isolated_env) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("_MEMCLI")}
    env.update(MEMCLI_EMBEDDER="hash", MEMCLI_DB=str(tmp_path / "memory.db"),
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return env


def test_processes_on_both_paths_print_the_same(cli, proc_env, monkeypatch):
    texts = ["Ines moved the zephyr deadline to Friday.", "Quinn asked about the budget.",
             "The zephyr review is on Monday with Yusuf."]
    assert cli("ingest", "-", input=ndjson(turns("s1", texts))).exit_code == 0
    for args in (["query", "zephyr deadline", "--user", "u1", "--json"],
                 ["acb", "build", "--query", "zephyr", "--user", "u1", "--session", "s1",
                  "--no-track", "--json"]):
        fast_run = _run(args, proc_env)
        assert fast_run.returncode == 0, fast_run.stderr
        assert fast_run.stderr.strip().endswith("FAST")
        # The same command line through the Typer app, in process.
        typer_out = cli(*args).stdout
        fast_payload = json.loads(fast_run.stdout)
        typer_payload = json.loads(typer_out)
        if args[0] == "acb":
            for payload in (fast_payload, typer_payload):
                payload.pop("acb_id")
                payload.pop("provenance")  # holds the retrieval latency
        assert fast_payload == typer_payload
        assert fast_payload, "expected hits / a bundle"


def test_fast_path_errors_are_one_line_with_the_right_code(proc_env):
    empty = _run(["query", " ", "--json"], proc_env)
    assert empty.returncode == 2
    assert empty.stderr.splitlines()[0] == "memcli: error: empty query"
    bad_leg = _run(["query", "hi", "--legs", "lexical,telepathy"], proc_env)
    assert bad_leg.returncode == 2
    assert "unknown leg in --legs" in bad_leg.stderr
    assert "Traceback" not in bad_leg.stderr
    bad_request = _run(["acb", "build", "-"], proc_env, stdin="[1, 2]")
    assert bad_request.returncode == 2
    assert "must be one JSON object" in bad_request.stderr


def test_a_malformed_command_line_still_gets_typers_message(proc_env):
    result = _run(["query", "hi", "--top-k", "0"], proc_env)
    assert result.returncode == 2
    assert "Invalid value for '--top-k'" in result.stderr  # click's wording: Typer ran


def test_bundled_categories_json_matches_the_yaml():
    """The query path reads the parsed default categories from JSON (no PyYAML import);
    regenerate it with `python -m memcli.categories --write` after editing categories.yaml."""
    from memcli import categories

    assert categories.DEFAULT_JSON.read_text(encoding="utf-8") == categories.default_json_text()
    bundled = categories.load_categories(None)
    assert "procedural" in bundled.restricted and bundled.names


def test_a_users_categories_file_is_still_yaml(tmp_path):
    from memcli.categories import load_categories
    from memcli.errors import UsageError

    path = tmp_path / "categories.yaml"
    path.write_text("# mine\ncategories: [a, b]\nallowlists:\n  bot: [a]\n", encoding="utf-8")
    mine = load_categories(path)
    assert mine.names == ("a", "b") and mine.allowed("bot") == ("a",)
    path.write_text("- just\n- a list\n", encoding="utf-8")
    with pytest.raises(UsageError, match="must hold a mapping"):
        load_categories(path)


def test_fast_path_renders_text_and_markdown(cli, proc_env):
    """The human formats work on the fast path too (a rich table; the prompt block)."""
    assert cli("ingest", "-", input=ndjson(turns("s1", ["Ines moved the zephyr deadline."])))\
        .exit_code == 0
    table = _run(["query", "zephyr", "--user", "u1", "--format", "text", "--explain"], proc_env)
    assert table.returncode == 0, table.stderr
    assert "zephyr" in table.stdout and "lexical#1" in table.stdout
    assert table.stderr.strip().endswith("FAST")
    block = _run(["acb", "build", "--query", "zephyr", "--user", "u1", "--no-track",
                  "-f", "markdown"], proc_env)
    assert block.returncode == 0, block.stderr
    assert block.stdout.lstrip().startswith("#") and "zephyr" in block.stdout
    assert block.stderr.strip().endswith("FAST")
