"""Shared fixtures: an isolated home, real database files in tmp_path, the real CLI."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import apsw
import backend_support
import pg_support
import pytest
import typer.main
import typer.testing
from backend_support import (  # noqa: F401 - the matrix's PostgreSQL
    pg_memcli_db,
    pg_memcli_reused,
    pg_memcli_template,
)
from daemon_support import no_stray_daemons  # noqa: F401 - autouse: no test leaves a daemon
from llmstub import make_stub
from pg_db_support import pg_db  # noqa: F401
from pg_support import pg_cluster, pg_server  # noqa: F401
from typer.testing import CliRunner

from memcli import Memory
from memcli.providers.embedders import HashEmbedder


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    """No test reads the developer's config or data dir, and onnxruntime caches stay in tmp."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    # memcli's daemon sockets: never a developer's running `memcli serve`.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / "run"))
    for var in ("MEMCLI_DB", "MEMCLI_CONFIG", "MEMCLI_EMBEDDER", "MEMCLI_LLM_BASE_URL",
                "MEMCLI_LLM_API_KEY", "OPENAI_API_KEY", "MEMCLI_CATEGORIES", "MEMCLI_TENANT",
                "MEMCLI_SOCKET", "MEMCLI_NO_DAEMON"):
        monkeypatch.delenv(var, raising=False)
    # The parent shell's terminal: rich wraps text output at COLUMNS (the scope line of
    # `--format text` split at COLUMNS=40) and colours it with FORCE_COLOR.
    for var in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    return home


_build_command = functools.cache(typer.main.get_command)


@pytest.fixture
def stub():
    """The scripted OpenAI-compatible server on 127.0.0.1 (tests/llmstub.py), stopped after
    the test."""
    with make_stub() as server:
        yield server


# A config file's retrieval line for tests that need no SPLADE leg (a real model, slow).
NO_SPARSE_CONFIG = (
    "retrieval: {leg_weights: {lexical: 1, sparse: 0, dense: 1, entity: 0.5, trigram: 0.5}}\n")


def use_stub_model(monkeypatch, tmp_path, stub, config: str) -> None:
    """Point the CLI at `stub` as its model, with `config` as its config file."""
    path = tmp_path / "config.yaml"
    path.write_text(config, encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(path))
    monkeypatch.setenv("MEMCLI_LLM_BASE_URL", stub.base_url)
    monkeypatch.setenv("MEMCLI_LLM_MODEL", "stub-model")


@pytest.fixture
def command_built_once(monkeypatch):
    """CliRunner.invoke builds the click command from the Typer app on every call (~50 ms on a
    quiet machine, up to ~1 s on a loaded one); a real process builds it once. Tests making
    hundreds of invocations take this."""
    monkeypatch.setattr(typer.testing, "_get_command", _build_command)


@pytest.fixture
def fast_cli(tmp_path, monkeypatch, command_built_once):
    """For tests about the CLI rather than ranking (`pytestmark = usefixtures("fast_cli")`):
    a config file turns the SPLADE leg off (a real model, ~0.3 s a call), and the click command
    is built once per process, as a real process does, not on every invoke."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0, entity: 0.5, trigram: 0.5}\n"
    )
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """A short base folder for tmp_path: a daemon's socket lives under the test's tmp_path, and
    a unix socket path must stay under 108 bytes, which pytest's default base
    (/tmp/pytest-of-<user>/pytest-<n>/) plus xdist's `popen-gw0/` and a long test name
    exceed. Set before pytest builds its tmp_path factory; with xdist the workers get
    `<base>/popen-gw<n>`."""
    # libpq reads PG* from the environment (a developer's PGHOST, PGOPTIONS): the session's
    # servers and every test give their connections in full.
    for var in [v for v in os.environ if v.startswith("PG")]:
        del os.environ[var]
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="mt-")
        config._memcli_basetemp = config.option.basetemp


def pytest_sessionfinish(session, exitstatus):
    """The run is over (with xdist: every worker, and so every server, has stopped): remove the
    copies of the PostgreSQL server that tests/pg_support.py left under /tmp, and the tmp_path
    base of a run that passed (a failed run's stays, for a look at what its tests left)."""
    if hasattr(session.config, "workerinput"):
        return
    pg_support.remove_server_copies()
    base = getattr(session.config, "_memcli_basetemp", None)
    if base is not None and exitstatus == 0:
        shutil.rmtree(base, ignore_errors=True)


def pytest_generate_tests(metafunc):
    backend_support.parametrize(metafunc)  # tests marked `backends`: SQLite and PostgreSQL


def pytest_collection_modifyitems(config, items):
    backend_support.mark_postgresql(items)  # the tier on a real PostgreSQL server


@pytest.fixture
def backend(request) -> str:
    """The engine of `db_path`: "sqlite", or each of backend_support.BACKENDS for a test
    marked `backends`."""
    return getattr(request, "param", "sqlite")


@pytest.fixture
def db_path(backend, tmp_path, request) -> Path:
    """The test's database: a file in tmp_path (a PostgreSQL URL in the backend matrix)."""
    return backend_support.location(backend, tmp_path, request)


@pytest.fixture
def memory(db_path):
    """A Memory with the deterministic test embedder (real SQLite file, real code path)."""
    with Memory.open(db_path, embedder=HashEmbedder(64)) as m:
        yield m


@pytest.fixture
def cli(monkeypatch, db_path, command_built_once):
    """Run the real CLI in-process with the hash embedder; returns a function(args, input).
    The click command is built once per process (command_built_once), as a real process does."""
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    monkeypatch.setenv("MEMCLI_DB", str(db_path))
    from memcli.cli.app import app

    runner = CliRunner()

    def run(*args: str, input: str | None = None):
        return runner.invoke(app, list(args), input=input, catch_exceptions=False)

    return run


def record_calls(obj, name: str) -> list:
    """Wrap `obj.<name>` so each call's first argument is recorded (the call still goes
    through); returns the list the arguments are appended to."""
    calls: list = []
    inner = getattr(obj, name)

    def recording(first, *args, **kwargs):
        calls.append(first)
        return inner(first, *args, **kwargs)

    setattr(obj, name, recording)
    return calls


def turns(session: str, texts: list[str], user: str = "u1", **extra) -> list[dict]:
    """Records for a conversation, one turn a minute, with stable event ids."""
    return [
        {"event_id": f"{session}-{i}", "session_id": session, "user_id": user,
         "ts": f"2025-01-01T10:{i:02d}:00Z", "content": {"text": text}, **extra}
        for i, text in enumerate(texts)
    ]


def ndjson(records: list[dict]) -> str:
    return "\n".join(json.dumps(r) for r in records) + "\n"


@contextlib.contextmanager
def write_lock_held(db_path):
    """Another connection holds the database's write lock for the duration of the block."""
    holder = apsw.Connection(str(db_path))
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


_ENTRY_POINT = "from memcli.cli.entry import main\nmain()\n"


def run_entry_point(args: list[str], env: dict, stdin: str | None = None
                    ) -> subprocess.CompletedProcess:
    """The installed `memcli` entry point's code in a child process (in-process route unless
    a test started a daemon for the database: tests/daemon_support.py)."""
    return subprocess.run([sys.executable, "-c", _ENTRY_POINT, *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=120)
