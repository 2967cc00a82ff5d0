"""`memcli export` / `memcli import`: round trip byte-identical, idempotent,
overlapping imports, scope filters, refused files, keys, planted secrets, same query results.

Histories are written through the library's ordinary write paths (tests/support/portable.py);
the commands run through the real CLI on real database files.
"""

from __future__ import annotations

import json

import apsw
import pytest
from hypothesis import HealthCheck, given, settings

from memcli.portable.file_format import parse
from memcli.portable.importer import load_parsed
from tests.support.cli import NO_SPARSE_CONFIG, use_stub_model
from tests.support.lifecycle import conversation, extraction
from tests.support.portable import KEY, OTHER_KEY, apply_ops, dump, open_memory, ops
from tests.support.records import ndjson, turns

pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]

RICH = [
    ("turn", "default", "u1", 0, "message", "none", "alice likes green tea"),
    ("turn", "default", "u1", 0, "tool_call", "none", "paris weather"),
    ("turn", "default", "u1", 0, "tool_result", "none", "sunny in paris"),
    ("turn", "default", "u1", 0, "message", "high", "my card number is private"),
    ("turn", "default", "u2", 1, "decision", "low", "deploy on fridays"),
    ("turn", "t2", "u1", 0, "message", "none", "bob prefers coffee in tokyo"),
    ("turn", "t2", "u2", 1, "artifact", "none", "release build log"),
    ("big_result", "default", "u1"),
    ("app_turn", "default", "u2", "a1", "the a1 app remembers the blue theme"),
    ("remember", "default", "u1", "sqlite"),
    ("remember", "t2", "u2", "postgres"),
    ("correct", 0, "nurse"),
    ("forget", 0),
    ("decision", "default", "u1", "sqlite"),
    ("supersede", 0, "postgres"),
    ("decision", "t2", "u2", "coffee"),
    ("task", "default", "u1", "release"),
    ("task_update", 0, "done"),
    ("task", "t2", "u1", "build"),
    ("checkpoint", "default", "u1", "t1", "none", "step one"),
    ("checkpoint", "default", "u2", "t2", "high", "secret plan"),
    ("checkpoint", "t2", "u1", "t1", "none", "tokyo"),
    ("proposal", "default", "u1", "paris"),
]


@pytest.fixture(autouse=True)
def key(monkeypatch):
    """`high` items need a key: the same one on both sides unless a test says otherwise."""
    monkeypatch.setenv("MEMCLI_KEY", KEY)


@pytest.fixture
def source(tmp_path):
    """A database holding RICH, and its export of every tenant."""
    with open_memory(tmp_path / "a.db") as memory:
        apply_ops(memory, RICH)
        text = dump(memory)
    return tmp_path / "a.db", text


def load(memory, text: str, **options) -> dict:
    """Check the whole file, then load it in one transaction (what `memcli import` does)."""
    head, rows = parse(text)
    return load_parsed(memory, head, rows, **options)


def records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.split("\n")[1:] if line]


def count(path, table: str) -> int:
    conn = apsw.Connection(str(path))
    try:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        conn.close()


# -- round trip -----------------------------------------------------------------------------------
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(history=ops())
def test_round_trip_is_byte_identical_and_import_is_idempotent(tmp_path_factory, history):
    folder = tmp_path_factory.mktemp("rt")
    with open_memory(folder / "a.db") as a:
        apply_ops(a, history)
        first = dump(a)
        per_tenant = {t: dump(a, t) for t in ("default", "t2")}
    with open_memory(folder / "b.db") as b:
        report = load(b, first, all_tenants=True)
        assert report["skipped"] == 0
        assert dump(b) == first
        again = load(b, first, all_tenants=True)
        assert again["added"] == 0 and again["history_added"] == 0
        assert again["skipped"] == report["added"]
        assert dump(b) == first
        for tenant, text in per_tenant.items():
            assert dump(b, tenant) == text  # scoped exports agree too
    for tenant, text in per_tenant.items():
        mine = {r["id"] for r in records(text) if r["record"] == "memory"}
        for rec in records(text):
            assert rec.get("tenant_id", tenant) == tenant
            if rec["record"] == "relation":
                assert {rec["src_id"], rec["dst_id"]} <= mine


