"""One role vocabulary on every write path (memcli.core.roles): a turn recorded through the
CLI, HTTP, MCP, the hooks or an import is stored as human, agent or tool; the chat spelling
(user, assistant) is accepted on writes and as a `role` filter; schema 8 rewrote the rows an
older memcli stored in the chat spelling."""

from __future__ import annotations

import json

import apsw
import pytest

from memcli import Memory
from memcli.providers.embedders import HashEmbedder
from memcli.store.sqlite.connection import Database
from memcli.store.sqlite.migrations import LATEST, ROLE_REWRITE
from tests.support.backend import rows

pytestmark = [pytest.mark.usefixtures("fast_cli")]


def _chatgpt(tmp_path):
    mapping = {"root": {"id": "root", "parent": None, "children": ["u"], "message": None}}
    for node_id, parent, role, text in (
        ("u", "root", "user", "imported oolong question"),
        ("a", "u", "assistant", "imported oolong answer"),
    ):
        mapping[node_id] = {
            "id": node_id,
            "parent": parent,
            "children": [],
            "message": {
                "id": node_id,
                "author": {"role": role},
                "create_time": 1.7e9,
                "content": {"content_type": "text", "parts": [text]},
            },
        }
    path = tmp_path / "conversations.json"
    path.write_text(
        json.dumps([{"id": "c", "title": "t", "mapping": mapping, "current_node": "a"}])
    )
    return path


@pytest.mark.backends
def test_every_path_stores_one_vocabulary_and_both_spellings_filter(cli, db_path, tmp_path):
    assert cli("ingest", "--text", "typed oolong note").exit_code == 0  # no role: human
    records = [
        {"text": "recorded oolong reply", "role": "agent"},
        {"text": "hooked oolong prompt", "role": "user"},  # as the hooks write
        {"text": "hooked oolong reply", "role": "assistant"},
    ]
    assert cli("ingest", "-", input="\n".join(map(json.dumps, records))).exit_code == 0
    assert cli("import", "--from", "chatgpt", str(_chatgpt(tmp_path))).exit_code == 0
    stored = dict(rows(db_path, "SELECT content, actor_type FROM events"))
    assert sorted(stored.values()) == ["agent", "agent", "agent", "human", "human", "human"]

    def found(role):
        hits = json.loads(cli("query", "oolong", "--role", role, "--top-k", "20", "--json").stdout)
        return sorted(h["text"] for h in hits)

    people = ["hooked oolong prompt", "imported oolong question", "typed oolong note"]
    agents = ["hooked oolong reply", "imported oolong answer", "recorded oolong reply"]
    assert found("human") == found("user") == people
    assert found("agent") == found("assistant") == agents


def test_schema_8_rewrites_the_chat_spelling_of_older_rows(tmp_path, cli, db_path):
    for role in ("user", "assistant", "tool"):
        cli("ingest", "-", input=json.dumps({"text": f"said by {role}", "role": role}))
    conn = apsw.Connection(str(db_path))  # back to schema 7, as an older memcli left it
    trigger = conn.execute(
        "SELECT sql FROM sqlite_schema WHERE name = 'events_no_update'"
    ).fetchall()[0][0]
    conn.execute("DROP TRIGGER events_no_update")
    for table in ("events", "memories"):
        conn.execute(
            f"UPDATE {table} SET actor_type = CASE content WHEN 'said by user' "
            "THEN 'user' WHEN 'said by assistant' THEN 'assistant' ELSE 'tool' END"
            if table == "memories"
            else f"UPDATE {table} SET actor_type = CASE json_extract(content, '$.text') "
            "WHEN 'said by user' THEN 'user' WHEN 'said by assistant' THEN "
            "'assistant' ELSE 'tool' END"
        )
    conn.execute(trigger)
    conn.execute("PRAGMA user_version = 7")
    conn.close()
    assert sorted(r[0] for r in rows(db_path, "SELECT actor_type FROM memories")) == [
        "assistant",
        "tool",
        "user",
    ]
    Database(db_path).close()  # migrates
    assert rows(db_path, "PRAGMA user_version") == [(LATEST,)]
    for table in ("events", "memories"):
        assert sorted(r[0] for r in rows(db_path, f"SELECT actor_type FROM {table}")) == [
            "agent",
            "human",
            "tool",
        ]
    conn = apsw.Connection(str(db_path))
    with pytest.raises(apsw.ConstraintError, match="append-only"):  # the guard is back
        conn.execute("UPDATE events SET actor_type = 'x'")
    conn.close()


@pytest.mark.postgresql
def test_postgresql_schema_8_rewrites_the_chat_spelling(pg_db):
    psycopg = pytest.importorskip("psycopg")
    with Memory.open(pg_db, embedder=HashEmbedder(64)) as memory:
        memory.ingest([{"text": "said by user"}, {"text": "said by assistant", "role": "agent"}])
    with psycopg.connect(pg_db, autocommit=True) as conn:  # back to schema 7
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        for table in ("events", "memories"):
            conn.execute(
                f"UPDATE {table} SET actor_type = CASE actor_type WHEN 'human' "
                "THEN 'user' ELSE 'assistant' END"
            )
        conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
        conn.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    with Memory.open(pg_db, embedder=HashEmbedder(64)):
        pass  # migrates
    for table in ("events", "memories"):
        assert sorted(r[0] for r in rows(pg_db, f"SELECT actor_type FROM {table}")) == [
            "agent",
            "human",
        ]
    with (
        psycopg.connect(pg_db, autocommit=True) as conn,
        pytest.raises(psycopg.errors.RaiseException, match="append-only"),
    ):
        conn.execute("UPDATE events SET actor_type = 'x'")
    assert "'user' THEN 'human'" in ROLE_REWRITE
