"""Scope isolation: every read stays in one tenant unless asked
otherwise, a session never mixes users, app memories never cross tenants or users.

The property test plants a marker per scope (3 tenants x 3 users x 2 apps, plus tenant-wide and
app-wide ones) through the real CLI, then reads every way a user can and checks that no output
holds another scope's marker.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memcli import Memory
from memcli.providers.embedders import HashEmbedder
from tests.support.records import ndjson

pytestmark = pytest.mark.backends  # SQLite and PostgreSQL (tests/support/backend.py)

TENANTS = ("default", "tb", "tc")
USERS = ("u1", "u2", "u3")
APPS = ("a1", "a2")
# One token per marker (no separators a tokenizer splits on): mk<tenant>z<user>z<app>z<what>x
MARK = re.compile(r"mk([a-y0-9]+)z([a-y0-9]+)z([a-y0-9]+)z([a-y]+)x")


@pytest.fixture(autouse=True)
def without_sparse_leg(tmp_path, monkeypatch, command_built_once):
    """SPLADE runs a real model; scope rules do not depend on it. The property test makes ~300
    CLI calls: the click command is built once (conftest's command_built_once)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0, entity: 0.5, trigram: 0.5}\n"
        "lifecycle: {app_memory_limit: 3}\n"
    )
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    return config


def ok(cli, *args, input=None):
    result = cli(*args, "--json", input=input)
    assert result.exit_code == 0, (args, result.stderr)
    return result.stdout


def mark(tenant: str, user: str | None, app: str | None, what: str) -> str:
    return f"mk{tenant}z{user or 'all'}z{app or 'all'}z{what}x"


def words(what: str, m: str) -> str:
    # Distinct tokens per text, so `remember` never merges two scopes' notes as duplicates.
    return f"quokka {what} {m} {m}b {m}c"


def markers(text: str) -> set[tuple[str, str, str]]:
    """(tenant, user, app) of every marker in an output ("all": tenant-wide / app-wide)."""
    return {(t, u, a) for t, u, a, _ in MARK.findall(text)}


def foreign(found: set[tuple[str, str, str]], tenant: str | None, user: str | None = None,
            app: str | None = None) -> set[tuple[str, str, str]]:
    """The markers a reader of (tenant, user, app) must not see; None: not narrowed."""
    return {
        (t, u, a) for t, u, a in found
        if (tenant is not None and t != tenant)
        or (user is not None and u not in (user, "all"))
        or (app is not None and a not in (app, "all"))
    }


def rows_in_scope(out: str, tenant: str, user: str | None = None,
                  session: str | None = None) -> bool:
    """History rows (they carry scope fields, not text) all of this scope, and some."""
    rows = json.loads(out)
    return bool(rows) and all(
        r["tenant_id"] in (tenant, None) and (user is None or r["user_id"] in (user, None))
        and (session is None or r["session_id"] in (session, None)) for r in rows
    ) and not foreign(markers(out), tenant, user)


def session_of(tenant: str, user: str, app: str) -> str:
    return f"s-{tenant}-{user}-{app}"


@pytest.fixture
def planted(cli):
    """Turns, facts, decisions, tasks and checkpoints in every scope; returns memory ids of a
    superseded decision per tenant (for `related`)."""
    records = []
    for t in TENANTS:
        for u in USERS:
            for a in APPS:
                m = mark(t, u, a, "turn")
                records.append({"tenant_id": t, "user_id": u, "app_id": a,
                                "session_id": session_of(t, u, a),
                                "event_id": f"e-{t}-{u}-{a}", "ts": "2025-01-01T10:00:00Z",
                                "content": {"text": words("turn", m)}})
    ok(cli, "ingest", "-", input=ndjson(records))
    related: dict[str, int] = {}
    for t in TENANTS:
        for a in APPS:  # app-wide notes, shared by the app's users in this tenant
            ok(cli, "remember", words("appnote", mark(t, None, a, "note")), "--tenant", t,
               "--app", a)
        ok(cli, "decision", "add", words("decision", mark(t, None, None, "dec")), "--tenant", t)
        for u in USERS:
            for a in APPS:
                ok(cli, "remember", words("fact", mark(t, u, a, "fact")), "--tenant", t,
                   "--user", u, "--app", a)
                ok(cli, "decision", "add", words("decision", mark(t, u, a, "dec")),
                   "--tenant", t, "--user", u, "--app", a)
                ok(cli, "task", "add", words("task", mark(t, u, a, "task")), "--tenant", t,
                   "--user", u, "--app", a)
                ok(cli, "checkpoint", "save", "-", "--tenant", t, "--user", u,
                   "--thread", session_of(t, u, a),
                   input=json.dumps({"note": mark(t, u, a, "ckpt")}))
        first = json.loads(ok(cli, "decision", "list", "--tenant", t, "--user", "u1",
                              "--app", "a1"))[0]
        new = json.loads(ok(cli, "decision", "supersede", str(first["id"]), "--tenant", t,
                            words("decision", mark(t, "u1", "a1", "newdec"))))
        related[t] = new["memory_id"]
    return related