def test_rich_history_round_trips_with_every_kind(source, tmp_path, cli):
    path, text = source
    kinds = {r["record"] for r in records(text)}
    assert kinds >= {"event", "memory", "decision", "task", "checkpoint", "relation",
                     "proposal", "artifact", "session"}
    head = json.loads(text.split("\n", 1)[0])
    assert head["format"] == "memcli-export" and head["version"] == 1
    assert head["key_id"] and head["embedder"] == "test/hash-64"
    assert "enc:v1:" in text and "my card number" not in text and "secret plan" not in text
    out = tmp_path / "out.jsonl"
    result = cli("export", "--db", str(path), "--all-tenants", "--out", str(out))
    assert result.exit_code == 0, result.stderr
    assert out.read_text(encoding="utf-8") == text
    target = tmp_path / "b.db"
    result = cli("import", "--db", str(target), str(out), "--json", "--all-tenants")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["tenants"] == ["default", "t2"] and report["skipped"] == 0
    assert report["embedded"] > 0
    result = cli("export", "--db", str(target), "--all-tenants")
    assert result.stdout == text
    # Derived rows were recomputed on the imported side, not copied.
    for table in ("memory_vectors", "memory_entities", "entities"):
        assert count(target, table) == count(path, table), table
    # The `high` turn is readable there with the same key.
    with open_memory(target) as memory:
        assert "my card number is private" in [h.text for h in memory.query(
            "card number", filters=memory.filters(user_id="u1")).hits]


def test_consolidation_output_round_trips(cli, monkeypatch, tmp_path, stub, db_path):
    use_stub_model(monkeypatch, tmp_path, stub, NO_SPARSE_CONFIG)
    records_in = conversation("s1", ["I work as a nurse.", "I love green tea."])
    assert cli("ingest", "-", input=ndjson(records_in)).exit_code == 0
    stub.enqueue_json(extraction("Priya is a nurse who loves tea.",
                                 facts=["Priya works as a nurse."],
                                 preferences=["Priya loves green tea."]))
    assert cli("consolidate", "--session", "s1").exit_code == 0
    text = cli("export").stdout
    kinds = {(r["record"], r.get("kind")) for r in records(text)}
    assert {("memory", "fact"), ("memory", "summary"), ("consolidation", None)} <= kinds
    summary = [r for r in records(text) if r["record"] == "session"][0]["summary"]
    assert summary is not None
    target = tmp_path / "b.db"
    assert cli("import", "--db", str(target), "-", "--all-tenants", input=text).exit_code == 0
    assert cli("export", "--db", str(target)).stdout == text


# -- existing databases ---------------------------------------------------------------------------
def test_import_into_a_database_with_overlapping_content_remaps_ids(cli, tmp_path):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    shared = turns("s1", ["alice likes green tea", "alice lives in paris"])
    assert cli("ingest", "--db", str(a), "-", input=ndjson(shared)).exit_code == 0
    assert cli("ingest", "--db", str(a), "-", input=ndjson(
        turns("s2", ["bob builds the release"], user="u2"))).exit_code == 0
    assert cli("decision", "add", "--db", str(a), "use sqlite", "--user", "u1").exit_code == 0
    assert cli("decision", "supersede", "--db", str(a), "1", "use postgres").exit_code == 0
    # B has its own memories first (ids 1.. taken), then the same s1 turns.
    assert cli("remember", "--db", str(b), "the office is in tokyo", "--user", "u9").exit_code == 0
    assert cli("decision", "add", "--db", str(b), "ship weekly", "--user", "u9").exit_code == 0
    assert cli("ingest", "--db", str(b), "-", input=ndjson(shared)).exit_code == 0
    own = cli("export", "--db", str(b)).stdout
    text = cli("export", "--db", str(a)).stdout
    result = cli("import", "--db", str(b), "-", "--json", input=text)
    assert result.exit_code == 0, result.stderr
    counts = json.loads(result.stdout)["counts"]
    # The s2 turn and the `command` events of decision add and supersede.
    assert counts["event"] == {"added": 3, "skipped": 2}
    assert counts["memory"]["skipped"] == 2 and counts["decision"] == {"added": 2, "skipped": 0}
    second = json.loads(cli("import", "--db", str(b), "-", "--json", input=text).stdout)
    assert second["added"] == 0
    with open_memory(b) as memory:
        rows = memory.db.query(
            "SELECT d.id, d.decision, d.status, d.supersedes, d.superseded_by, m.content"
            " FROM decisions d JOIN memories m ON m.id = d.memory_id ORDER BY d.id")
        for row in rows:  # every decision still points at its own memory
            assert row["decision"] in row["content"]
        by_text = {r["decision"]: r for r in rows}
        assert by_text["use sqlite"]["superseded_by"] == by_text["use postgres"]["id"]
        assert by_text["use postgres"]["supersedes"] == by_text["use sqlite"]["id"]
        assert by_text["ship weekly"]["status"] == "active"
        edge = memory.db.query("SELECT r.kind, s.content AS src, d.content AS dst FROM relations r"
                               " JOIN memories s ON s.id = r.src_id"
                               " JOIN memories d ON d.id = r.dst_id")
        assert [(e["kind"], "postgres" in e["src"], "sqlite" in e["dst"]) for e in edge] == [
            ("supersedes", True, True)]
        hits = memory.query("bob builds", filters=memory.filters(user_id="u2")).hits
        assert hits and hits[0].text == "bob builds the release"
    # B's own rows are untouched (import only adds).
    mine = {line for line in own.split("\n")[1:] if '"u9"' in line}
    after = cli("export", "--db", str(b)).stdout
    assert mine <= set(after.split("\n"))


