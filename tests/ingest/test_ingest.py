"""Ingest through the real CLI: input shapes, validation, idempotency, redaction, artifacts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.backend import has_database, is_pg, stored_bytes
from tests.support.backend import rows as backend_rows
from tests.support.records import ndjson, turns

pytestmark = [pytest.mark.usefixtures("fast_cli"),  # conftest: no SPLADE, one click command
              pytest.mark.backends]


def rows(db_path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Read the database with a plain connection of its own (not through memcli)."""
    return backend_rows(db_path, sql, params)


def file_bytes(db_path: Path) -> bytes:
    """Every byte memcli left for this database (tests.support.backend.stored_bytes)."""
    return stored_bytes(db_path)


def ingest(cli, records, *flags):
    return cli(
        "ingest", "-", *flags, input=ndjson(records) if isinstance(records, list) else records
    )


def fts_count(db_path: Path, table: str, term: str) -> int:
    if is_pg(db_path):  # the index is memories.fts (lexical) and content (trigram GIN)
        if table == "memories_fts":
            sql = "SELECT count(*) FROM memories WHERE fts @@ plainto_tsquery('memcli', ?)"
            return rows(db_path, sql, (term,))[0][0]
        return rows(db_path, "SELECT count(*) FROM memories WHERE content ILIKE ?",
                    (f"%{term}%",))[0][0]
    quoted = '"' + term.replace('"', '""') + '"'
    return rows(db_path, f"SELECT count(*) FROM {table} WHERE {table} MATCH ?", (quoted,))[0][0]


# -- input shapes ---------------------------------------------------------------------------


def test_one_object(cli, db_path):
    record = {"event_id": "e1", "session_id": "s1", "content": {"text": "just one"}}
    result = cli("ingest", "-", input=json.dumps(record))
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["created"] == ["e1"] and len(report["memory_ids"]) == 1
    assert rows(db_path, "SELECT content FROM memories") == [("just one",)]


def test_json_array_and_pretty_printed_object(cli, db_path):
    records = turns("s1", ["first", "second", "third"])
    assert cli("ingest", "-", input=json.dumps(records, indent=2)).exit_code == 0
    assert cli("ingest", "-", input=json.dumps({"text": "pretty"}, indent=4)).exit_code == 0
    assert [r[0] for r in rows(db_path, "SELECT content FROM memories ORDER BY id")] == [
        "first",
        "second",
        "third",
        "pretty",
    ]


def test_ndjson_from_stdin(cli, db_path):
    result = ingest(cli, turns("s1", ["a cat", "a dog", "a bird"]))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["created"] == ["s1-0", "s1-1", "s1-2"]
    assert rows(db_path, "SELECT count(*) FROM events") == [(3,)]


def test_text_option_and_files(cli, db_path, tmp_path):
    array = tmp_path / "a.json"
    array.write_text(json.dumps(turns("sa", ["from the array file"])))
    lines = tmp_path / "b.jsonl"
    lines.write_text(ndjson(turns("sb", ["from the ndjson file", "and its second line"])))
    result = cli("ingest", str(array), str(lines), "--text", "from the flag", "--session", "st")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["created"][1:] == ["sa-0", "sb-0", "sb-1"]
    stored = dict(rows(db_path, "SELECT content, session_id FROM memories"))
    assert stored == {
        "from the flag": "st",
        "from the array file": "sa",
        "from the ndjson file": "sb",
        "and its second line": "sb",
    }


def test_stdin_is_read_only_when_asked(cli, db_path):
    result = cli("ingest", input=ndjson(turns("s1", ["should not be read"])))
    assert result.exit_code == 2
    assert result.stderr.startswith("memcli: error: nothing to ingest")
    assert not has_database(db_path)


def test_missing_file_is_a_usage_error(cli, tmp_path):
    result = cli("ingest", str(tmp_path / "nope.jsonl"))
    assert result.exit_code == 2
    assert result.stderr.startswith("memcli: error: cannot read")
    assert result.stdout == ""


