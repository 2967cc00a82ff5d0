"""Purge leaves nothing of the scope in the file: not in history, change log, metrics or ledger
rows, not in free pages of the database, not in the WAL, even while another connection is open.

Unique marker words are written for two users through every write path (ingest, remember,
decisions, tasks, checkpoints, consolidate --no-llm, queries); one user is purged while a second
connection is open; then the raw bytes of the .db and -wal are searched. On PostgreSQL (the
backend matrix, tests/support/backend.py) every row of every table is searched: the server's
files are not the test's to read (the README says what its WAL and backups keep).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import apsw
import pytest

from tests.support.backend import connect, is_pg, stored_bytes
from tests.support.records import ndjson

# conftest: no SPLADE, one click command; SQLite and PostgreSQL (tests/support/backend.py)
pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]

PATHS = ("ingest", "ingest2", "remember", "decision", "rationale", "task", "taskdetails",
         "taskupdate", "checkpoint", "city", "oldcheckpoint")
# Query text is never stored (request_metrics keeps counts and ids only): checked below.
QUERY_PATHS = ("query", "acb")


def marker(user: str, path: str) -> str:
    return f"zq{user}{path}mark"


def plant(cli, user: str) -> list[str]:
    """Write one marker per path for `user` (tenant default, session s-<user>); returns them."""
    m = functools.partial(marker, user)
    session = f"s-{user}"
    records = [
        {"event_id": f"{user}-1", "user_id": user, "session_id": session, "role": "user",
         "text": f"I am a vegetarian and I like {m('ingest')} a lot."},
        {"event_id": f"{user}-2", "user_id": user, "session_id": session, "role": "user",
         "text": f"I am a vegetarian and I like {m('ingest')} a lot, really."},
        {"event_id": f"{user}-3", "user_id": user, "session_id": session, "role": "assistant",
         "text": f"Noted: {m('ingest2')} is on the list for Priya Raman."},
    ]
    steps = [
        ("ingest", "-"),
        ("remember", f"The user prefers {m('remember')} for breakfast.", "--user", user,
         "--session", session),
        # Remembered again: a MERGE whose history meta quotes the text.
        ("remember", f"The user prefers {m('remember')} for breakfast!", "--user", user,
         "--session", session),
        ("remember", f"I live in {m('city')}", "--field", "city", "--user", user),
        ("decision", "add", f"Use {m('decision')} for storage", "-r", f"because {m('rationale')}",
         "--user", user, "--session", session),
        ("task", "add", f"Ship {m('task')}", "--details", f"see {m('taskdetails')}",
         "--user", user, "--session", session),
        ("checkpoint", "save", "--data", json.dumps({"step": m("checkpoint")}), "--user", user,
         "--thread", session),
        # Its end (the marker) lies in an overflow page, off the b-tree page.
        ("checkpoint", "save", "--data", json.dumps({"notes": "x" * 9000 + m("oldcheckpoint")}),
         "--user", user, "--thread", f"{session}-big"),
        ("consolidate", "--no-llm", "--session", session),
        ("query", f"what about {m('query')}", "--user", user),
        ("acb", "build", "--user", user, "--session", session, "--query", f"{m('acb')} plans"),
    ]
    for step in steps:
        result = cli(*step, input=ndjson(records) if step[-1] == "-" else None)
        assert result.exit_code == 0, (step, result.stderr)
    tasks = json.loads(cli("task", "list", "--user", user, "--json").stdout)
    result = cli("task", "update", str(tasks[0]["id"]), "--details", f"now {m('taskupdate')}")
    assert result.exit_code == 0, result.stderr
    return [m(p) for p in PATHS]


def raw(db_path: Path) -> bytes:
    """The bytes of the database file and its WAL, read as they are (no checkpoint first);
    on PostgreSQL every row of every table."""
    if is_pg(db_path):
        return stored_bytes(db_path)
    wal = Path(str(db_path) + "-wal")
    return db_path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def found(db_path: Path, markers: list[str]) -> list[str]:
    data = raw(db_path).lower()
    return [w for w in markers if w.lower().encode() in data]


def live(markers: list[str]) -> list[str]:
    """The markers of rows that exist: all of them (an overwritten checkpoint's older version
    stays in its history row, which `checkpoint load --version N` reads, until a purge)."""
    return list(markers)


@pytest.fixture
def planted(cli, db_path):
    gone, kept = plant(cli, "alice"), plant(cli, "bob")
    # A state larger than a page lives in overflow pages; saved over with a small one, those
    # pages go to the free list without being zeroed (secure_delete FAST): a copy in the file
    # that no row points to, which only a rewrite of the file removes.
    for user in ("alice", "bob"):
        result = cli("checkpoint", "save", "--data", "{}", "--user", user, "--thread",
                     f"s-{user}-big")
        assert result.exit_code == 0, result.stderr
    assert found(db_path, gone) == live(gone)
    assert found(db_path, kept) == live(kept)
    assert found(db_path, [marker(u, p) for u in ("alice", "bob") for p in QUERY_PATHS]) == []
    return gone, kept


def test_purge_with_an_idle_connection_leaves_no_copy(cli, db_path, planted):
    gone, kept = planted
    other = connect(db_path)  # another process's connection, idle
    try:
        assert other.execute("SELECT count(*) FROM memories").fetchone()[0] > 0
        result = cli("purge", "--user", "alice", "--json")
        assert result.exit_code == 0, result.stderr
        # Read at once, with the other connection still open: no later command checkpointed.
        assert found(db_path, gone) == []
        assert found(db_path, kept) == live(kept)
        assert json.loads(result.stdout)["complete"] is True
    finally:
        other.close()


def test_history_of_a_purged_user_has_no_text(cli, db_path, planted):
    assert cli("purge", "--user", "alice").exit_code == 0
    rows = json.loads(cli("history", "--user", "alice", "--json", "--limit", "1000").stdout)
    text = json.dumps(rows, ensure_ascii=False)
    assert not any(m in text for m in planted[0])
    assert "vegetarian" not in text and "Priya" not in text
    bob = json.dumps(json.loads(cli("history", "--user", "bob", "--json").stdout))
    assert "merged_text" in bob and marker("bob", "remember") in bob


def test_scope_rows_of_every_table_go(cli, db_path, planted):
    """Table by table (see memcli/store/purge_sql.py): nothing that names alice's content stays."""
    assert cli("purge", "--user", "alice").exit_code == 0
    conn = connect(db_path)
    try:
        def count(sql: str) -> int:
            return conn.execute(sql).fetchone()[0]

        for table in ("decisions", "tasks", "checkpoints", "proposals", "events", "memories"):
            assert count(f"SELECT count(*) FROM {table} WHERE user_id = 'alice'") == 0, table
        assert count("SELECT count(*) FROM sessions WHERE session_id = 's-alice'") == 0
        assert count("SELECT count(*) FROM session_consolidation"
                     " WHERE session_id = 's-alice'") == 0
        assert count("SELECT count(*) FROM change_log WHERE thread_key LIKE '%/alice/%'") == 0
        assert count("SELECT count(*) FROM request_metrics WHERE user_id = 'alice'") == 0
        assert count("SELECT count(*) FROM request_metrics") > 0  # counts kept, anonymous
        assert count("SELECT count(*) FROM lifecycle_runs WHERE user_id = 'alice'") == 0
        assert count("SELECT count(*) FROM history WHERE user_id = 'alice'"
                     " AND meta != '{}' AND op != 'PURGE'") == 0
        assert count("SELECT count(*) FROM history WHERE op = 'PURGE'") == 1
    finally:
        conn.close()