def test_no_read_returns_another_scopes_marker(cli, planted):
    seen_tenants: set[str] = set()
    checks = 0
    for t in TENANTS:
        flag = [] if t == "default" else ["--tenant", t]  # `default` is read without a flag
        out = ok(cli, "query", "quokka", *flag, "-k", "200")
        assert markers(out) and not foreign(markers(out), t), out
        for u in USERS:
            out = ok(cli, "history", *flag, "--user", u, "--limit", "1000")
            assert rows_in_scope(out, t, u)
            for cmd in ("decision", "task"):
                out = ok(cli, cmd, "list", *flag, "--user", u)
                assert markers(out) and not foreign(markers(out), t, u)
            for a in APPS:
                s = session_of(t, u, a)
                out = ok(cli, "query", "quokka", *flag, "--user", u, "--app", a, "-k", "200")
                assert markers(out) and not foreign(markers(out), t, u, a), out
                out = ok(cli, "query", "quokka", *flag, "--session", s, "-k", "200")
                assert markers(out) and not foreign(markers(out), t, u), out
                out = ok(cli, "acb", "build", *flag, "--user", u, "--session", s, "--app", a,
                         "-q", "quokka")
                found = markers(out)
                assert {(t, u, a), (t, "all", a)} <= found, out  # own and app-wide notes
                assert not foreign(found, t, u, a), out
                out = ok(cli, "acb", "build", *flag, "--session", s, "-q", "quokka")
                assert markers(out) and not foreign(markers(out), t, u), out
                out = ok(cli, "checkpoint", "load", *flag, "--user", u, "--thread", s)
                assert markers(out) == {(t, u, a)}
                out = ok(cli, "history", *flag, "--session", s)
                assert rows_in_scope(out, t, u, s)
                checks += 9
        out = ok(cli, "related", str(planted[t]), *flag)
        assert markers(out) and not foreign(markers(out), t)
        for other in TENANTS:  # another tenant's memory id is not found from here
            if other != t:
                for command in ("related", "history"):
                    result = cli(command, str(planted[other]), *flag, "--json")
                    assert result.exit_code == 1 and not markers(result.stdout)
        assert rows_in_scope(ok(cli, "history", str(planted[t]), *flag), t)
        seen_tenants.add(t)
    assert checks == len(TENANTS) * len(USERS) * len(APPS) * 9
    out = ok(cli, "stats")
    assert not markers(out)
    # Reading across tenants takes the explicit flag, and then does read them all.
    for args in (("query", "quokka", "-k", "500"), ("decision", "list"), ("task", "list")):
        out = ok(cli, *args, "--all-tenants")
        assert {t for t, _, _ in markers(out)} == set(TENANTS), args
    rows = json.loads(ok(cli, "history", "--all-tenants", "--limit", "10000"))
    assert {r["tenant_id"] for r in rows} >= set(TENANTS)
    assert cli("query", "quokka", "--tenant", "tb", "--all-tenants").exit_code == 2


def test_library_reads_the_default_or_configured_tenant(db_path):
    with Memory.open(db_path, embedder=HashEmbedder(64)) as m:
        m.ingest([{"text": "quokka in default", "session_id": "s1"},
                  {"text": "quokka in tb", "session_id": "s1", "tenant_id": "tb"}])
        assert [h.tenant_id for h in m.query("quokka").hits] == ["default"]
        assert [h.tenant_id for h in m.query("quokka", filters=m.filters()).hits] == ["default"]
        both = m.query("quokka", filters=m.filters(all_tenants=True))
        assert sorted(h.tenant_id for h in both.hits) == ["default", "tb"]
        assert m.history(tenant_id="tb") and all(
            r["tenant_id"] == "default" for r in m.history())
    from memcli.config import Settings

    settings = Settings(db=db_path, tenant="tb")
    with Memory.open(db_path, embedder=HashEmbedder(64), settings=settings) as m:
        assert [h.tenant_id for h in m.query("quokka").hits] == ["tb"]
        report = m.ingest([{"text": "written to the configured tenant", "session_id": "s2"}])
        assert m.query("configured").hits[0].tenant_id == "tb" and report.created