def test_shorthand_text_and_role(cli, db_path):
    result = ingest(cli, [{"text": "short form", "role": "assistant", "session_id": "s1"}])
    assert result.exit_code == 0, result.stderr
    content, actor = rows(db_path, "SELECT content, actor_type FROM events")[0]
    # one role vocabulary (memcli.core.roles): the chat spelling is stored as the PRD's word
    assert json.loads(content) == {"text": "short form"} and actor == "agent"


def test_scope_flags_fill_missing_fields_only(cli, db_path):
    records = [
        {"event_id": "bare", "text": "no scope given"},
        {
            "event_id": "own",
            "text": "has its own",
            "user_id": "u1",
            "session_id": "s1",
            "channel": "public",
        },
    ]
    result = ingest(
        cli,
        records,
        "--user",
        "u9",
        "--session",
        "s9",
        "--tenant",
        "t9",
        "--app",
        "a9",
        "--run",
        "r9",
        "--agent",
        "ag9",
        "--channel",
        "team",
        "--category",
        "goals",
    )
    assert result.exit_code == 0, result.stderr
    got = {
        r[0]: r[1:]
        for r in rows(
            db_path,
            "SELECT event_id, tenant_id, user_id, session_id, app_id, run_id, agent_id,"
            " channel, category FROM memories",
        )
    }
    assert got["bare"] == ("t9", "u9", "s9", "a9", "r9", "ag9", "team", "goals")
    assert got["own"] == ("t9", "u1", "s1", "a9", "r9", "ag9", "public", "goals")


# -- validation -----------------------------------------------------------------------------

BAD_BATCH = (
    "\n".join(
        [
            json.dumps({"event_id": "good-1", "text": "a good record"}),
            "{not json",
            json.dumps({"event_id": "bad-kind", "text": "x", "kind": "bogus"}),
            json.dumps({"event_id": "good-2", "text": "another good record"}),
            json.dumps({"event_id": "bad-ts", "text": "y", "ts": "yesterday-ish"}),
            json.dumps({"event_id": "empty"}),
            json.dumps([1, 2]),
        ]
    )
    + "\n"
)


def test_bad_records_are_reported_and_good_ones_kept(cli, db_path):
    result = cli("ingest", "-", input=BAD_BATCH)
    assert result.exit_code == 2
    errors = result.stderr.strip().splitlines()
    assert all(line.startswith("memcli: error: <stdin>:") for line in errors), errors
    by_line = {int(line.split(":")[3]): line for line in errors}
    assert sorted(by_line) == [2, 3, 5, 6, 7]
    assert "invalid JSON" in by_line[2]
    assert "kind" in by_line[3]
    assert "ts" in by_line[5] and "ISO 8601" in by_line[5]
    assert "content" in by_line[6]
    assert "JSON object" in by_line[7]
    report = json.loads(result.stdout)  # the payload is still on stdout, and only there
    assert report["created"] == ["good-1", "good-2"]
    assert [p["line"] for p in report["rejected"]] == [2, 3, 5, 6, 7]
    assert sorted(r[0] for r in rows(db_path, "SELECT event_id FROM events")) == [
        "good-1",
        "good-2",
    ]


def test_strict_stores_nothing_when_one_record_is_bad(cli, db_path):
    result = cli("ingest", "-", "--strict", input=BAD_BATCH)
    assert result.exit_code == 2
    assert "<stdin>:3:" in result.stderr
    assert rows(db_path, "SELECT count(*) FROM events") == [(0,)]
    assert rows(db_path, "SELECT count(*) FROM memories") == [(0,)]


def test_file_errors_name_the_file(cli, tmp_path):
    path = tmp_path / "turns.jsonl"
    path.write_text(ndjson(turns("s1", ["ok"])) + '{"text": 5}\n')
    result = cli("ingest", str(path))
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"memcli: error: {path}:2: " + result.stderr.strip().split(f"{path}:2: ", 1)[1]
    )
    assert "text" in result.stderr


