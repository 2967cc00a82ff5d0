"""Files only their user can read: the database with its WAL and shared-memory files, exports,
views, the hooks log and token files are created 0600, the folders memcli creates for them
0700, under the common umask 022; a folder that already existed keeps its mode; `doctor` names
a database others can read and the `chmod` that fixes it (memcli.core.private)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from tests.support.records import ndjson

pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.sqlite_only]

RECORDS = [
    {
        "event_id": f"e{i}",
        "user_id": "priya",
        "session_id": "s1",
        "text": f"Priya's passport number is in the blue folder, turn {i}.",
    }
    for i in range(3)
]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def common_umask():
    """The umask most systems start users with (022: new files 0644, folders 0755), whatever
    the shell running the tests has."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_database_and_its_folders_are_private(cli, tmp_path, monkeypatch) -> None:
    db = tmp_path / "new" / "deeper" / "memory.db"
    monkeypatch.setenv("MEMCLI_DB", str(db))
    before = mode(tmp_path)
    r = cli("ingest", "-", input=ndjson(RECORDS))
    assert r.exit_code == 0, r.stderr
    # While a connection is open SQLite keeps the WAL and shared-memory files: read them then.
    from memcli import Memory

    with Memory.open(db) as memory:
        memory.db.execute("SELECT count(*) FROM events")
        files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
        assert {f.name: oct(mode(f)) for f in files} == {f.name: "0o600" for f in files}
    assert oct(mode(db.parent)) == oct(mode(db.parent.parent)) == "0o700"
    assert mode(tmp_path) == before  # a folder that was there is the user's: left alone


def test_an_existing_folder_keeps_its_mode(cli, tmp_path, monkeypatch) -> None:
    shared = tmp_path / "project"
    shared.mkdir(mode=0o755)
    db = shared / "memory.db"
    monkeypatch.setenv("MEMCLI_DB", str(db))
    assert cli("ingest", "-", input=ndjson(RECORDS)).exit_code == 0
    assert mode(shared) == 0o755 and mode(db) == 0o600


def test_an_export_is_private_even_over_an_open_file(cli, db_path, tmp_path) -> None:
    assert cli("ingest", "-", input=ndjson(RECORDS)).exit_code == 0
    fresh, old = tmp_path / "fresh.jsonl", tmp_path / "old.jsonl"
    old.write_text("an earlier export\n")
    old.chmod(0o644)
    for out in (fresh, old):
        r = cli("export", "-o", str(out))
        assert r.exit_code == 0, r.stderr
        assert mode(out) == 0o600, out.name
        assert "blue folder" in out.read_text()


def test_a_view_folder_and_its_files_are_private(cli, db_path, tmp_path) -> None:
    assert cli("ingest", "-", input=ndjson(RECORDS)).exit_code == 0
    assert (
        cli("remember", "Priya keeps her passport in the blue folder", "--user", "priya").exit_code
        == 0
    )
    where = tmp_path / "views" / "priya"
    r = cli("view", "export", str(where), "--user-id", "priya")
    assert r.exit_code == 0, r.stderr
    assert mode(where) == mode(where.parent) == 0o700
    files = sorted(where.iterdir())
    assert files and {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}


def test_the_hooks_log_is_private(cli, tmp_path) -> None:
    not_a_db = tmp_path / "folder"
    not_a_db.mkdir()
    r = cli("hook", "record", "--db", str(not_a_db), input=json.dumps({"prompt": "hi"}))
    assert r.exit_code == 0
    log = Path(os.environ["XDG_DATA_HOME"]) / "memcli" / "hooks.log"
    assert log.exists() and mode(log) == 0o600
    assert mode(log.parent) == 0o700


def test_a_token_file_and_every_folder_made_for_it_are_private(tmp_path) -> None:
    from memcli.service.http.auth import _generated_token

    path, created = _generated_token(tmp_path / "config" / "memcli" / "serve.token")
    assert created and mode(path) == 0o600
    assert mode(path.parent) == mode(path.parent.parent) == 0o700


def test_doctor_names_an_existing_database_others_can_read(cli, db_path) -> None:
    """A database an older memcli (or a copy under umask 022) left 0644: doctor says so, with
    the command that fixes it; after that command it is healthy on this count."""
    assert cli("ingest", "-", input=ndjson(RECORDS)).exit_code == 0
    db_path.chmod(0o644)
    r = cli("doctor", "--json")
    assert r.exit_code == 1
    (found,) = [c for c in json.loads(r.stdout)["checks"] if c["check"] == "permissions"]
    assert found["status"] == "problem" and str(db_path) in found["detail"]
    assert found["fix"] == f"chmod 600 {shlex.quote(str(db_path))}*"  # with its WAL and SHM
    subprocess.run(found["fix"], shell=True, check=True)  # noqa: S602 - the command it prints
    (again,) = [
        c
        for c in json.loads(cli("doctor", "--json").stdout)["checks"]
        if c["check"] == "permissions"
    ]
    assert again["status"] == "ok", again
    # memcli leaves an existing file's mode to its owner: opening it changed nothing.
    db_path.chmod(0o640)
    assert cli("query", "passport", "--user", "priya").exit_code == 0
    assert mode(db_path) == 0o640
