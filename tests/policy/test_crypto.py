"""Encryption at rest of `high` sensitivity content (section 9.2 of the Agent Memory System
PRD).

Through the real CLI on real files: the raw bytes of the database, its WAL and shared-memory
file never hold a planted `high` marker; with the key, queries find and print the plain text;
without it, `high` items are left out and every other command works; a wrong key is a one-line
error; `key rotate` re-encrypts under a new key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from tests.support.backend import is_pg, stored_bytes
from tests.support.records import ndjson

# SQLite and PostgreSQL (tests/support/backend.py); about encryption, not ranking: no SPLADE
# leg (a real model) in its commands (conftest.py: fast_cli)
pytestmark = [pytest.mark.backends, pytest.mark.usefixtures("fast_cli")]

SECRET = "zqxplutonium"  # the `high` marker: a word no other text in the suite uses
PLAIN = "zqxmarmalade"  # a `none` control marker: proves the byte scan can find text


def _raw(db_path: Path) -> bytes:
    """What the database holds: the SQLite files' bytes, or PostgreSQL's stored values."""
    if is_pg(db_path):
        return stored_bytes(db_path)
    return b"".join(Path(str(db_path) + s).read_bytes() for s in ("", "-wal", "-shm")
                    if Path(str(db_path) + s).exists())


def _records() -> list[dict]:
    # > 64 KB (an artifact keeps the whole), in few tokens: long runs of one letter
    long_output = "\n".join([f"first {SECRET}", *["a" * 1000] * 70, f"last {SECRET}"])
    return [
        {"event_id": "h0", "session_id": "s1", "user_id": "u1", "sensitivity": "high",
         "ts": "2025-01-01T10:00:00Z", "tags": [f"tag-{SECRET}"], "refs": [f"ref-{SECRET}"],
         "content": {"text": f"My doctor Hannah Weber diagnosed {SECRET} syndrome in Berlin"}},
        {"event_id": "n1", "session_id": "s1", "user_id": "u1",
         "ts": "2025-01-01T10:01:00Z", "content": {"text": f"I like {PLAIN} on toast"}},
        {"event_id": "h2", "session_id": "s1", "user_id": "u1", "sensitivity": "high",
         "ts": "2025-01-01T10:02:00Z", "kind": "tool_result",
         "content": {"output": long_output}},
        {"event_id": "h3", "session_id": "s1", "user_id": "u1", "sensitivity": "high",
         "ts": "2025-01-01T10:03:00Z",
         "content": {"text": f"I prefer {SECRET} treatment and I live in Munich now"}},
        {"event_id": "n4", "session_id": "s1", "user_id": "u1",
         "ts": "2025-01-01T10:04:00Z", "content": {"text": "The weather is fine today"}},
    ]


def _key_file(isolated_env: Path) -> Path:
    return isolated_env / "config" / "memcli" / "key"


@pytest.fixture
def stored(cli, db_path):
    """A session with `high` turns ingested, plus high decision, task and checkpoint."""
    result = cli("ingest", "-", input=ndjson(_records()))
    assert result.exit_code == 0, result.stderr
    for args in (("decision", "add", f"Use {SECRET} dosage", "-r", f"because {SECRET}",
                  "--user", "u1", "--session", "s1", "--sensitivity", "high"),
                 ("task", "add", f"Refill {SECRET}", "--user", "u1", "--session", "s1",
                  "--sensitivity", "high"),
                 ("checkpoint", "save", "--thread", "s1", "--user", "u1", "--sensitivity",
                  "high", "--data", json.dumps({"note": SECRET}))):
        result = cli(*args)
        assert result.exit_code == 0, result.stderr
    return db_path


def test_high_text_never_in_the_file(cli, stored, isolated_env):
    for args in (("remember", f"The user enjoys {PLAIN} jam", "--user", "u1"),
                 ("consolidate", "--no-llm", "--session", "s1"),
                 ("query", f"{SECRET} syndrome", "--user", "u1"),
                 ("acb", "build", "--user", "u1", "--session", "s1", "--query", SECRET),
                 ("history", "--user", "u1"),
                 ("task", "update", "1", "--details", f"twice a day {SECRET}")):
        result = cli(*args)
        assert result.exit_code == 0, (args, result.stderr)
    raw = _raw(stored)
    assert PLAIN.encode() in raw  # the scan sees plain text where it is allowed
    assert SECRET.encode() not in raw
    assert b"Hannah Weber" not in raw and b"Munich" not in raw  # nor its entities
    assert b"enc:v1:" in raw
    key = _key_file(isolated_env)
    assert key.exists() and (is_pg(stored) or not (stored.parent / "key").exists())
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700


def test_with_the_key_query_finds_high_items_in_plain_text(cli, stored):
    result = cli("query", "doctor diagnosed syndrome", "--user", "u1", "--format", "json",
                 "--top-k", "50")
    assert result.exit_code == 0, result.stderr
    hits = json.loads(result.stdout)
    top = next(h for h in hits if h["event_id"] == "h0")
    assert SECRET in top["text"] and top["sensitivity"] == "high"
    assert "lexical" not in top["scores"]  # not in the full-text indexes...
    assert {"dense", "sparse"} & set(top["scores"])  # ...found by its vector / SPLADE terms
    bundle = cli("acb", "build", "--user", "u1", "--session", "s1", "--query", SECRET)
    assert bundle.exit_code == 0 and SECRET in bundle.stdout
    artifact = json.loads(cli("ingest", "-", input=ndjson(_records())).stdout)
    assert artifact["skipped"]  # duplicates still detected (the content hash is of plain text)
    loaded = cli("checkpoint", "load", "--thread", "s1", "--user", "u1", "--format", "json")
    assert SECRET in loaded.stdout
    assert SECRET in cli("decision", "list", "--format", "json").stdout
    assert SECRET in cli("task", "list", "--format", "json").stdout
    output = next(r for r in _records() if r["event_id"] == "h2")["content"]["output"]
    artifact_id = "art_" + hashlib.sha256(b"h2\0" + output.encode()).hexdigest()[:24]
    full = cli("artifact", artifact_id)
    assert full.exit_code == 0, full.stderr
    assert f"last {SECRET}" in full.stdout


def test_without_the_key_high_items_are_left_out(cli, stored, monkeypatch, tmp_path):
    monkeypatch.setenv("MEMCLI_KEY_FILE", str(tmp_path / "no-such-key"))
    result = cli("query", f"{SECRET} syndrome", "--user", "u1", "--format", "json")
    assert result.exit_code == 0
    hits = json.loads(result.stdout)
    assert hits and all(h["sensitivity"] != "high" for h in hits)
    assert SECRET not in result.stdout
    assert result.stderr.count("no encryption key") == 1
    for args in (("acb", "build", "--user", "u1", "--session", "s1", "--query", "syndrome"),
                 ("history", "--user", "u1"), ("stats",), ("decision", "list"),
                 ("task", "list"), ("consolidate", "--no-llm"), ("decay", "--dry-run")):
        result = cli(*args)
        assert result.exit_code == 0, (args, result.stderr)
        assert SECRET not in result.stdout, args
    more = cli("ingest", "-", input=ndjson([{"event_id": "n9", "user_id": "u1",
                                               "content": {"text": "plain again"}}]))
    assert more.exit_code == 0, more.stderr
    assert not (tmp_path / "no-such-key").exists()  # only a `high` write creates a key


def test_a_wrong_key_is_a_one_line_error(cli, stored, monkeypatch):
    monkeypatch.setenv("MEMCLI_KEY", base64.b64encode(b"k" * 32).decode())
    for args in (("query", f"{SECRET} syndrome", "--user-id", "u1"),
                 ("ingest", "-")):
        record = ndjson([{"event_id": "h9", "sensitivity": "high", "content": {"text": "x"}}])
        result = cli(*args, input=record if args[0] == "ingest" else None)
        assert result.exit_code == 1, (args, result.stdout)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "not this database's key" in lines[0]
    monkeypatch.setenv("MEMCLI_KEY", "not base64!")
    result = cli("query", SECRET, "--user-id", "u1")
    assert result.exit_code == 2 and "base64 of 32 bytes" in result.stderr


def test_a_key_file_that_cannot_be_created(cli, db_path, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("MEMCLI_KEY_FILE", str(blocker / "key"))
    record = {"event_id": "h1", "sensitivity": "high", "content": {"text": SECRET}}
    result = cli("ingest", "-", input=ndjson([record]))
    assert result.exit_code == 1
    assert result.stderr.startswith("memcli: error: cannot create the key file")
    assert len(result.stderr.strip().splitlines()) == 1
    plain = cli("ingest", "-", input=ndjson([{"event_id": "n1", "content": {"text": PLAIN}}]))
    assert plain.exit_code == 0
    assert SECRET.encode() not in _raw(db_path)


def test_rotation_reencrypts_under_a_new_key(cli, stored, isolated_env, monkeypatch):
    key = _key_file(isolated_env)
    old_key = key.read_text().strip()
    before = cli("key", "status", "--format", "json")
    assert before.exit_code == 0
    status = json.loads(before.stdout)
    assert status["all_decrypt"] and status["encrypted_values"] >= 8
    # (the `high` artifact body too: SQLite's BLOB holds the sealed text, PostgreSQL's bytea
    # its UTF-8; `key status` counts on both what `key rotate` reseals)
    assert {"events.content", "memories.content", "change_log.summary", "decisions.decision",
            "tasks.title", "checkpoints.data"} <= set(status["by_column"])
    assert status["by_column"]["artifacts.body"] == 1

    result = cli("key", "rotate", "--format", "json")
    assert result.exit_code == 0, result.stderr
    rotated = json.loads(result.stdout)
    assert rotated["reencrypted"] == status["encrypted_values"]
    assert rotated["new_key_id"] != rotated["old_key_id"]
    backup = Path(rotated["backup"])
    assert backup.read_text().strip() == old_key
    assert key.read_text().strip() != old_key
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert f":{rotated['old_key_id']}:".encode() not in _raw(stored)

    backup.unlink()  # the old key is no longer needed
    after = json.loads(cli("key", "status", "--format", "json").stdout)
    assert after["all_decrypt"] and after["database_key_id"] == rotated["new_key_id"]
    hits = cli("query", f"{SECRET} syndrome", "--user", "u1", "--format", "json")
    assert SECRET in hits.stdout

    monkeypatch.setenv("MEMCLI_KEY", old_key)  # the old key does not open it any more
    stale = cli("query", f"{SECRET} syndrome", "--user", "u1")
    assert stale.exit_code == 1 and "not this database's key" in stale.stderr


def test_key_status_without_any_high_item(cli, db_path):
    cli("ingest", "-", input=ndjson([{"event_id": "n1", "content": {"text": PLAIN}}]))
    status = json.loads(cli("key", "status", "--format", "json").stdout)
    assert status["encrypted_values"] == 0 and status["database_key_id"] is None
    assert cli("key", "rotate").exit_code == 2


def test_cryptography_is_not_imported_by_plain_commands(stored):
    """Commands that meet no encrypted value do not pay for importing `cryptography` (~30 ms),
    even on a database that holds some."""
    import subprocess
    import sys

    for argv in (["stats"], ["history", "--user", "nobody"]):
        code = ("import sys; from memcli.cli.entry import main\n"
                f"sys.argv = ['memcli', *{argv!r}]\n"
                "try:\n    main()\nexcept SystemExit:\n    pass\n"
                "print('cryptography' in sys.modules, file=sys.stderr)")
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ),
                             capture_output=True, text=True, timeout=120, check=False)
        assert out.stderr.strip().endswith("False"), (argv, out.stderr)


def test_purge_without_the_key_still_removes_high_items(cli, stored, monkeypatch, tmp_path):
    monkeypatch.setenv("MEMCLI_KEY_FILE", str(tmp_path / "no-such-key"))
    result = cli("purge", "--user", "u1", "--format", "json")
    assert result.exit_code == 0, result.stderr
    monkeypatch.delenv("MEMCLI_KEY_FILE")
    status = json.loads(cli("key", "status", "--format", "json").stdout)
    assert not {"events.content", "memories.content", "artifacts.body"} & set(status["by_column"])


def test_a_rotation_stopped_before_the_key_swap_says_so(cli, stored, isolated_env):
    key = _key_file(isolated_env)
    rotated = json.loads(cli("key", "rotate", "--format", "json").stdout)
    # As if the process died after the commit, before renaming the key files.
    key.rename(key.with_name("key.new"))
    Path(rotated["backup"]).rename(key)
    result = cli("query", "doctor diagnosed syndrome", "--user", "u1")
    assert result.exit_code == 1
    assert "rotation stopped half-way" in result.stderr and "key.new" in result.stderr
    assert json.loads(cli("key", "status", "--format", "json").stdout)["pending_key_file"]


def test_consolidate_without_the_key_leaves_high_sessions_for_later(cli, stored, monkeypatch,
                                                                      tmp_path):
    monkeypatch.setenv("MEMCLI_KEY_FILE", str(tmp_path / "no-such-key"))
    first = cli("consolidate", "--no-llm", "--session", "s1", "--format", "json")
    assert first.exit_code == 0, first.stderr
    assert json.loads(first.stdout)["sessions"] == []
    monkeypatch.delenv("MEMCLI_KEY_FILE")
    again = cli("consolidate", "--no-llm", "--session", "s1", "--format", "json")
    assert again.exit_code == 0, again.stderr
    assert len(json.loads(again.stdout)["sessions"]) == 1