def test_naive_timestamps_are_utc_and_stored_normalised(cli, db_path):
    records = [
        {"event_id": "z", "text": "zulu", "ts": "2025-03-04T05:06:07Z"},
        {"event_id": "o", "text": "offset", "ts": "2025-03-04T07:06:07+02:00"},
        {"event_id": "n", "text": "naive", "ts": "2025-03-04T05:06:07"},
    ]
    assert ingest(cli, records).exit_code == 0
    assert {r[0] for r in rows(db_path, "SELECT ts FROM events")} == {"2025-03-04T05:06:07.000000Z"}


# -- idempotency ----------------------------------------------------------------------------


def test_same_event_id_is_skipped(cli, db_path):
    assert ingest(cli, turns("s1", ["hello"])).exit_code == 0
    again = [{**turns("s1", ["hello"])[0], "content": {"text": "different text, same id"}}]
    report = json.loads(ingest(cli, again).stdout)
    assert report["created"] == [] and report["skipped"] == ["s1-0"]
    assert rows(db_path, "SELECT content FROM memories") == [("hello",)]


def test_same_content_in_same_scope_is_skipped_other_session_created(cli, db_path):
    record = {"text": "I prefer window seats", "user_id": "u1", "session_id": "s1"}
    first = json.loads(ingest(cli, [record, record]).stdout)
    assert len(first["created"]) == 1 and first["skipped"] == first["created"]
    second = json.loads(ingest(cli, [record]).stdout)
    assert second["created"] == [] and second["skipped"] == first["created"]
    other = json.loads(ingest(cli, [{**record, "session_id": "s2"}]).stdout)
    assert len(other["created"]) == 1
    assert rows(db_path, "SELECT session_id, count(*) FROM memories GROUP BY session_id") == [
        ("s1", 1),
        ("s2", 1),
    ]


def test_same_text_at_another_time_is_a_new_event(cli, db_path):
    records = [
        {"text": "ok", "session_id": "s1", "ts": "2025-01-01T10:00:00Z"},
        {"text": "ok", "session_id": "s1", "ts": "2025-01-01T10:05:00Z"},
    ]
    assert len(json.loads(ingest(cli, records).stdout)["created"]) == 2


# -- secrets --------------------------------------------------------------------------------


def test_secret_sensitivity_is_never_stored(cli, db_path):
    secret = "PIN 8675309 for QUOKKAVAULT"
    result = ingest(
        cli, [{"event_id": "sec", "text": secret, "sensitivity": "secret", "session_id": "s1"}]
    )
    assert result.exit_code == 0, result.stderr
    assert secret not in result.stdout
    (content,) = rows(db_path, "SELECT content FROM events WHERE event_id = 'sec'")[0]
    assert "QUOKKAVAULT" not in content
    assert rows(db_path, "SELECT count(*) FROM memories") == [(0,)]
    raw = file_bytes(db_path)
    assert b"QUOKKAVAULT" not in raw and b"8675309" not in raw
    assert b"quokkavault" not in raw.lower()
    result = cli("query", "QUOKKAVAULT PIN")
    assert json.loads(result.stdout) == []


def test_two_different_secrets_in_one_session_are_both_recorded(cli, db_path):
    records = [
        {"text": "first secret AAA111", "sensitivity": "secret", "session_id": "s1"},
        {"text": "second secret BBB222", "sensitivity": "secret", "session_id": "s1"},
    ]
    report = json.loads(ingest(cli, records).stdout)
    assert len(report["created"]) == 2 and report["skipped"] == []
    assert rows(db_path, "SELECT count(*) FROM events") == [(2,)]
    raw = file_bytes(db_path)
    assert b"AAA111" not in raw and b"BBB222" not in raw


KEY = "sk-proj-Zq81Xv72Lm63Nb54Kc45Jd36Hf27"
DIARY = "ZANZIBARQUUX diary entry"