# SQLite-only: a reader's snapshot keeps old pages of the file; PostgreSQL's purge deletes
# rows and VACUUMs, and what its files keep is the server's (README, "## PostgreSQL").
@pytest.mark.sqlite_only
def test_purge_with_a_reader_mid_transaction_says_text_may_remain(cli, db_path, planted,
                                                                   monkeypatch):
    """A reader holding an old snapshot keeps the old pages: purge waits a bounded time (the
    busy timeout), then exits 75 with the result and `complete: false`; run again once
    readers finish: all gone."""
    gone, kept = planted
    monkeypatch.setenv("MEMCLI_BUSY_TIMEOUT", "1")  # the wait, shortened from 30 s
    reader = apsw.Connection(str(db_path))
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM memories").fetchone()  # the snapshot is now held
    # Her turns, and the `command` events of her remember, decision and checkpoint writes.
    events = reader.execute("SELECT count(*) FROM events WHERE user_id = 'alice'").fetchone()[0]
    try:
        result = cli("purge", "--user", "alice", "--json")
        assert result.exit_code == 75, result.stderr
        out = json.loads(result.stdout)
        assert out["complete"] is False and out["events"] == events > 3
        assert "may remain" in result.stderr
    finally:
        reader.execute("COMMIT")
        reader.close()
    result = cli("purge", "--user", "alice", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["complete"] is True
    assert found(db_path, gone) == []
    assert found(db_path, kept) == live(kept)
