"""Shared fixtures: an isolated home, real database files in tmp_path, the real CLI."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from memcli import Memory
from memcli.providers.embedders import HashEmbedder
from tests.support import backend as matrix
from tests.support import pg
from tests.support.backend import (  # noqa: F401 - the matrix's PostgreSQL
    pg_memcli_db,
    pg_memcli_reused,
    pg_memcli_template,
)
from tests.support.cli import CliRunner, command
from tests.support.daemon import no_stray_daemons  # noqa: F401 - autouse: no test leaves a daemon
from tests.support.llmstub import make_stub
from tests.support.pg import pg_cluster, pg_server  # noqa: F401
from tests.support.pg_db import pg_db  # noqa: F401
from tests.support.rerankstub import RerankStub
from tests.support.sockets import short_tempdir
from tests.support.trust import UNSET


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    """No test reads the developer's config or data dir, and onnxruntime caches stay in tmp."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    # memcli's daemon sockets: never a developer's running `memcli serve`.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / "run"))
    # No command starts a daemon by itself (tests/service/test_autostart.py turns it back on).
    monkeypatch.setenv("MEMCLI_AUTOSTART", "0")
    for var in ("MEMCLI_DB", "MEMCLI_CONFIG", "MEMCLI_EMBEDDER", "MEMCLI_LLM_BASE_URL",
                "MEMCLI_LLM_API_KEY", "MEMCLI_CATEGORIES", "MEMCLI_TENANT",
                "MEMCLI_SOCKET", "MEMCLI_NO_DAEMON", "MEMCLI_LOCK_WAIT", "MEMCLI_RERANK_URL",
                "MEMCLI_RERANK_MODEL", "MEMCLI_RERANK_API_KEY", "MEMCLI_RERANK_FORMAT",
                "MEMCLI_RERANK_TIMEOUT", "MEMCLI_RERANK_TOP_N"):
        monkeypatch.delenv(var, raising=False)
    # Credentials, and the parent shell's terminal: rich wraps text output at COLUMNS (the
    # scope line of `--format text` split at COLUMNS=40) and colours it with FORCE_COLOR.
    for var in UNSET:
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def stub():
    """The scripted OpenAI-compatible server on 127.0.0.1 (tests/support/llmstub.py), stopped after
    the test."""
    with make_stub() as server:
        yield server


@pytest.fixture
def rerank_stub():
    """The scripted reranking server on 127.0.0.1 (tests/support/rerankstub.py), both wire
    formats, stopped after the test."""
    with RerankStub() as server:
        yield server


@pytest.fixture
def command_built_once():
    """The app's click command, built once per process as a real process builds it
    (tests/support/cli.py: its CliRunner runs this command, never a rebuilt one)."""
    from memcli.cli.app import app

    return command(app)


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
    `<base>/popen-gw<n>`. A TMPDIR too long for that (a CI runner's deep work folder) gives
    way to /tmp: memcli itself copes with a long runtime folder
    (tests/service/test_daemon_identity.py), but tests that bind sockets at paths of their own
    under tmp_path need the room."""
    # libpq reads PG* from the environment (a developer's PGHOST, PGOPTIONS): the session's
    # servers and every test give their connections in full.
    for var in [v for v in os.environ if v.startswith("PG")]:
        del os.environ[var]
    # No `memcli` process a test starts starts a daemon by itself (warm by default): set
    # before xdist's workers start, so every process of the run inherits it. The tests of the
    # feature (tests/service/test_autostart.py) remove it from their processes' environment.
    os.environ["MEMCLI_AUTOSTART"] = "0"
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="mt-", dir=short_tempdir())
        config._memcli_basetemp = config.option.basetemp


def pytest_sessionfinish(session, exitstatus):
    """The run is over (with xdist: every worker, and so every server, has stopped): remove the
    copies of the PostgreSQL server that tests/support/pg.py left under /tmp, and the tmp_path
    base of a run that passed (a failed run's stays, for a look at what its tests left)."""
    if hasattr(session.config, "workerinput"):
        return
    pg.remove_server_copies()
    base = getattr(session.config, "_memcli_basetemp", None)
    if base is not None and exitstatus == 0:
        shutil.rmtree(base, ignore_errors=True)


def pytest_generate_tests(metafunc):
    matrix.parametrize(metafunc)  # tests marked `backends`: SQLite and PostgreSQL


def pytest_collection_modifyitems(config, items):
    matrix.mark_postgresql(items)  # the tier on a real PostgreSQL server


@pytest.fixture
def backend(request) -> str:
    """The engine of `db_path`: "sqlite", or each of tests.support.backend.BACKENDS for a
    test marked `backends`."""
    return getattr(request, "param", "sqlite")


@pytest.fixture
def db_path(backend, tmp_path, request) -> Path:
    """The test's database: a file in tmp_path (a PostgreSQL URL in the backend matrix)."""
    return matrix.location(backend, tmp_path, request)


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