def test_api_keys_and_private_spans_are_redacted_everywhere(cli, db_path):
    text = f"deploy with {KEY} then <private>{DIARY}</private> and tell Alice"
    result = ingest(cli, [{"event_id": "e1", "text": text, "session_id": "s1"}])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["redacted"] == [{"event_id": "e1", "kinds": ["openai_key", "private"]}]
    assert KEY not in result.stdout and "ZANZIBAR" not in result.stdout

    (content,) = rows(db_path, "SELECT content FROM events")[0]
    assert "[REDACTED:openai_key]" in content and "[REDACTED:private]" in content
    assert json.loads(rows(db_path, "SELECT redactions FROM events")[0][0]) == [
        "openai_key",
        "private",
    ]
    (memory,) = rows(db_path, "SELECT content FROM memories")[0]
    assert "Zq81Xv72" not in memory and "ZANZIBAR" not in memory and "tell Alice" in memory

    for term in ("Zq81Xv72Lm63Nb54Kc45Jd36Hf27", "ZANZIBARQUUX", "diary"):
        assert fts_count(db_path, "memories_fts", term) == 0
    assert fts_count(db_path, "memories_fts", "Alice") == 1  # the index itself works
    assert fts_count(db_path, "memories_trigram", "ZANZIBAR") == 0
    assert fts_count(db_path, "memories_trigram", "Zq81Xv") == 0
    for query in ("ZANZIBARQUUX", "Zq81Xv72Lm63Nb54Kc45Jd36Hf27"):
        hits = json.loads(cli("query", query, "--legs", "lexical,trigram,entity").stdout)
        assert hits == []
    raw = file_bytes(db_path)
    assert KEY.encode() not in raw and b"Zq81Xv72" not in raw
    assert b"ZANZIBARQUUX" not in raw and b"zanzibarquux" not in raw


def test_redactions_are_listed_in_text_output(cli):
    result = ingest(cli, [{"event_id": "e1", "text": f"key {KEY}"}], "--format", "text")
    assert result.exit_code == 0
    assert "redacted openai_key in e1" in result.stdout
    assert KEY not in result.stdout


# -- tool output and artifacts ------------------------------------------------------------


def test_large_tool_result_keeps_an_excerpt_and_an_artifact(cli, db_path):
    big = "\n".join(f"line {i:05d}: " + "lorem ipsum dolor " * 3 for i in range(3000))
    assert len(big.encode()) > 64 * 1024
    result = ingest(
        cli,
        [
            {
                "event_id": "tr",
                "kind": "tool_result",
                "session_id": "s1",
                "actor": {"type": "tool", "id": "grep"},
                "content": {"output": big},
            }
        ],
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["artifacts"]) == 1
    (content,) = rows(db_path, "SELECT content FROM events WHERE event_id = 'tr'")[0]
    event = json.loads(content)
    assert event["truncated"] is True
    assert event["artifact_id"] == report["artifacts"][0]
    # Section 7.4 of the Agent Memory System PRD: the excerpt is `excerpt_text`, whatever key the
    # output came in.
    assert "output" not in event
    excerpt = event["excerpt_text"]
    assert len(excerpt.encode()) <= 64 * 1024
    assert big.startswith(excerpt) and excerpt.endswith("lorem ipsum dolor ")
    first, last = event["line_range"]
    assert first == 1 and last == excerpt.count("\n") + 1 < 3000
    assert event["total_lines"] == 3000

    result = cli("artifact", event["artifact_id"])
    assert result.exit_code == 0
    assert result.stdout_bytes == big.encode()
    missing = cli("artifact", "art_nope")
    assert missing.exit_code == 1 and "no artifact art_nope" in missing.stderr


def test_same_large_output_in_two_sessions(cli, db_path):
    big = "x" * 70_000
    records = [
        {"event_id": f"tr-{s}", "session_id": s, "kind": "tool_result", "content": {"output": big}}
        for s in ("s1", "s2")
    ]
    result = ingest(cli, records)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["created"] == ["tr-s1", "tr-s2"] and len(set(report["artifacts"])) == 2
    cli("purge", "--session", "s1")
    (content,) = rows(db_path, "SELECT content FROM events WHERE event_id = 'tr-s2'")[0]
    result = cli("artifact", json.loads(content)["artifact_id"])
    assert result.exit_code == 0 and result.stdout_bytes == big.encode()