def test_query_results_on_the_imported_database_equal_the_original(source, tmp_path, cli):
    path, text = source
    target = tmp_path / "b.db"
    assert cli("import", "--db", str(target), "-", "--all-tenants", input=text).exit_code == 0
    for args in (("green tea",), ("paris",), ("coffee tokyo", "--tenant", "t2"),
                 ("sqlite postgres", "--user", "u1"), ("release build", "--all-tenants"),
                 ("card number", "--user", "u1", "--session", "u1-s0")):
        got = [json.loads(cli("query", "--db", str(p), *args, "--json").stdout)
               for p in (path, target)]
        assert [(h["id"], round(h["score"], 6)) for h in got[0]] == [
            (h["id"], round(h["score"], 6)) for h in got[1]], args
        assert got[0], args


# -- scope ----------------------------------------------------------------------------------------
def test_scope_filters_never_include_another_tenants_rows(source, cli):
    path, _ = source
    every = records(cli("export", "--db", str(path), "--all-tenants").stdout)
    t2 = records(cli("export", "--db", str(path), "--tenant", "t2").stdout)
    default = records(cli("export", "--db", str(path)).stdout)
    assert t2 and default and len(t2) + len(default) == len(every)
    assert all(r.get("tenant_id", "t2") == "t2" for r in t2)
    assert all(r.get("tenant_id", "default") == "default" for r in default)
    assert "coffee" not in json.dumps(default) and "green tea" not in json.dumps(t2)
    u1 = records(cli("export", "--db", str(path), "--user", "u1").stdout)
    assert u1 and all(r.get("user_id", "u1") == "u1" for r in u1)
    assert not [r for r in u1 if r["record"] == "proposal" and r["user_id"] != "u1"]
    s0 = records(cli("export", "--db", str(path), "--session", "u1-s0").stdout)
    assert s0 and all(r.get("session_id", "u1-s0") == "u1-s0" for r in s0)
    assert not [r for r in s0 if r["record"] == "checkpoint"]  # a checkpoint names no session
    a1 = records(cli("export", "--db", str(path), "--app", "a1").stdout)
    assert {r["record"] for r in a1} == {"event", "memory", "session"}
    assert all(r["app_id"] == "a1" for r in a1 if r["record"] != "session")
    assert [r["session_id"] for r in a1 if r["record"] == "session"] == ["u2-a1"]
    both = cli("export", "--db", str(path), "--tenant", "t2", "--all-tenants")
    assert both.exit_code == 2


def test_import_stays_in_one_tenant_unless_told(source, tmp_path, cli):
    path, text = source
    target = tmp_path / "b.db"
    result = cli("import", "--db", str(target), "-", input=text)
    assert result.exit_code == 2 and "a row of tenant 't2', not 'default'" in result.stderr
    assert "--all-tenants" in result.stderr and not target.exists()
    t2 = cli("export", "--db", str(path), "--tenant", "t2").stdout
    assert cli("import", "--db", str(target), "-", input=t2).exit_code == 2
    result = cli("import", "--db", str(target), "-", "--tenant", "t2", "--json", input=t2)
    assert result.exit_code == 0 and json.loads(result.stdout)["tenants"] == ["t2"]
    assert cli("export", "--db", str(target), "--tenant", "t2").stdout == t2
    assert cli("export", "--db", str(target)).stdout.count("\n") == 1  # default: header only


# -- refused files --------------------------------------------------------------------------------
def test_a_corrupt_line_is_refused_with_its_number_and_nothing_is_loaded(source, tmp_path, cli):
    _, text = source
    lines = text.split("\n")
    lines[4] = lines[4][:40]  # truncated JSON on line 5
    target = tmp_path / "b.db"
    result = cli("import", "--db", str(target), "-", "--all-tenants", input="\n".join(lines))
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "line 5" in result.stderr
    assert not target.exists()  # refused before the database was even created
    # Against an existing database: nothing of the file is written either.
    assert cli("ingest", "--db", str(target), "--text", "hello there").exit_code == 0
    lines = text.split("\n")
    lines[-2] = lines[-2].replace('"record": "session"', '"record": "sessionx"')
    result = cli("import", "--db", str(target), "-", "--all-tenants", input="\n".join(lines))
    assert result.exit_code == 2 and f"line {len(lines) - 1}" in result.stderr
    assert count(target, "events") == 1 and count(target, "memories") == 1


