"""What every command gets from the root: `--db` before the command name, the help panels, and
the OpenAI SDK's own environment variables."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import typer.main

from memcli.cli.app import COMMAND_PANELS, PANELS, app
from tests.support.cli import NO_SPARSE_CONFIG
from tests.support.daemon import Daemon, daemon_env, last_route, run_client
from tests.support.lifecycle import conversation, extraction
from tests.support.net import refused_port
from tests.support.records import ndjson

# -- --db before the command ------------------------------------------------------------------


@pytest.fixture
def two_dbs(cli, tmp_path):
    """Two databases: `a.db` with one event, `b.db` with two."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    assert cli("ingest", "--text", "one", "--db", str(a)).exit_code == 0
    for text in ("two", "three"):
        assert cli("ingest", "--text", text, "--db", str(b)).exit_code == 0
    return a, b


def test_db_before_the_command(cli, two_dbs):
    a, b = two_dbs
    out = cli("--db", str(a), "stats", "--json")
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)["events"] == 1
    out = cli(f"--db={b}", "stats", "--json")
    assert json.loads(out.stdout)["events"] == 2
    # In a command group too (`task list` lives under `task`).
    out = cli("--db", str(a), "task", "list", "--json")
    assert out.exit_code == 0, out.stderr


def test_the_commands_own_db_wins(cli, two_dbs):
    a, b = two_dbs
    out = cli("--db", str(a), "stats", "--json", "--db", str(b))
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)["events"] == 2


@pytest.mark.daemon  # starts `memcli serve` (seconds): the daemon tier
def test_db_before_the_command_through_the_daemon(tmp_path):
    db, other = tmp_path / "m.db", tmp_path / "other.db"
    env = daemon_env(tmp_path / "home", db)
    del env["MEMCLI_DB"]  # the command line alone names the database
    for target, text in ((db, "served"), (other, "other")):
        seeded = subprocess.run(
            [sys.executable, "-m", "memcli", "--no-daemon", "ingest", "--text", text,
             "--db", str(target)], env=env, capture_output=True, text=True, timeout=120)
        assert seeded.returncode == 0, seeded.stderr
    routes = tmp_path / "routes.log"
    with Daemon(db, env):
        out = run_client(["--db", str(db), "query", "served", "--json"], env, routes=routes)
        assert out.returncode == 0, out.stderr
        assert last_route(routes).startswith("daemon")
        assert [m["text"] for m in json.loads(out.stdout)] == ["served"]
        # The command's own --db picks the daemon, as it picks the database in-process.
        out = run_client(["--db", str(other), "query", "served", "--json", "--db", str(db)],
                         env, routes=routes)
        assert out.returncode == 0, out.stderr
        assert last_route(routes).startswith("daemon")
        # `mcp` is never forwarded, whatever comes before it.
        out = run_client(["--db", str(db), "mcp", "--help"], env, routes=routes)
        assert out.returncode == 0, out.stderr
        assert last_route(routes) == "inprocess"


# -- help panels ------------------------------------------------------------------------------


def test_every_command_has_a_panel():
    names = set(typer.main.get_command(app).commands)
    assert names == set(COMMAND_PANELS)
    assert sum(len(listed) for listed in PANELS.values()) == len(COMMAND_PANELS)  # one each


def test_help_lists_the_commands_in_their_panels(cli):
    out = cli("--help")
    assert out.exit_code == 0, out.stderr
    headings = re.findall(r"^(\w+) commands:$", out.stdout, re.M)
    assert headings == list(PANELS)
    for panel, names in PANELS.items():
        section = out.stdout.split(f"{panel} commands:\n", 1)[1].split("\n\n", 1)[0]
        assert [line.split()[0] for line in section.splitlines()] == list(names)


def test_help_does_not_import_rich(tmp_path):
    code = ("import sys\nfrom memcli.cli.app import run_typer\n"
            "try:\n    run_typer(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('rich' in sys.modules, file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=daemon_env(tmp_path, tmp_path / "m.db"))
    assert "Memory commands:" in out.stdout
    assert out.stderr.strip().splitlines()[-1] == "False"


# What building the flags needs: the request models, not the code behind them (a command that
# runs in-process imports what it runs when it runs).
NOT_AT_START = ("memcli.acb.build", "memcli.ledger", "memcli.ingest", "memcli.store",
                "memcli.retrieval", "memcli.derived", "memcli.policy", "memcli.providers",
                "memcli.entities", "memcli.operations.ledger_ops", "memcli.operations.memory")


def test_the_command_line_starts_on_the_request_models_alone(tmp_path):
    code = ("import sys\nfrom memcli.cli.app import run_typer\n"
            "try:\n    run_typer(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=daemon_env(tmp_path, tmp_path / "m.db"))
    loaded = out.stderr.strip().splitlines()[-1].split()
    assert "memcli.acb.request" in loaded and "memcli.operations.ledger_requests" in loaded
    assert [name for name in loaded if name.startswith(NOT_AT_START)] == []


# -- the OpenAI SDK's environment ------------------------------------------------------------


@pytest.fixture
def session(cli, monkeypatch, tmp_path):
    """A finished conversation to consolidate, and a config without the SPARSE leg."""
    config = tmp_path / "config.yaml"
    config.write_text(NO_SPARSE_CONFIG, encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    monkeypatch.setenv("MEMCLI_LLM_MODEL", "stub-model")
    records = (conversation("s1", ["I work as a nurse at Santa Maria."])
               + conversation("s2", ["Hello again!"], day=2))
    assert cli("ingest", "-", input=ndjson(records)).exit_code == 0
    return cli


def test_openai_base_url_is_honoured(session, stub, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url)
    stub.enqueue_json(extraction("Priya is a nurse.", facts=["Priya works as a nurse."]))
    out = session("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    assert len(stub.chat_requests) == 1
    assert stub.chat_requests[0]["model"] == "stub-model"
    assert json.loads(out.stdout)["model"] == "stub-model"


def test_memclis_own_base_url_wins_over_openais(session, stub, monkeypatch):
    monkeypatch.setenv("MEMCLI_LLM_BASE_URL", stub.base_url)
    stub.enqueue_json(extraction("Priya is a nurse.", facts=["Priya works as a nurse."]))
    with refused_port() as port:
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
        out = session("consolidate", "--json")
    assert out.exit_code == 0, out.stderr
    assert len(stub.chat_requests) == 1
