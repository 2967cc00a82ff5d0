"""Bad input and environment failures: each one is a
per-record rejection or a one-line error with its exit code, never a traceback, never a lost
good record, and never a change to a file that is not a memcli database."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from memcli import Memory
from memcli.errors import StorageError
from memcli.retrieval.text import MAX_QUERY_TERMS, lexical_query
from tests.support.backend import rows
from tests.support.fuzz import check_output, counts, run_cli

# The tests that write to or read the store run on SQLite and PostgreSQL (tests/support/backend.py);
# the ones about a file at the path (empty, foreign, a folder, full) are SQLite's alone.
pytestmark = pytest.mark.backends

GOOD = b'{"event_id":"g1","text":"a good record"}\n'
BAD_LINES = {
    "event_id-int": b'{"text":"b","event_id":0}',
    "event_id-list": b'{"text":"b","event_id":[1]}',
    "content-int": b'{"text":"b","content":5}',
    "content-list": b'{"content":[1,2]}',
    "ts-overflow": b'{"text":"b","ts":"0001-01-01T00:00:00+01:00"}',
    "invalid-utf8": b'{"text":"b\xff\xfe"}',
    "invalid-utf8-key": b'{"text":"b","content":{"k\xff":"v"}}',
    "lone-surrogate": b'{"text":"b\\ud800"}',
    "surrogate-event-id": b'{"text":"b","event_id":"\\udfff"}',
    "deep-1000": b'{"text":"b","refs":' + b"[" * 1000 + b"]" * 1000 + b"}",
    "deep-600": b'{"text":"b","refs":' + b"[" * 600 + b"]" * 600 + b"}",
    "deep-object": b'{"text":"b","content":' + b'{"a":' * 700 + b"1" + b"}" * 700 + b"}",
    "huge-int": b'{"text":"b","content":{"n":' + b"1" * 5000 + b"}}",
    "not-an-object": b"[1, 2]",
    "bad-json": b'{"text": "b"',
}


@pytest.fixture
def env(monkeypatch, db_path):
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    monkeypatch.setenv("MEMCLI_DB", str(db_path))
    return db_path


def _lines(stderr: str) -> list[str]:
    return stderr.splitlines()


def event_ids(location) -> set[str]:
    return {r[0] for r in rows(location, "SELECT event_id FROM events")}


# -- point 9: one bad record never loses the good ones ------------------------------------------
@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_bad_record_is_rejected_alone(env, name):
    result = run_cli(["ingest", "-"], GOOD + BAD_LINES[name] + b"\n")
    check_output(result.exit_code, result.stderr, what=name)
    assert result.exit_code == 2, result.stderr
    report = json.loads(result.stdout)
    assert report["created"] == ["g1"]
    assert len(report["rejected"]) == 1 and report["rejected"][0]["line"] == 2
    assert _lines(result.stderr)[0].startswith("memcli: error: <stdin>:2: ")
    assert event_ids(env) == {"g1"}


@pytest.mark.parametrize("name", ["invalid-utf8", "ts-overflow", "event_id-int", "deep-600"])
def test_bad_record_in_a_json_array(env, name):
    body = b"[" + GOOD.strip() + b"," + BAD_LINES[name] + b"]"
    result = run_cli(["ingest", "-"], body)
    assert result.exit_code == 2, result.stderr
    assert event_ids(env) == {"g1"}


def test_file_with_invalid_utf8_keeps_its_good_records(env, tmp_path):
    path = tmp_path / "batch.ndjson"
    path.write_bytes(GOOD + BAD_LINES["invalid-utf8"] + b"\n")
    result = run_cli(["ingest", str(path)])
    assert result.exit_code == 2
    assert _lines(result.stderr) == [f"memcli: error: {path}:2: text: not valid UTF-8 "
                                     "(an invalid byte or a lone surrogate)"]
    assert event_ids(env) == {"g1"}


@pytest.mark.parametrize("args,stdin", [
    (["query", "-"], b"kiwi \xff"),
    (["query", "kiwi \udcff"], None),  # argv bytes that are not UTF-8 arrive as surrogates
    (["query", "kiwi", "--session-id", "s\udcff"], None),
    (["query", "kiwi", "--updated-after", "0001-01-01T00:00:00+01:00"], None),
    (["acb", "build", "-"], b'{"query": "kiwi \xff"}'),
    (["acb", "build", "-"], b'{"query": ' + b"[" * 1000 + b"]" * 1000 + b"}"),
    (["acb", "build", "-"], b'{"query": "kiwi", "user": ' + b"[" * 100 + b"]" * 100 + b"}"),
    (["acb", "build", "-"], b'{"query": "kiwi", "as_of": "0001-01-01T00:00:00+01:00"}'),
    (["acb", "build", "-q", "kiwi \udcff"], None),
])
def test_query_and_acb_bad_input_is_a_usage_error(env, args, stdin):
    run_cli(["ingest", "--text", "kiwi pie"])
    result = run_cli(args, stdin)
    check_output(result.exit_code, result.stderr, what=str(args))
    assert result.exit_code in (0, 2)
    if result.exit_code == 2:
        assert len(_lines(result.stderr)) == 1


@pytest.mark.parametrize("args", [
    ["remember", "-"],
    ["checkpoint", "save", "-", "--user-id", "u1", "--thread-id", "t1"],
])
def test_write_commands_reading_stdin_refuse_invalid_utf8(env, args):
    """Text read from stdin goes through the same decoding and check as `query -`."""
    result = run_cli(args, b"abc \xff def")
    assert result.exit_code == 2
    assert _lines(result.stderr) == [
        f"memcli: error: the {'state' if 'checkpoint' in args else 'text'} on stdin is not valid"
        " UTF-8 (an invalid byte or a lone surrogate) (send UTF-8 text)"]


# -- point 10: long queries are bounded and say so ----------------------------------------------
def test_long_query_is_truncated_with_a_note(env):
    run_cli(["ingest", "--text", "kiwi pie"])
    words = " ".join(f"w{i}" for i in range(30_000))
    result = run_cli(["query", "-"], ("kiwi " + words).encode())
    assert result.exit_code == 0
    assert _lines(result.stderr) == ["memcli: warning: query truncated to its first 2000 of "
                                     f"{len(words) + 5} characters (what the search legs can use)"]
    result = run_cli(["acb", "build", "-q", "kiwi " + words])
    assert result.exit_code == 0
    assert "query truncated" in json.loads(result.stdout)["provenance"]["query_truncated"]


def test_lexical_query_keeps_at_most_max_terms():
    query = lexical_query(" ".join(f"term{i}" for i in range(1000)))
    assert query.terms == tuple(f"term{i}" for i in range(MAX_QUERY_TERMS))


# -- point 11: read commands never create a database --------------------------------------------
READ_COMMANDS = [
    ["query", "x"], ["acb", "build", "-q", "x"], ["acb", "build"], ["history", "1"],
    ["stats"], ["stats", "--requests"], ["stats", "--usage"], ["artifact", "art_x"],
    ["related", "1"], ["decision", "list"], ["task", "list"],
    ["checkpoint", "load", "--thread-id", "t", "--user-id", "u"], ["proposals", "list"],
]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_read_command_on_missing_database(monkeypatch, tmp_path, args):
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    path = tmp_path / "no" / "such" / "memory.db"
    result = run_cli([*args, "--db", str(path)])
    assert result.exit_code == 1, result.stderr
    assert _lines(result.stderr) == [f"memcli: error: no memcli database at {path} (check --db "
                                     "or MEMCLI_DB; `memcli ingest` creates one)"]
    assert not (tmp_path / "no").exists()


@pytest.mark.sqlite_only
def test_read_command_on_empty_file_leaves_it(env):
    env.write_bytes(b"")
    result = run_cli(["query", "x"])
    assert result.exit_code == 1
    assert "no memcli database" in result.stderr
    assert env.read_bytes() == b"" and not Path(f"{env}-wal").exists()


# -- point 14: foreign files untouched; environment failures named -------------------------------
def _foreign(path: Path, table: str) -> str:
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE {table} (a)")
    conn.execute(f"INSERT INTO {table} VALUES (1)")
    conn.commit()
    conn.close()
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.sqlite_only
@pytest.mark.parametrize("table", ["notes", "events", "meta"])
@pytest.mark.parametrize("args", [["ingest", "--text", "hi"], ["query", "hi"], ["stats"]],
                         ids=" ".join)
def test_foreign_sqlite_file_is_never_modified(env, table, args):
    digest = _foreign(env, table)
    result = run_cli(args)
    assert result.exit_code == 1
    assert _lines(result.stderr) == [f"memcli: error: {env} is a SQLite database of another "
                                     f"program (tables: {table}) (choose another --db; memcli "
                                     "leaves it alone)"]
    assert hashlib.sha256(env.read_bytes()).hexdigest() == digest
    assert not Path(f"{env}-wal").exists()


@pytest.mark.sqlite_only
def test_not_a_sqlite_file(env):
    env.write_bytes(b"just some notes\n" * 100)
    result = run_cli(["ingest", "--text", "hi"])
    assert result.exit_code == 1 and "is not a SQLite database" in result.stderr
    assert env.read_bytes() == b"just some notes\n" * 100


@pytest.mark.sqlite_only
def test_database_path_is_a_folder(env, tmp_path):
    result = run_cli(["ingest", "--text", "hi", "--db", str(tmp_path)])
    assert result.exit_code == 1
    assert _lines(result.stderr) == [f"memcli: error: cannot open {tmp_path}: it is a folder "
                                     "(give a file path to --db)"]


@pytest.mark.sqlite_only
def test_full_disk_stops_the_batch_with_one_error(db_path):
    """SQLite's max_page_count makes the file full as a full disk would (FullError)."""
    with Memory.open(db_path) as memory:
        memory.ingest([{"text": "first"}])
        pages = memory.db.scalar("PRAGMA page_count")
        memory.db.execute(f"PRAGMA max_page_count = {pages}")
        big = [{"text": f"record {i} " + "lorem ipsum " * 400} for i in range(20)]
        with pytest.raises(StorageError, match="^disk full: cannot write"):
            memory.ingest(big)
        assert memory.db.scalar("SELECT count(*) FROM events") == 1