def test_secrets_are_redacted_in_the_artifact_too(cli, db_path):
    big = "\n".join(["ok"] * 40_000 + [f"export OPENAI_API_KEY={KEY}"])
    result = ingest(cli, [{"event_id": "tr", "kind": "tool_result", "content": {"output": big}}])
    assert result.exit_code == 0, result.stderr
    artifact = json.loads(result.stdout)["artifacts"][0]
    body = cli("artifact", artifact).stdout
    assert body.endswith("export OPENAI_API_KEY=[REDACTED:openai_key]") or (
        "[REDACTED:" in body.splitlines()[-1]
    )
    assert KEY not in body
    assert KEY.encode() not in file_bytes(db_path)


def test_small_tool_result_is_kept_whole(cli, db_path):
    ingest(cli, [{"event_id": "tr", "kind": "tool_result", "content": {"output": "3 files"}}])
    event = json.loads(rows(db_path, "SELECT content FROM events")[0][0])
    assert event == {"excerpt_text": "3 files", "truncated": False}
    assert rows(db_path, "SELECT count(*) FROM artifacts") == [(0,)]


def test_tool_result_excerpt_names_and_line_range_of_file_reads(cli, db_path):
    """Section 7.4 of the Agent Memory System PRD: the excerpt is stored as `excerpt_text` (given as
    `excerpt_text`, or as `text`/`output`), and a file read carries `line_range` at any size."""
    records = [
        {"event_id": "readme", "kind": "tool_result", "session_id": "s1",
         "content": {"tool": "fs.read_file", "path": "README.md",
                     "excerpt_text": "# Legacy\nA billing service.\nRun make.\n"}},
        {"event_id": "alias", "kind": "tool_result", "session_id": "s1",
         "content": {"tool": "fs.read_file", "path": "setup.cfg", "text": "[metadata]\nname = x"}},
        {"event_id": "part", "kind": "tool_result", "session_id": "s1",
         "content": {"tool": "fs.read_file", "path": "app.py", "line_range": [100, 400],
                     "excerpt_text": "def main():\n    run()"}},
        {"event_id": "ls", "kind": "tool_result", "session_id": "s1",
         "content": {"tool": "fs.list_root", "output": "README.md\nsetup.cfg"}},
    ]
    result = ingest(cli, records)
    assert result.exit_code == 0, result.stderr
    stored = {eid: json.loads(content) for eid, content in rows(
        db_path, "SELECT event_id, content FROM events")}
    assert stored["readme"] == {"tool": "fs.read_file", "path": "README.md",
                                "excerpt_text": "# Legacy\nA billing service.\nRun make.\n",
                                "truncated": False, "line_range": [1, 3]}
    assert stored["alias"]["excerpt_text"] == "[metadata]\nname = x"
    assert "text" not in stored["alias"] and stored["alias"]["line_range"] == [1, 2]
    assert stored["part"]["line_range"] == [100, 101]  # the excerpt's lines, from the first
    assert "line_range" not in stored["ls"]  # not a file read, and whole
    assert stored["ls"]["excerpt_text"] == "README.md\nsetup.cfg"
    # The excerpt is what is remembered and found.
    hits = json.loads(cli("query", "billing service", "--json").stdout)
    assert hits and "A billing service." in hits[0]["text"]


def test_tool_result_excerpt_must_be_text(cli):
    result = ingest(cli, [{"kind": "tool_result", "content": {"excerpt_text": 42}}])
    assert result.exit_code == 2
    assert "content.excerpt_text: Input should be a valid string" in result.stderr


# -- derived rows ---------------------------------------------------------------------------


def test_entities_are_linked(cli, db_path):
    text = "Alice Johnson met @bob about #launch-plan on 2024-05-01, see https://example.com/x"
    assert ingest(cli, [{"event_id": "e1", "text": text}]).exit_code == 0
    linked = rows(
        db_path,
        "SELECT e.kind, e.norm FROM memory_entities me JOIN entities e ON e.id = me.entity_id",
    )
    kinds = {k for k, _ in linked}
    norms = {n for _, n in linked}
    assert {"name", "mention", "tag", "date", "url"} <= kinds
    assert {"alice johnson", "bob", "launch-plan", "2024-05-01"} <= norms


