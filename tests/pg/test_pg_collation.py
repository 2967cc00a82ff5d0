"""Name orders on PostgreSQL follow SQLite's byte order whatever the database's collation
memcli orders names and keys through `dialect.binary`, `COLLATE "C"` there.

The tests' server is C.UTF-8 (byte order already) and the embedded build has no ICU, so a
database with a linguistic order needs a libc locale the machine does not ship: en_US.UTF-8 is
compiled with `localedef` into a folder the server is started with (LOCPATH is read when the
server starts, which is why this module starts its own server with the tests' running_server
rather than using the session's). Skipped where localedef or the locale sources are missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.records import ndjson, turns

pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not installed")

import psycopg  # noqa: E402

from tests.support.pg import PgUnavailable, running_server  # noqa: E402

pytestmark = pytest.mark.usefixtures("fast_cli")

LOCALE_SOURCE = Path("/usr/share/i18n/locales/en_US")


@pytest.fixture(scope="module")
def en_us_server():
    """A throw-away server that can create en_US.UTF-8 databases; its admin DSN."""
    if shutil.which("localedef") is None or not LOCALE_SOURCE.exists():
        pytest.skip("no localedef or en_US locale sources to build a non-C collation from")
    mp = pytest.MonkeyPatch()
    # Not under tmp_path: the server runs as its own user, which cannot enter pytest's 0700
    # folders when the tests run as root.
    with tempfile.TemporaryDirectory(prefix="memcli-locales-") as folder:
        Path(folder).chmod(0o755)
        subprocess.run(["localedef", "-i", "en_US", "-f", "UTF-8", f"{folder}/en_US.UTF-8"],
                       capture_output=True, timeout=120, check=False)
        if not (Path(folder) / "en_US.UTF-8" / "LC_COLLATE").exists():
            pytest.skip("localedef could not build en_US.UTF-8 here")
        mp.setenv("LOCPATH", folder)
        try:
            with running_server() as server:
                yield server.dsn
        except PgUnavailable as exc:
            pytest.skip(f"PostgreSQL: {exc}")
        finally:
            mp.undo()


@pytest.fixture
def en_us_db(en_us_server):
    """A fresh database whose default collation is en_US (letters before case, `a` < `B`)."""
    name = "names_en_us"
    with psycopg.connect(en_us_server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f"CREATE DATABASE \"{name}\" TEMPLATE template0 LOCALE_PROVIDER libc"
                      f" LOCALE 'en_US.UTF-8' ENCODING 'UTF8'")
    url = en_us_server.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(url) as conn:  # the premise: this database's own order is not bytes'
        assert conn.execute("SELECT 'alpha' < 'Zeta'").fetchone()[0] is True
    return url


@pytest.fixture
def run(monkeypatch):
    from memcli.cli.app import app
    from tests.support.cli import CliRunner

    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    runner = CliRunner()

    def invoke(db: str, *args: str, input: str | None = None):
        result = runner.invoke(app, [*args, "--db", db], input=input, catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        return result.stdout

    return invoke


EVENTS = (turns("Zeta", ["the zeta plan ships friday"], user="Bob", tenant_id="Acme")
          + turns("alpha", ["alice likes green tea"], user="alice", tenant_id="Acme")
          + turns("a", ["beta tenant notes"], user="carol", tenant_id="beta"))


def exported_sessions(run, db: str) -> list[tuple[str, str]]:
    text = run(db, "export", "--all-tenants")
    rows = [json.loads(line) for line in text.split("\n")[1:] if line]
    return [(r["tenant_id"], r["session_id"]) for r in rows if r["record"] == "session"]


def test_names_sort_by_bytes_on_an_en_us_database(run, en_us_db, tmp_path):
    file = str(tmp_path / "m.db")
    for db in (file, en_us_db):
        run(db, "ingest", "-", input=ndjson(EVENTS))
    byte_order = [("Acme", "Zeta"), ("Acme", "alpha"), ("beta", "a")]
    assert exported_sessions(run, file) == byte_order
    # en_US's own order would be (Acme, alpha), (Acme, Zeta): without COLLATE "C" it is that
    assert exported_sessions(run, en_us_db) == byte_order