def _mount(path: Path, *options: str) -> bool:
    path.mkdir(exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=2m", *options)),
                           "tmpfs", str(path)], capture_output=True, check=False)
    return done.returncode == 0


@pytest.fixture
def protected(tmp_path):
    """A folder holding a memcli database that cannot be written: by permissions for a normal
    user, a read-only tmpfs for root (whom permissions do not stop)."""
    folder = tmp_path / "protected"
    source = tmp_path / "source.db"
    with Memory.open(source) as memory:
        memory.ingest([{"text": "kiwi pie for the picnic"}])
    if os.geteuid() != 0:
        folder.mkdir()
        shutil.copy(source, folder / "memory.db")
        (folder / "memory.db").chmod(0o444)
        folder.chmod(0o555)
        yield folder / "memory.db"
        folder.chmod(0o755)
        return
    if not _mount(folder):
        pytest.skip("root without permission to mount a tmpfs")
    try:
        shutil.copy(source, folder / "memory.db")
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder / "memory.db"
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_read_only_database_answers_reads_and_refuses_writes(protected, monkeypatch):
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    monkeypatch.setenv("MEMCLI_DB", str(protected))
    note = f"memcli: warning: database is read-only: {protected} (answering without recording "
    result = run_cli(["query", "kiwi"])
    assert result.exit_code == 0, result.stderr
    assert [h["text"] for h in json.loads(result.stdout)] == ["kiwi pie for the picnic"]
    assert _lines(result.stderr) == [note + "access)"]
    result = run_cli(["acb", "build", "-q", "kiwi"])
    assert result.exit_code == 0 and len(_lines(result.stderr)) == 1
    result = run_cli(["ingest", "--text", "more"])
    assert result.exit_code == 1
    line, = _lines(result.stderr)
    assert line.startswith((f"memcli: error: database is read-only: {protected}",
                            f"memcli: error: cannot open {protected}: its folder is not "))
    assert counts(protected) == (1, 1)


def test_new_database_in_read_only_folder(protected, monkeypatch):
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    path = protected.parent / "new.db"
    result = run_cli(["ingest", "--text", "hi", "--db", str(path)])
    assert result.exit_code == 1
    assert _lines(result.stderr) == [f"memcli: error: cannot open {path}: its folder is not "
                                     "writable (memcli keeps its -wal and -shm files beside the "
                                     "database)"]


@pytest.mark.long  # fills a small file system through real processes
def test_full_disk_from_the_cli(tmp_path, monkeypatch):
    """A real full file system (a 2 MB tmpfs, root only): one line, exit 1, no rejections."""
    folder = tmp_path / "small"
    if os.geteuid() != 0 or not _mount(folder):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
        monkeypatch.setenv("MEMCLI_DB", str(folder / "memory.db"))
        body = "\n".join(json.dumps({"text": f"r{i} " + os.urandom(3000).hex()})
                         for i in range(400))
        result = run_cli(["ingest", "-"], body.encode())
        assert result.exit_code == 1, result.stderr[:500]
        assert _lines(result.stderr) == [f"memcli: error: disk full: cannot write {folder}"
                                         "/memory.db (free some space and retry)"]
    finally:
        subprocess.run(["umount", str(folder)], check=False)