def test_defer_embed_then_embed(cli, db_path):
    result = ingest(cli, turns("s1", ["the walrus sings", "the otter swims"]), "--defer-embed")
    report = json.loads(result.stdout)
    assert report["embedded"] == 0 and report["deferred_embedding"] == 2
    assert rows(db_path, "SELECT count(*) FROM memory_vectors") == [(0,)]
    hits = json.loads(cli("query", "walrus").stdout)
    assert [h["text"] for h in hits][:1] == ["the walrus sings"]
    assert "dense" not in hits[0]["scores"]

    result = cli("embed")
    assert result.exit_code == 0 and json.loads(result.stdout) == {"embedded": 2}
    assert rows(db_path, "SELECT count(*) FROM memory_vectors") == [(2,)]
    if not is_pg(db_path):  # (PostgreSQL's vector index is part of memory_vectors)
        assert rows(db_path, "SELECT count(*) FROM vec_memories") == [(2,)]
    assert json.loads(cli("embed").stdout) == {"embedded": 0}
    hits = json.loads(cli("query", "walrus").stdout)
    assert "dense" in hits[0]["scores"]


def test_history_and_sessions(cli, db_path):
    records = turns("s1", ["one", "two", "three"], user="alice")
    records[1]["ts"] = "2025-01-01T09:00:00Z"  # out of order: started_at is the earliest
    assert ingest(cli, records).exit_code == 0
    history = rows(
        db_path, "SELECT op, memory_id, event_id, user_id, session_id FROM history ORDER BY id"
    )
    mids = [r[0] for r in rows(db_path, "SELECT id FROM memories ORDER BY id")]
    assert history == [("ADD", mids[i], f"s1-{i}", "alice", "s1") for i in range(3)]
    assert rows(
        db_path,
        "SELECT user_id, started_at, last_event_at, event_count FROM sessions"
        " WHERE session_id = 's1'",
    ) == [("alice", "2025-01-01T09:00:00.000000Z", "2025-01-01T10:02:00.000000Z", 3)]
    assert ingest(cli, turns("s1", ["one"], user="alice")).exit_code == 0  # a skip
    assert rows(db_path, "SELECT event_count FROM sessions") == [(3,)]
    result = cli("history", "--user", "alice")
    assert [r["op"] for r in json.loads(result.stdout)] == ["ADD"] * 3


def test_long_text_is_chunked_into_several_memories(cli, db_path):
    long = " ".join(f"sentence number {i} talks about topic {i % 7}." for i in range(600))
    report = json.loads(ingest(cli, [{"event_id": "long", "text": long}]).stdout)
    assert len(report["memory_ids"]) > 1
    chunks = rows(db_path, "SELECT chunk_index, token_count FROM memories ORDER BY chunk_index")
    assert [c[0] for c in chunks] == list(range(len(chunks)))
    assert all(0 < c[1] <= 600 for c in chunks)


@pytest.mark.parametrize("fmt", ["json", "jsonl", "text"])
def test_report_formats(cli, fmt):
    result = ingest(cli, turns("s1", ["x marks the spot"]), "--format", fmt)
    assert result.exit_code == 0
    if fmt == "text":
        assert result.stdout.startswith("created 1 event(s), 1 memories")
    else:
        assert json.loads(result.stdout.strip())["created"] == ["s1-0"]


def test_a_nul_character_is_kept_on_sqlite_and_refused_alone_on_postgresql(cli, db_path):
    """PostgreSQL text cannot hold U+0000: that record is rejected with a one-line reason and
    the rest of the batch is stored; SQLite stores it as before."""
    result = ingest(cli, [{"event_id": "n", "text": "before\u0000after", "session_id": "s1"},
                          {"event_id": "ok", "text": "plain text", "session_id": "s1"}])
    report = json.loads(result.stdout)
    if is_pg(db_path):
        assert result.exit_code == 2
        (rejected,) = report["rejected"]
        assert rejected["event_id"] == "n" and "\n" not in rejected["reason"]
        assert "NUL character (U+0000)" in rejected["reason"]
        assert rows(db_path, "SELECT event_id FROM events") == [("ok",)]
    else:
        assert result.exit_code == 0 and report["rejected"] == []
        assert len(rows(db_path, "SELECT event_id FROM events")) == 2
