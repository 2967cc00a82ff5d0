"""A URL as the database location is refused (exit 2, one line) until a backend reads URLs.

`MEMCLI_DB=postgresql://...` used to make a folder `postgresql:` in the current directory with a
SQLite file inside it. Every command that takes --db is found from the app itself (a new command
is covered without editing this file) and run with a URL from --db, MEMCLI_DB and the config
file: each must exit 2 naming the URL, and leave the current folder empty.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from memcli import Memory
from memcli.cli.app import app
from memcli.config import load_settings
from memcli.errors import UsageError
from memcli.store.connection import Database

pytestmark = pytest.mark.usefixtures("fast_cli")

URL = "postgresql://agent:s3cret@127.0.0.1:5432/memory"
SHOWN = "postgresql://agent:***@127.0.0.1:5432/memory"  # the password never reaches stderr

# Arguments that get a command past its own input checks (which come before the database).
# Every other required argument gets "1" (an id, or a text).
ARGS = {
    ("ingest",): ["--text", "hello"],
    ("remember",): ["hello"],
    ("checkpoint", "save"): ["--data", "{}", "--user", "u", "--thread", "t"],
    ("acb", "show"): ["rules"],
    ("acb", "edit"): ["rules"],
    ("mcp", "install"): ["--client", "cursor"],
}


def _commands():
    """(path, required argument count) of every leaf command with a --db option."""
    found = []

    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in sorted(cmd.commands.items()):
                walk(sub, (*path, name))
        elif any("--db" in getattr(p, "opts", ()) for p in cmd.params):
            found.append((path, [p for p in cmd.params
                                 if p.param_type_name == "argument" and p.required]))

    walk(typer.main.get_command(app), ())
    return found


@functools.cache
def _command_lines() -> list[list[str]]:
    return [[*path, *ARGS.get(path, ["1"] * len(required))] for path, required in _commands()]


def test_every_command_family_is_found():
    names = {" ".join(line[:2]) if line[0] in ("acb", "decision", "task", "checkpoint",
                                                "proposals", "key") else line[0]
             for line in _command_lines()}
    for family in ("ingest", "query", "acb build", "remember", "doctor", "purge", "history",
                   "consolidate", "decision add", "task list", "checkpoint load", "key status"):
        assert family in names
    assert len(_command_lines()) >= 35


@pytest.mark.parametrize("source", ["flag", "env", "config"])
def test_every_command_refuses_a_url(tmp_path, monkeypatch, source):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    extra: list[str] = []
    if source == "flag":
        extra = ["--db", URL]
    elif source == "env":
        monkeypatch.setenv("MEMCLI_DB", URL)
    else:
        config = tmp_path / "config.yaml"
        config.write_text(f"db: {URL}\n", encoding="utf-8")
        monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    where = {"flag": "--db", "env": "MEMCLI_DB", "config": f"db in {tmp_path / 'config.yaml'}"}
    wrong = []
    runner = CliRunner()
    for line in _command_lines():
        if line[0] == "demo" and source != "flag":
            continue  # without --db, demo uses a scratch file of its own, never MEMCLI_DB
        result = runner.invoke(app, [*line, *extra])
        if line[0] == "hook":
            # A hook never fails the agent's session (exit 2 would block its prompt or its
            # stop): it logs the refusal to hooks.log and exits 0, having created nothing.
            if result.exit_code != 0 or result.stdout or any(cwd.iterdir()):
                wrong.append((" ".join(line), result.exit_code, result.stderr[-200:]))
            continue
        expected = (f"memcli: error: {where[source]} {SHOWN} is a URL; the PostgreSQL backend "
                    "is not built yet (issue #16; give a file path for SQLite)\n")
        if result.exit_code != 2 or result.stderr != expected or result.stdout:
            wrong.append((" ".join(line), result.exit_code, result.stderr[-200:]))
        if any(cwd.iterdir()):
            wrong.append((" ".join(line), "created", sorted(p.name for p in cwd.iterdir())))
    assert wrong == []
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("*.db"))


def test_entry_point_refuses_a_url(tmp_path):
    """The installed entry point (its fast path for query and acb build, Typer for the rest)
    in a real process, the URL from the environment."""
    from conftest import run_entry_point

    env = {**os.environ, "MEMCLI_DB": URL, "HOME": str(tmp_path), "MEMCLI_EMBEDDER": "hash"}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for args in (["query", "hello"], ["acb", "build", "--user", "u"], ["ingest", "--text", "x"]):
        old = os.getcwd()
        os.chdir(cwd)
        try:
            done = run_entry_point(args, env)
        finally:
            os.chdir(old)
        assert done.returncode == 2, (args, done.stderr)
        assert f"memcli: error: MEMCLI_DB {SHOWN} is a URL" in done.stderr
        assert done.stdout == ""
        assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("location", [
    "postgresql://u@127.0.0.1:5432/db", "postgres://h/db", "POSTGRESQL://h/db",
    "sqlite:///tmp/x.db", "file:memory.db", "file:///tmp/x.db", "http://example.invalid/db",
    "postgresql+psycopg://h/db",
])
def test_url_shapes_are_refused_by_the_library(tmp_path, monkeypatch, location):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with pytest.raises(UsageError, match="is a URL; the PostgreSQL backend is not built yet"):
        load_settings(location)
    with pytest.raises(UsageError, match="database .* is a URL"):
        Memory.open(location)
    with pytest.raises(UsageError, match="is a URL"):
        Database(location)
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("location", ["memory.db", "sub/memory.db", "C:/data/m.db",
                                      "a:b.db", "./x://y.db"])
def test_paths_stay_paths(tmp_path, monkeypatch, location):
    """Only a scheme at the start makes a URL: a Windows drive, a colon inside a file name or
    after the first folder stay file paths."""
    monkeypatch.chdir(tmp_path)
    settings = load_settings(location)
    Database(settings.db).close()
    assert (tmp_path / settings.db).is_file()


@pytest.mark.parametrize("location", [
    "host=127.0.0.1 dbname=memory user=agent password=s3cret", "dbname='my db' port=5432",
    "service=memcli",
])
def test_libpq_connection_strings_are_refused(tmp_path, monkeypatch, location):
    """A keyword/value connection string is not a file name either (it used to become a SQLite
    file called `host=127.0.0.1 dbname=...`); its password is never echoed."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with pytest.raises(UsageError, match="is a PostgreSQL connection string") as caught:
        load_settings(location)
    assert "s3cret" not in str(caught.value)
    with pytest.raises(UsageError, match="connection string"):
        Database(location)
    monkeypatch.setenv("MEMCLI_DB", location)
    with pytest.raises(UsageError, match="MEMCLI_DB .* is a PostgreSQL connection string"):
        load_settings()
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("location", ["a=b.db", "notes/host=x.db", "x = y"])
def test_names_with_an_equals_sign_stay_paths(tmp_path, monkeypatch, location):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(location)
    Path(settings.db).parent.mkdir(parents=True, exist_ok=True)
    Database(settings.db).close()
    assert (tmp_path / settings.db).is_file()
