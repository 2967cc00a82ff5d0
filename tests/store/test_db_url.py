"""A URL as the database location is never taken as a file path.

`MEMCLI_DB=postgresql://...` used to make a folder `postgresql:` in the current directory with a
SQLite file inside it. A postgresql:// URL or libpq string now opens PostgreSQL (a closed port
is the one-line "cannot connect", exit 1); any other URL is refused (exit 2, one line). Every
command that takes --db is found from the app itself (a new command is covered without editing
this file) and run with a URL from --db, MEMCLI_DB and the config file: each must fail naming
the URL, and leave the current folder empty.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import typer.main

from memcli import Memory
from memcli.cli.app import app
from memcli.config import load_settings
from memcli.errors import UsageError
from memcli.store.sqlite.connection import Database
from tests.support.cli import CliRunner
from tests.support.net import refused_port

pytestmark = pytest.mark.usefixtures("fast_cli")

URL = "mysql://agent:s3cret@127.0.0.1:5432/memory"
SHOWN = "mysql://agent:***@127.0.0.1:5432/memory"  # the password never reaches stderr


@pytest.fixture
def closed_port():
    """A loopback port where connections are refused, for the whole test (tests.support.net)."""
    with refused_port() as port:
        yield port


# Arguments that get a command past its own input checks (which come before the database).
# Every other required argument gets "1" (an id, or a text).
ARGS = {
    ("ingest",): ["--text", "hello"],
    ("remember",): ["hello"],
    ("checkpoint", "save"): ["--data", "{}", "--user-id", "u", "--thread-id", "t"],
    ("acb", "show"): ["rules"],
    ("acb", "edit"): ["rules"],
    ("mcp", "install"): ["--client", "cursor"],
}


# Commands that, with these arguments, never open the database (files of the config folder,
# a client's config, the service's pid file).
NO_DATABASE = {("acb", "edit"), ("acb", "show"), ("mcp", "install"), ("serve", "status"),
               ("serve", "stop"), ("ui",)}  # `memcli ui` asks the database's daemon


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
        expected = (f"memcli: error: {where[source]} {SHOWN} is a URL memcli cannot open "
                    "(give a file path (SQLite) or a postgresql:// URL (PostgreSQL))\n")
        if result.exit_code != 2 or result.stderr != expected or result.stdout:
            wrong.append((" ".join(line), result.exit_code, result.stderr[-200:]))
        if any(cwd.iterdir()):
            wrong.append((" ".join(line), "created", sorted(p.name for p in cwd.iterdir())))
    assert wrong == []
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("*.db"))


@pytest.mark.long  # the entry point as a child process
def test_entry_point_refuses_a_url(tmp_path):
    """The installed entry point (its fast path for query and acb build, Typer for the rest)
    in a real process, the URL from the environment."""
    from tests.support.cli import run_entry_point

    env = {**os.environ, "MEMCLI_DB": URL, "HOME": str(tmp_path), "MEMCLI_EMBEDDER": "hash"}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for args in (["query", "hello"], ["acb", "build", "--user-id", "u"], ["ingest", "--text", "x"]):
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


@pytest.mark.parametrize("source", ["flag", "env"])
def test_every_command_reaches_the_server_of_a_postgresql_url(tmp_path, monkeypatch, source,
                                                               closed_port):
    """A postgresql:// URL opens PostgreSQL: with nothing listening, every command stops with
    the one-line "cannot connect" (exit 1; a hook logs it and exits 0), password masked, and
    no folder `postgresql:` appears."""
    pytest.importorskip("psycopg")
    port = closed_port
    url = f"postgresql://agent:s3cret@127.0.0.1:{port}/memory"
    shown = f"postgresql://agent:***@127.0.0.1:{port}/memory"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    extra = ["--db", url] if source == "flag" else []
    monkeypatch.setenv("VISUAL", "true")  # `acb edit` opens the editor before the database
    if source == "env":
        monkeypatch.setenv("MEMCLI_DB", url)
    wrong = []
    runner = CliRunner()
    for line in _command_lines():
        if line[0] == "demo" and source != "flag":
            continue
        result = runner.invoke(app, [*line, *extra])
        if any(cwd.iterdir()):
            wrong.append((" ".join(line), "created", sorted(p.name for p in cwd.iterdir())))
        if "s3cret" in result.stderr:  # (`mcp install` prints the URL it configures)
            wrong.append((" ".join(line), "shows the password", result.stderr[-300:]))
        if (line[0] == "hook" or tuple(line[:2]) in NO_DATABASE or tuple(line[:1]) in NO_DATABASE
                or line[0] == "import"):
            continue  # a hook exits 0 (logged); `import 1` stops at its missing file
        one_line = result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        if (result.exit_code != 1 or not one_line or "s3cret" in result.stderr
                or f"cannot connect to {shown}" not in result.stderr):
            wrong.append((" ".join(line), result.exit_code, result.stderr[-300:]))
    assert wrong == []


@pytest.mark.parametrize("location", [
    "sqlite:///tmp/x.db", "file:memory.db", "file:///tmp/x.db", "http://example.invalid/db",
    "postgresql+psycopg://h/db", "mysql://u@h/db",
])
def test_url_shapes_are_refused_by_the_library(tmp_path, monkeypatch, location):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with pytest.raises(UsageError, match="is a URL memcli cannot open"):
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
    "postgresql://u@127.0.0.1:5432/db", "postgres://h/db", "POSTGRESQL://h/db",
    "host=127.0.0.1 dbname=memory user=agent password=s3cret", "dbname='my db' port=5432",
    "service=memcli",
])
def test_postgresql_locations_are_not_files(tmp_path, monkeypatch, location):
    """A PostgreSQL URL or keyword/value connection string is a server location: the settings
    keep it as given, and SQLite's Database refuses it (it used to become a SQLite file called
    `host=127.0.0.1 dbname=...`); a password is never echoed."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert load_settings(location).db == location
    with pytest.raises(UsageError, match="connection string|is a URL") as caught:
        Database(location)
    assert "s3cret" not in str(caught.value)
    monkeypatch.setenv("MEMCLI_DB", location)
    assert load_settings().db == location
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("location", ["a=b.db", "notes/host=x.db", "x = y"])
def test_names_with_an_equals_sign_stay_paths(tmp_path, monkeypatch, location):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(location)
    Path(settings.db).parent.mkdir(parents=True, exist_ok=True)
    Database(settings.db).close()
    assert (tmp_path / settings.db).is_file()


@pytest.mark.parametrize(("location", "bare"), [
    ("postgresql://agent:s3cret@h1:5432,h2/memory", "postgresql://agent@h1:5432,h2/memory"),
    ("postgres://agent:p%40ss@/memory?host=/run/pg", "postgres://agent@/memory?host=/run/pg"),
    ("postgresql:///memory?password=s3cret&sslmode=require",
     "postgresql:///memory?sslmode=require"),
    ("host=h dbname=memory password = 'a b' user=agent", "host=h dbname=memory user=agent"),
    ("postgresql://agent@h/memory", None),
    ("postgresql://agent:@h/memory", None),  # an empty password is nothing to hide
    ("host=h passfile=/home/agent/.pgpass dbname=memory", None),
    ("/tmp/memory.db", None),
])
def test_a_location_without_its_password(location, bare):
    """What `memcli mcp install` refuses to write, and the location its refusal gives."""
    from memcli.core.locations import without_password

    assert without_password(location) == bare
