"""Every way of writing a PostgreSQL location reaches the same database.

A location is never folded by a Path: `postgresql:///memory` (libpq's unix-socket default, no
host) must not become `postgresql:/memory`, which the `//` restoration then read as host
`memory`. Each form below names the session's server and one test database; PGHOST/PGPORT
(read by libpq itself) give the hostless forms the socket folder. Through the real CLI:
ingest, query, history, export and import, doctor, views, key status; the daemon's routing
key; and `memcli mcp`'s saved location.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memcli.cli.app import app
from memcli.service.daemon import paths
from memcli.store.opener import open_database
from tests.support.cli import CliRunner

pytestmark = pytest.mark.usefixtures("fast_cli")

FORMS = ["url", "postgres_scheme", "socket", "socket_query", "keywords"]


def _form(form: str, cluster, name: str) -> str:
    port, folder = cluster.port, cluster.folder
    return {
        "url": f"postgresql://postgres@127.0.0.1:{port}/{name}",
        "postgres_scheme": f"postgres://postgres@127.0.0.1:{port}/{name}",
        "socket": f"postgresql:///{name}",  # host, port and user from PGHOST/PGPORT/PGUSER
        "socket_query": f"postgresql:///{name}?host={folder}&port={port}&user=postgres",
        "keywords": f"host={folder} port={port} dbname={name} user=postgres",
    }[form]


@pytest.fixture
def located(request, pg_cluster, pg_memcli_db, monkeypatch, tmp_path, fast_cli):
    """(location in the form under test, the test database's plain URL)."""
    name = pg_memcli_db.rsplit("/", 1)[1]
    # For the hostless form only (libpq reads them; memcli does not): any other form that
    # leaned on them would find no server at the default socket folder and fail.
    if request.param == "socket":
        monkeypatch.setenv("PGHOST", str(pg_cluster.folder))
        monkeypatch.setenv("PGPORT", str(pg_cluster.port))
        monkeypatch.setenv("PGUSER", "postgres")
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    monkeypatch.chdir(tmp_path)
    return _form(request.param, pg_cluster, name), pg_memcli_db


def _run(*args: str, input: str | None = None):
    result = CliRunner().invoke(app, list(args), input=input)
    assert result.exit_code == 0, (args, result.stderr, result.stdout)
    return result


def _database_name(location: str) -> str:
    db = open_database(location)
    try:
        return db.scalar("SELECT current_database()")
    finally:
        db.close()


@pytest.mark.parametrize("located", FORMS, indirect=True)
def test_every_form_reaches_the_database(located, tmp_path: Path) -> None:
    location, url = located
    name = url.rsplit("/", 1)[1]
    assert _database_name(location) == name
    for source in ("flag", "env", "config"):
        args: list[str] = []
        if source == "flag":
            args = ["--db", location]
        elif source == "env":
            os.environ["MEMCLI_DB"] = location
        else:
            os.environ.pop("MEMCLI_DB", None)
            config = tmp_path / "config.yaml"  # fast_cli's settings, and the location
            config.write_text(Path(os.environ["MEMCLI_CONFIG"]).read_text(encoding="utf-8")
                              + f"\ndb: {json.dumps(location)}\n", encoding="utf-8")
            os.environ["MEMCLI_CONFIG"] = str(config)
        try:
            record = {"event_id": f"e-{source}", "user_id": "u1",
                      "content": {"text": f"the lighthouse keeper {source}"}}
            _run("ingest", "-", *args, input=json.dumps(record))
            hits = json.loads(_run("query", "lighthouse keeper", "--user-id", "u1", "--json",
                                   *args).stdout)
            assert f"the lighthouse keeper {source}" in {h["text"] for h in hits}
        finally:
            os.environ.pop("MEMCLI_DB", None)
    hits = json.loads(_run("query", "lighthouse", "--user-id", "u1", "--json", "--db",
                           url).stdout)
    assert len(hits) == 3  # all three writes reached the one database
    memory_id = str(hits[0]["id"])
    assert json.loads(_run("history", memory_id, "--db", location, "--json").stdout)
    doctor = json.loads(_run("doctor", "--db", location, "--json").stdout)
    assert doctor["healthy"], doctor
    assert json.loads(_run("key", "status", "--db", location, "--json").stdout)[
        "encrypted_values"] == 0
    view = tmp_path / "view"
    _run("view", "export", str(view), "--user-id", "u1", "--db", location, "--json")
    _run("view", "apply", str(view), "--db", location, "--json")
    exported = tmp_path / "m.jsonl"
    _run("export", "--db", location, "--all-tenants", "--out", str(exported))
    assert exported.stat().st_size > 0
    # nothing made from the location in the working folder (a `postgresql:` folder...)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "m.jsonl", "view"]


@pytest.mark.parametrize("located", FORMS, indirect=True)
def test_import_into_each_form(located, tmp_path: Path, pg_server: str) -> None:
    from tests.support.pg_db import scratch_database, with_database

    location, url = located
    exported = tmp_path / "m.jsonl"
    _run("ingest", "--db", url, "--text", "a harbour at dawn", "--user-id", "u1")
    _run("export", "--db", url, "--all-tenants", "--out", str(exported))
    with scratch_database(pg_server) as other:
        target = location.replace(url.rsplit("/", 1)[1], other)
        _run("import", "--db", target, "--all-tenants", str(exported))
        hits = json.loads(_run("query", "harbour", "--user-id", "u1", "--json", "--db",
                               with_database(pg_server, other)).stdout)
        assert [h["text"] for h in hits] == ["a harbour at dawn"]


@pytest.mark.parametrize("form", FORMS)
def test_routing_key_and_mcp_location_keep_the_form(form: str, pg_cluster) -> None:
    """The daemon's socket name is a hash of the location as given (client and server
    compute it from the same text), and `memcli mcp install` saves it unchanged."""
    from memcli.cli.mcp import _absolute

    location = _form(form, pg_cluster, "memory")
    assert _absolute(location) == location
    assert paths.db_key(location, "/elsewhere") == paths.db_key(location, "/")


def test_a_folded_url_is_refused_not_guessed(pg_cluster, pg_memcli_db, tmp_path) -> None:
    """A Path folds `postgresql:///db?host=...` into `postgresql:/db?host=...`; restoring the
    `//` read `db` as a host, and the `host=` parameter then led to the server's default
    database (`postgres`): memcli wrote its tables there. Now a usage error (exit 2)."""
    import psycopg

    from memcli import Memory
    from memcli.errors import UsageError

    name = pg_memcli_db.rsplit("/", 1)[1]
    location = _form("socket_query", pg_cluster, name)
    with pytest.raises(UsageError, match="has lost the `//`"):
        Memory.open(Path(location)).close()
    default = pg_memcli_db.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(default) as conn:
        assert conn.execute("SELECT to_regclass('memories')").fetchone() == (None,)
    result = CliRunner().invoke(app, ["query", "x", "--db", str(Path(location))])
    assert result.exit_code == 2 and result.stderr.startswith(
        f"memcli: error: --db postgresql:/{name}?") and len(result.stderr.splitlines()) == 1
    Memory.open(location).close()  # the same location as a str opens
    assert list(tmp_path.iterdir()) in ([], [tmp_path / "config.yaml"])