def test_configured_tenant_from_env_and_config_file(cli, monkeypatch, without_sparse_leg):
    ok(cli, "ingest", "--text", "quokka of tb", "--tenant", "tb", "--session", "s1")
    ok(cli, "ingest", "--text", "quokka of default", "--session", "s1")
    assert markers_text(ok(cli, "query", "quokka")) == ["quokka of default"]
    monkeypatch.setenv("MEMCLI_TENANT", "tb")
    assert markers_text(ok(cli, "query", "quokka")) == ["quokka of tb"]
    ok(cli, "ingest", "--text", "quokka two of tb", "--session", "s2")
    ok(cli, "decision", "add", "quokka decision of tb")
    monkeypatch.delenv("MEMCLI_TENANT")
    without_sparse_leg.write_text(without_sparse_leg.read_text() + "tenant: tb\n")
    texts = markers_text(ok(cli, "query", "quokka"))
    assert len(texts) == 3 and all("of tb" in t for t in texts)
    assert json.loads(ok(cli, "decision", "list"))[0]["tenant_id"] == "tb"
    bundle = json.loads(ok(cli, "acb", "build", "--session", "s2", "-q", "quokka"))
    assert bundle["provenance"]["filters"]["tenant_id"] == "tb"


def markers_text(out: str) -> list[str]:
    return [h["text"] for h in json.loads(out)]


@pytest.mark.long  # memcli as child processes
def test_a_query_process_reads_one_tenant_unless_all_tenants(tmp_path, without_sparse_leg):
    db = tmp_path / "proc.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCLI_")}
    env.update(MEMCLI_DB=str(db), MEMCLI_EMBEDDER="hash", MEMCLI_CONFIG=str(without_sparse_leg),
               MEMCLI_AUTOSTART="0")
    with Memory.open(db, embedder=HashEmbedder(64)) as m:
        m.ingest([{"text": "quokka here", "tenant_id": t} for t in ("default", "tb")])

    def run(*args: str) -> list[dict]:
        done = subprocess.run([sys.executable, "-m", "memcli", "query", "quokka", *args],
                              env=env, capture_output=True, text=True, timeout=120,
                              cwd=Path(__file__).parent)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert [h["tenant_id"] for h in run()] == ["default"]
    assert sorted(h["tenant_id"] for h in run("--all-tenants")) == ["default", "tb"]


# -- point 8: a session never mixes users ------------------------------------------------------
def test_a_session_id_of_another_user_is_refused(cli):
    ok(cli, "ingest", "--text", "alice asks about quokkas", "--user", "alice", "--session", "s1")
    batch = ndjson([
        {"text": "bob says hello", "user_id": "bob", "session_id": "s1"},
        {"text": "bob in his own session", "user_id": "bob", "session_id": "s2"},
        {"text": "alice again", "user_id": "alice", "session_id": "s1"},
    ])
    result = cli("ingest", "-", "--json", input=batch)
    assert result.exit_code == 2
    assert "never mixes users" in result.stderr and "<stdin>:1:" in result.stderr
    report = json.loads(result.stdout)
    assert len(report["created"]) == 2 and len(report["rejected"]) == 1
    bundle = ok(cli, "acb", "build", "--user", "alice", "--session", "s1")
    assert "alice again" in bundle and "bob" not in bundle
    # The same session id in another tenant is another session.
    ok(cli, "ingest", "--text", "bob elsewhere", "--user", "bob", "--session", "s1",
       "--tenant", "tb")


def test_anonymous_and_user_records_never_share_a_session(cli):
    ok(cli, "ingest", "--text", "anonymous turn", "--session", "s1")
    refused = cli("ingest", "--text", "alice turn", "--user", "alice", "--session", "s1")
    assert refused.exit_code == 2
    ok(cli, "ingest", "--text", "alice turn", "--user", "alice", "--session", "s2")
    assert cli("ingest", "--text", "who is this", "--session", "s2").exit_code == 2
    bundle = ok(cli, "acb", "build", "--session", "s1")
    assert "anonymous turn" in bundle and "alice" not in bundle