def test_an_unknown_format_version_is_refused(source, tmp_path, cli):
    _, text = source
    head, rest = text.split("\n", 1)
    bumped = json.dumps({**json.loads(head), "version": 99}) + "\n" + rest
    result = cli("import", "--db", str(tmp_path / "b.db"), "-", "--all-tenants", input=bumped)
    assert result.exit_code == 2
    assert "line 1: unknown format version 99" in result.stderr
    result = cli("import", "--db", str(tmp_path / "b.db"), "-", input='{"hello": 1}\n')
    assert result.exit_code == 2 and "line 1" in result.stderr


def test_a_wrongly_typed_field_names_its_line(source, tmp_path, cli):
    _, text = source
    lines = text.split("\n")
    number = next(i for i, line in enumerate(lines) if '"record": "memory"' in line)
    rec = json.loads(lines[number])
    lines[number] = json.dumps({**rec, "id": "seven"})
    result = cli("import", "--db", str(tmp_path / "b.db"), "-", "--all-tenants",
                 input="\n".join(lines))
    assert result.exit_code == 2 and f"line {number + 1}: memory.id" in result.stderr
    # A value the database refuses (a state outside its list) names its line too.
    lines[number] = json.dumps({**rec, "state": "gone"})
    result = cli("import", "--db", str(tmp_path / "b.db"), "-", "--all-tenants",
                 input="\n".join(lines))
    assert result.exit_code == 2 and f"line {number + 1}: cannot be stored" in result.stderr
    assert count(tmp_path / "b.db", "memories") == 0


# -- secrets and keys -----------------------------------------------------------------------------
def test_a_planted_secret_is_redacted_on_import(source, tmp_path, cli):
    _, text = source
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    lines = text.split("\n")
    number = next(i for i, line in enumerate(lines) if "alice likes green tea" in line
                  and '"record": "memory"' in line)
    lines[number] = lines[number].replace("alice likes green tea", f"token {secret}")
    event = next(i for i, line in enumerate(lines) if '"record": "event"' in line
                 and "paris weather" in line)
    lines[event] = lines[event].replace("paris weather", f"paris {secret}")
    point = next(i for i, line in enumerate(lines) if '"record": "checkpoint"' in line
                 and '"step one' in line)
    rec = json.loads(lines[point])
    lines[point] = json.dumps({**rec, "data": {**rec["data"], "password": "hunter2pass"}})
    target = tmp_path / "b.db"
    result = cli("import", "--db", str(target), "-", "--all-tenants", "--json",
                 input="\n".join(lines))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["redacted_records"] == 3
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("b.db*"))
    assert secret.encode() not in raw and b"hunter2pass" not in raw
    with open_memory(target) as memory:  # the event says what was removed, as ingest would
        kinds = memory.db.scalar("SELECT redactions FROM events WHERE content LIKE '%paris%'")
        assert "github_token" in kinds or "token" in kinds, kinds


def test_a_different_key_is_refused_and_no_key_leaves_items_sealed(source, tmp_path, cli,
                                                                   monkeypatch):
    _, text = source
    monkeypatch.setenv("MEMCLI_KEY", OTHER_KEY)
    other = tmp_path / "other.db"
    result = cli("import", "--db", str(other), "-", "--all-tenants", input=text)
    assert result.exit_code == 2 and "sealed with key" in result.stderr
    assert count(other, "events") == 0
    monkeypatch.delenv("MEMCLI_KEY")
    monkeypatch.setenv("MEMCLI_KEY_FILE", str(tmp_path / "no-such-key"))
    keyless = tmp_path / "keyless.db"
    result = cli("import", "--db", str(keyless), "-", "--all-tenants", input=text)
    assert result.exit_code == 0 and "stay unread" in result.stderr
    assert not (tmp_path / "no-such-key").exists()  # no new key was made up
    # The export never decrypts: without the key it is the same file, ciphertext as it was.
    assert cli("export", "--db", str(keyless), "--all-tenants").stdout == text
    monkeypatch.setenv("MEMCLI_KEY", KEY)  # with the key, `memcli embed` does the rest
    assert cli("embed", "--db", str(keyless)).exit_code == 0
    with open_memory(keyless) as memory:
        assert "my card number is private" in [h.text for h in memory.query(
            "card number", filters=memory.filters(user_id="u1")).hits]


# -- embeddings -----------------------------------------------------------------------------------
def test_defer_embed_then_embed(source, tmp_path, cli):
    path, text = source
    target = tmp_path / "b.db"
    result = cli("import", "--db", str(target), "-", "--all-tenants", "--defer-embed", "--json",
                 input=text)
    assert result.exit_code == 0 and "memcli embed" in result.stderr
    assert json.loads(result.stdout)["deferred_embedding"] > 0
    assert count(target, "memory_vectors") == 0
    assert cli("embed", "--db", str(target)).exit_code == 0
    # `memcli embed` embeds live memories (a forgotten one gets its vector once restored).
    live = ("memory_vectors v JOIN memories m ON m.id = v.memory_id"
            " WHERE m.state != 'soft_deleted'")
    assert count(target, "memory_vectors") == count(path, live) < count(path, "memory_vectors")


def test_another_embedder_recomputes_and_says_so(source, tmp_path, cli, monkeypatch):
    _, text = source
    monkeypatch.setenv("MEMCLI_EMBED_DIMENSION", "32")
    result = cli("import", "--db", str(tmp_path / "b.db"), "-", "--all-tenants", input=text)
    assert result.exit_code == 0
    assert "embedded with test/hash-64; vectors are recomputed with test/hash-32" in result.stderr


# -- progress -------------------------------------------------------------------------------------
@pytest.mark.long  # real processes on a pseudo-terminal
def test_progress_bar_on_a_terminal_nothing_on_a_pipe(source, tmp_path):
    from tests.cli.test_progress import _env, _run

    _, text = source
    env = {**_env(tmp_path, "xterm-256color"), "MEMCLI_KEY": KEY,
           "MEMCLI_CONFIG": str(tmp_path / "config.yaml")}
    (tmp_path / "config.yaml").write_text(NO_SPARSE_CONFIG)
    args = ["import", "-", "--all-tenants"]
    piped = _run([*args, "--db", str(tmp_path / "p.db")], env, text, tty=False)
    assert piped[0] == 0 and piped[2] == b""  # not one byte on stderr through a pipe
    shown = _run([*args, "--db", str(tmp_path / "t.db")], env, text, tty=True)
    assert shown[0] == 0 and shown[1] == piped[1]  # the payload is the same either way
    err = shown[2].decode("utf-8", "replace")
    assert "importing" in err and "embedding" in err
    total = len(records(text))
    assert f"{total}/{total}" in err
    out = _run(["export", "--all-tenants", "--db", str(tmp_path / "t.db")], env, "", tty=True)
    assert out[0] == 0 and out[1].decode("utf-8") == text and "exporting" in out[2].decode()


def test_rebuild_of_an_imported_database_changes_nothing_exported(source, tmp_path, cli):
    _, text = source
    target = tmp_path / "b.db"
    assert cli("import", "--db", str(target), "-", "--all-tenants", input=text).exit_code == 0
    result = cli("rebuild", "--db", str(target), "--json")
    assert result.exit_code == 0, result.stderr
    episodes = json.loads(result.stdout)["episodes"]
    assert episodes["rewritten"] == episodes["restored"] == episodes["new"] == 0
    assert cli("export", "--db", str(target), "--all-tenants").stdout == text


# -- between engines: the README's way of moving a memory -----------------------------------------
def test_a_memory_moves_between_sqlite_and_postgresql_unchanged(source, tmp_path, monkeypatch,
                                                               pg_memcli_db):
    """SQLite -> export -> import into PostgreSQL -> export gives the same file, and back:
    PostgreSQL's export imported into a new SQLite file exports the same again. The import into
    PostgreSQL runs the real CLI (`MEMCLI_DB=postgresql://... memcli import --all-tenants`)."""
    from memcli.cli.app import app
    from tests.support.cli import CliRunner

    _, first = source
    exported = tmp_path / "m.jsonl"
    exported.write_text(first, encoding="utf-8")
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    monkeypatch.setenv("MEMCLI_DB", pg_memcli_db)
    result = CliRunner().invoke(app, ["import", str(exported), "--all-tenants"])
    assert result.exit_code == 0, result.stderr
    with open_memory(pg_memcli_db) as pg:
        assert dump(pg) == first
        for tenant in ("default", "t2"):
            with open_memory(tmp_path / "a.db") as a:
                assert dump(pg, tenant) == dump(a, tenant)
        back = dump(pg)
    with open_memory(tmp_path / "c.db") as c:
        report = load(c, back, all_tenants=True)
        assert report["skipped"] == 0
        assert dump(c) == first