def test_one_batch_cannot_give_a_new_session_two_users(memory):
    report = memory.ingest([
        {"text": "first", "user_id": "alice", "session_id": "new"},
        {"text": "second", "user_id": "bob", "session_id": "new"},
    ])
    assert len(report.created) == 1 and [p.line for p in report.rejected] == [2]
    assert "never mixes users" in report.rejected[0].reason


# -- point 12: app memory inside (tenant, user, app) -------------------------------------------
def test_app_compaction_stays_in_its_tenant_and_user(cli, db_path):
    for i in range(3):  # tenant ta, at its limit of 3 in app chatapp
        ok(cli, "decision", "add", f"ta decision number {i} kiwi{i}", "--tenant", "ta",
           "--app", "chatapp", "--user", "alice")
    for i in range(3):  # tenant tb's bob, also at the limit
        ok(cli, "remember", f"bob likes fruit {i} mango{i}", "--tenant", "tb", "--user", "bob",
           "--app", "chatapp")
    ok(cli, "ingest", "-", input=ndjson([
        {"text": f"carol turn {i} about papaya{i}", "tenant_id": "tb", "user_id": "carol",
         "session_id": "c1", "app_id": "chatapp", "ts": f"2025-01-01T10:0{i}:00Z"}
        for i in range(3)]))
    report = json.loads(ok(cli, "consolidate", "--no-llm", "--tenant", "tb", "--session", "c1"))
    assert report["compaction"] == []  # carol's one summary is far from her limit
    with Memory.open(db_path) as m:
        active = {(r[0], r[1]) for r in m.db.execute(
            "SELECT tenant_id, user_id FROM memories WHERE app_id = 'chatapp'"
            " AND state = 'active' AND kind != 'episode'")}
        counts = dict(m.db.execute(
            "SELECT tenant_id || '/' || user_id, count(*) FROM memories WHERE app_id = 'chatapp'"
            " AND state = 'active' AND kind != 'episode' GROUP BY 1"))
    assert active == {("ta", "alice"), ("tb", "bob"), ("tb", "carol")}
    assert counts["ta/alice"] == 3 and counts["tb/bob"] == 3


def test_app_bundle_shows_the_users_own_and_app_wide_notes(cli):
    ok(cli, "remember", "alice prefers window seats kiwi", "--user", "alice", "--app", "travel")
    ok(cli, "remember", "bob prefers aisle seats mango", "--user", "bob", "--app", "travel")
    ok(cli, "remember", "the travel app books trains too", "--app", "travel")
    ok(cli, "remember", "tb alice note papaya", "--user", "alice", "--app", "travel",
       "--tenant", "tb")
    bundle = json.loads(ok(cli, "acb", "build", "--user", "alice", "--app", "travel"))
    (section,) = [s for s in bundle["sections"] if s["name"] == "app_memories"]
    texts = " ".join(i["text"] for i in section["items"])
    assert "window seats" in texts and "books trains" in texts
    assert "aisle" not in texts and "papaya" not in texts
    anonymous = json.loads(ok(cli, "acb", "build", "--app", "travel"))
    (section,) = [s for s in anonymous["sections"] if s["name"] == "app_memories"]
    assert [i["text"] for i in section["items"]] and all(
        "books trains" in i["text"] for i in section["items"])


def test_recent_window_keeps_to_the_user_in_a_file_written_before_the_rule(cli, db_path):
    ok(cli, "ingest", "--text", "alice asks about kiwis", "--user", "alice", "--session", "s1")
    ok(cli, "ingest", "--text", "bob talks about mangos", "--user", "bob", "--session", "s9")
    # An older memcli let bob write into alice's session id: make the file look like that.
    with Memory.open(db_path) as m, m.db.transaction():
        m.db.execute("UPDATE memories SET session_id = 's1' WHERE user_id = 'bob'")
    for args in (("--user", "alice", "--session", "s1"), ("--session", "s1")):
        bundle = json.loads(ok(cli, "acb", "build", *args))
        (window,) = [s for s in bundle["sections"] if s["name"] == "recent_window"]
        texts = " ".join(i["text"] for i in window["items"])
        assert "kiwis" in texts and "mangos" not in texts, args
