"""`memcli view export|apply` (principle P6 of the Agent Memory System PRD): what memcli believes as
files a person edits, and those edits applied as ordinary writes. The real CLI on a real SQLite file
and a real PostgreSQL database (the backend matrix, tests/support/backend.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcli.editable_views.export import Scope, parse, render
from memcli.editable_views.format import KINDS, PREFIX, Item, parse_markdown
from memcli.errors import UsageError
from tests.support.backend import connect, is_pg, rows, stored_bytes

pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]


def js(result):
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def seeded(cli, monkeypatch, tmp_path):
    """Alice's facts, a preference, a decision, a task and a procedure; one fact of Bob's."""
    monkeypatch.setenv("MEMCLI_CONTEXT_DIR", str(tmp_path / "context"))
    ids = {
        "porto": js(cli("remember", "Alice lives in Porto", "--user", "alice",
                        "--category", "profile", "--json"))["id"],
        "phoenix": js(cli("remember", "Alice works on Phoenix", "--user", "alice",
                          "--json"))["id"],
        "tea": js(cli("remember", "Alice prefers green tea", "--user", "alice",
                      "--category", "preferences", "--json"))["id"],
        "deploy": js(cli("remember", "--procedural", "--title", "Deploy", "--step", "build",
                         "--step", "upload", "--user", "alice", "--json"))["id"],
        "decision": js(cli("decision", "add", "Use SQLite", "--rationale", "one file",
                           "--user", "alice", "--json"))["id"],
        "task": js(cli("task", "add", "Write the report", "--details", "due friday",
                       "--user", "alice", "--json"))["id"],
        "bob": js(cli("remember", "Bob likes coffee", "--user", "bob", "--json"))["id"],
    }
    return ids


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def row(db_path, sql, *args):
    return rows(db_path, sql, args)


def refuse_inserts(db_path, needle: str) -> None:
    """A trigger of the test's own makes inserting a memory whose text holds `needle` fail."""
    conn = connect(db_path)
    try:
        if is_pg(db_path):
            conn.execute("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
                         " BEGIN RAISE EXCEPTION 'no'; END $$")
            conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON memories FOR EACH ROW"
                         f" WHEN (NEW.content LIKE '%{needle}%') EXECUTE FUNCTION refuse()")
        else:
            conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON memories WHEN"
                         f" NEW.content LIKE '%{needle}%' BEGIN SELECT RAISE(ABORT, 'no'); END")
    finally:
        conn.close()


def state(db_path, memory_id):
    return row(db_path, "SELECT state FROM memories WHERE id = ?", memory_id)[0][0]


def history_count(db_path):
    return row(db_path, "SELECT count(*) FROM history")[0][0]


def line_of(path: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_export_is_deterministic_and_shows_only_the_users_items(cli, seeded, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    js(cli("view", "export", str(one), "--user", "alice", "--json"))
    js(cli("view", "export", str(two), "--user", "alice", "--json"))
    assert files(one) == files(two)
    js(cli("view", "export", str(one), "--user", "alice", "--json"))  # again, same folder
    assert files(one) == files(two)
    assert set(files(one)) == {"facts.md", "preferences.md", "decisions.md", "tasks.md",
                               "procedures.md", "identity.md", "rules.md", "view.json"}
    facts = (one / "facts.md").read_text()
    assert f"- Alice lives in Porto <!-- m:{seeded['porto']} -->" in facts
    assert facts.index("## knowledge") < facts.index("Phoenix") < facts.index("## profile")
    assert "Bob" not in facts and "green tea" not in facts  # bob's; a preference
    assert f"<!-- m:{seeded['tea']} -->" in (one / "preferences.md").read_text()
    assert f"## Use SQLite <!-- d:{seeded['decision']} -->" in (one / "decisions.md").read_text()
    assert f"- [ ] Write the report <!-- t:{seeded['task']} -->\n  due friday" in (
        one / "tasks.md").read_text()
    assert f"## Deploy <!-- m:{seeded['deploy']} -->\n\n1. build\n2. upload" in (
        one / "procedures.md").read_text()
    assert facts.startswith("<!--\nmemcli view: facts of user alice, tenant default")


def test_applying_an_untouched_export_changes_nothing(cli, seeded, tmp_path, db_path):
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    before, trail = files(view), history_count(db_path)
    out = js(cli("view", "apply", str(view), "--json"))
    assert out["changes"] == [] and out["unchanged"] == 6
    assert history_count(db_path) == trail and files(view) == before


def test_an_edited_fact_supersedes_the_old_one_with_the_line_in_history(
        cli, seeded, tmp_path, db_path):
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    facts = view / "facts.md"
    line = line_of(facts, "Alice lives in Porto")
    edit(facts, "Alice lives in Porto", "Alice lives in Lisbon")
    out = js(cli("view", "apply", str(view), "--json"))
    [change] = out["changes"]
    old = seeded["porto"]
    assert (change["action"], change["file"], change["line"], change["id"]) == (
        "edit", "facts.md", line, f"m:{old}")
    new = int(change["new_id"][2:])
    assert state(db_path, old) == "superseded" and state(db_path, new) == "active"
    trail = js(cli("history", str(old), "--json"))
    assert any(h["op"] == "UPDATE" and h["new_ref"] == str(new)
               and h["meta"]["reason"] == f"view apply: facts.md line {line}" for h in trail)
    assert row(db_path, "SELECT category, user_id FROM memories WHERE id = ?", new) == [
        ("profile", "alice")]
    # The folder was exported again: the new marker, and nothing left to apply.
    assert f"- Alice lives in Lisbon <!-- m:{new} -->" in facts.read_text()
    assert js(cli("view", "apply", str(view), "--json"))["changes"] == []


def test_a_deleted_line_is_a_soft_delete_in_history(cli, seeded, tmp_path, db_path):
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    facts = view / "facts.md"
    line = line_of(facts, "Phoenix")
    edit(facts, f"- Alice works on Phoenix <!-- m:{seeded['phoenix']} -->\n", "")
    [change] = js(cli("view", "apply", str(view), "--json"))["changes"]
    assert (change["action"], change["line"]) == ("delete", line)
    assert state(db_path, seeded["phoenix"]) == "soft_deleted"
    [deleted] = [h for h in js(cli("history", str(seeded["phoenix"]), "--json"))
                 if h["op"] == "DELETE"]
    assert deleted["meta"]["reason"] == f"view apply: facts.md line {line} (deleted)"
    assert "Phoenix" not in facts.read_text()
    assert cli("restore", str(seeded["phoenix"])).exit_code == 0  # restorable


def test_new_lines_add_items_of_their_kind(cli, seeded, tmp_path, db_path):
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    edit(view / "facts.md", "## profile\n", "## profile\n\n- Alice speaks Portuguese\n")
    with (view / "preferences.md").open("a") as f:
        f.write("- Alice likes jazz\n")
    with (view / "tasks.md").open("a") as f:
        f.write("- [/] Book the flights\n  before May\n")
    with (view / "decisions.md").open("a") as f:
        f.write("\n## Ship on Fridays\n- rationale: quiet weekends\n")
    with (view / "procedures.md").open("a") as f:
        f.write("\n## Release\n1. tag\n2. push\n")
    out = js(cli("view", "apply", str(view), "--json"))
    assert sorted((c["action"], c["file"]) for c in out["changes"]) == [
        ("add", "decisions.md"), ("add", "facts.md"), ("add", "preferences.md"),
        ("add", "procedures.md"), ("add", "tasks.md")]
    new = {c["file"]: int(c["new_id"][2:]) for c in out["changes"]}
    assert row(db_path, "SELECT kind, category, user_id FROM memories WHERE id = ?",
               new["facts.md"]) == [("fact", "profile", "alice")]
    assert row(db_path, "SELECT category FROM memories WHERE id = ?",
               new["preferences.md"]) == [("preferences",)]
    assert row(db_path, "SELECT kind, content FROM memories WHERE id = ?",
               new["procedures.md"]) == [("procedural", "Release\n1. tag\n2. push")]
    tasks = js(cli("task", "list", "--user", "alice", "--json"))
    assert {(t["title"], t["status"], t["details"]) for t in tasks} >= {
        ("Book the flights", "doing", "before May")}
    decision = js(cli("decision", "list", "--user", "alice", "--json"))[0]
    assert (decision["decision"], decision["rationale"]) == ("Ship on Fridays",
                                                             ["quiet weekends"])
    assert js(cli("view", "apply", str(view), "--json"))["changes"] == []  # markers now


def test_ledger_edits_supersede_decisions_and_update_tasks(cli, seeded, tmp_path, db_path):
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    task_line = line_of(view / "tasks.md", "Write the report")
    edit(view / "decisions.md", "- rationale: one file", "- rationale: one file to back up\n"
         "- alternative: PostgreSQL")
    edit(view / "tasks.md", "- [ ] Write the report", "- [x] Write the report")
    edit(view / "procedures.md", "2. upload", "2. test\n3. upload")
    out = js(cli("view", "apply", str(view), "--json"))
    by_file = {c["file"]: c for c in out["changes"]}
    decisions = js(cli("decision", "list", "--status", "all", "--user", "alice", "--json"))
    newest = decisions[0]
    assert by_file["decisions.md"]["new_id"] == f"d:{newest['id']}"
    assert newest["alternatives"] == ["PostgreSQL"] and newest["supersedes"] == seeded[
        "decision"]
    assert [d["status"] for d in decisions if d["id"] == seeded["decision"]] == ["superseded"]
    task = [t for t in js(cli("task", "list", "--user", "alice", "--json"))
            if t["id"] == seeded["task"]][0]
    assert task["status"] == "done"
    reasons = [h["meta"].get("reason") for h in js(cli("history", "--user", "alice", "--json"))]
    assert f"view apply: tasks.md line {task_line}" in reasons
    assert "Write the report" not in (view / "tasks.md").read_text()  # done: not open any more
    new_proc = int(by_file["procedures.md"]["new_id"][2:])
    assert row(db_path, "SELECT content FROM memories WHERE id = ?", new_proc) == [
        ("Deploy\n1. build\n2. test\n3. upload",)]
    assert state(db_path, seeded["deploy"]) == "superseded"


BAD_EDITS = {
    "unknown marker": (lambda ids: ("- Alice is tall <!-- m:9999 -->", "is not an item of this"
                                                                       " view")),
    "another user's id": (lambda ids: (f"- Bob likes tea <!-- m:{ids['bob']} -->",
                                       "is not an item of this view")),
    "malformed line": (lambda ids: ("Alice is tall", "cannot read this line")),
    "malformed marker": (lambda ids: ("- Alice is tall <!-- m:abc -->", "malformed marker")),
    "duplicated marker": (lambda ids: (f"- Alice is tall <!-- m:{ids['porto']} -->",
                                       "appears twice")),
    "marker of another file": (lambda ids: (f"- Alice is tall <!-- m:{ids['tea']} -->",
                                            "is an item of preferences.md")),
    "marker of another kind": (lambda ids: (f"- Alice is tall <!-- t:{ids['task']} -->",
                                            "is not a marker of facts")),
}


@pytest.mark.parametrize("case", sorted(BAD_EDITS))
def test_an_edit_it_cannot_map_is_refused_with_file_and_line(cli, seeded, tmp_path, db_path,
                                                             case):
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    facts = view / "facts.md"
    edit(facts, "Alice works on Phoenix", "Alice works on Atlas")  # a good edit beside it
    bad_line, message = BAD_EDITS[case](seeded)
    facts.write_text(facts.read_text() + bad_line + "\n")
    line = len(facts.read_text().splitlines())
    before, trail = files(view), history_count(db_path)
    result = cli("view", "apply", str(view))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"memcli: error: facts.md:{line}: ")
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert history_count(db_path) == trail and files(view) == before  # nothing applied
    assert state(db_path, seeded["phoenix"]) == "active"


def test_an_item_changed_in_the_database_since_the_export_is_not_overwritten(
        cli, seeded, tmp_path, db_path):
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    js(cli("correct", str(seeded["porto"]), "Alice lives in Faro"))  # meanwhile, an agent
    later = js(cli("remember", "Alice runs marathons", "--user", "alice", "--json"))["id"]
    edit(view / "facts.md", "Alice lives in Porto", "Alice lives in Lisbon")
    result = cli("view", "apply", str(view))
    assert result.exit_code == 2 and "changed in the database since the export" in result.stderr
    edit(view / "facts.md", "Alice lives in Lisbon", "Alice lives in Porto")  # undone
    assert js(cli("view", "apply", str(view), "--json"))["changes"] == []  # untouched: fine
    assert state(db_path, later) == "active"  # written after the export: not a deleted line
    assert "Alice runs marathons" in (view / "facts.md").read_text()  # exported again
    # A task keeps its id when it changes: its value, not its presence, tells it moved on.
    js(cli("task", "update", str(seeded["task"]), "--status", "doing"))
    edit(view / "tasks.md", "Write the report", "Write the annual report")
    result = cli("view", "apply", str(view))
    assert result.exit_code == 2 and "changed in the database since the export" in result.stderr
    assert js(cli("task", "list", "--user", "alice", "--json"))[0]["title"] == "Write the report"


def test_dry_run_prints_the_plan_and_writes_nothing(cli, seeded, tmp_path, db_path):
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    edit(view / "facts.md", "Alice lives in Porto", "Alice lives in Lisbon")
    edit(view / "preferences.md", f"- Alice prefers green tea <!-- m:{seeded['tea']} -->\n", "")
    edit(view / "rules.md", "- Keep answers grounded", "- Be brief.\n- Keep answers grounded")
    before, trail = files(view), history_count(db_path)
    db_bytes = stored_bytes(db_path)
    plan = js(cli("view", "apply", str(view), "--dry-run"))
    assert plan["dry_run"] is True
    assert [(c["action"], c["file"], c["id"]) for c in plan["changes"]] == [
        ("delete", "preferences.md", f"m:{seeded['tea']}"),
        ("edit", "facts.md", f"m:{seeded['porto']}"),
        ("write", "rules.md", None)]
    assert all(isinstance(c["line"], int) for c in plan["changes"])
    assert history_count(db_path) == trail and files(view) == before
    assert stored_bytes(db_path) == db_bytes
    assert not (tmp_path / "context" / "rules.md").exists()


def test_identity_and_rules_are_written_to_the_context_dir(cli, seeded, tmp_path):
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    assert (view / "rules.md").read_text() == js(cli("acb", "show", "rules", "--json"))["text"]
    edit(view / "rules.md", "- Keep answers grounded", "- Answer in Portuguese.\n"
         "- Keep answers grounded")
    out = js(cli("view", "apply", str(view), "--json"))
    assert [(c["action"], c["path"]) for c in out["changes"]] == [
        ("write", str(tmp_path / "context" / "rules.md"))]
    shown = js(cli("acb", "show", "rules", "--json"))
    assert "Answer in Portuguese." in shown["text"] and shown["source"].endswith("rules.md")


def test_yaml_views_round_trip_and_apply(cli, seeded, tmp_path, db_path):
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice", "--format", "yaml"))
    again = tmp_path / "again"
    js(cli("view", "export", str(again), "--user", "alice", "--format", "yaml"))
    assert files(view) == files(again)
    assert js(cli("view", "apply", str(view), "--json"))["changes"] == []
    facts = view / "facts.yaml"
    edit(facts, "text: Alice lives in Porto", "text: Alice lives in Lisbon")
    [change] = js(cli("view", "apply", str(view), "--json"))["changes"]
    assert change["action"] == "edit" and change["file"] == "facts.yaml"
    assert state(db_path, seeded["porto"]) == "superseded"
    facts.write_text(facts.read_text() + "- txt: oops\n")
    bad = cli("view", "apply", str(view))
    assert bad.exit_code == 2 and f"facts.yaml:{len(facts.read_text().splitlines())}:" in (
        bad.stderr)


def test_tenant_isolation(cli, seeded, tmp_path, db_path):
    theirs = js(cli("remember", "Alice of acme lives in Oslo", "--user", "alice",
                    "--tenant", "acme", "--category", "profile", "--json"))["id"]
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice", "--tenant", "acme"))
    facts = (view / "facts.md").read_text()
    assert f"m:{theirs}" in facts and "Porto" not in facts and "Phoenix" not in facts
    default = tmp_path / "default"
    js(cli("view", "export", str(default), "--user", "alice"))
    assert "Oslo" not in (default / "facts.md").read_text()
    # A view of acme, applied in the configured tenant: refused.
    refused = cli("view", "apply", str(view))
    assert refused.exit_code == 2 and "tenant 'acme'" in refused.stderr
    # acme's view cannot reach the default tenant's items, even with their marker pasted in.
    with (view / "facts.md").open("a") as f:
        f.write(f"- Alice lives in Rome <!-- m:{seeded['porto']} -->\n")
    result = cli("view", "apply", str(view), "--tenant", "acme")
    assert result.exit_code == 2 and "is not an item of this view" in result.stderr
    assert state(db_path, seeded["porto"]) == "active"
    # Deleting every line of acme's view forgets acme's items only.
    js(cli("view", "export", str(view), "--user", "alice", "--tenant", "acme", "--force"))
    edit(view / "facts.md", f"- Alice of acme lives in Oslo <!-- m:{theirs} -->\n", "")
    out = js(cli("view", "apply", str(view), "--tenant", "acme", "--json"))
    assert [c["id"] for c in out["changes"]] == [f"m:{theirs}"]
    assert state(db_path, theirs) == "soft_deleted" and state(db_path, seeded["porto"]) == (
        "active")


def test_export_refuses_to_overwrite_edits_not_applied(cli, seeded, tmp_path):
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    edit(view / "facts.md", "Alice lives in Porto", "Alice lives in Lisbon")
    refused = cli("view", "export", str(view), "--user", "alice")
    assert refused.exit_code == 2 and "facts.md was edited since its export" in refused.stderr
    assert "Lisbon" in (view / "facts.md").read_text()
    js(cli("view", "export", str(view), "--user", "alice", "--force"))
    assert "Lisbon" not in (view / "facts.md").read_text()


def test_high_items_only_with_include_high_and_new_text_is_redacted(
        cli, seeded, tmp_path, monkeypatch, db_path):
    monkeypatch.setenv("MEMCLI_KEY", base64.b64encode(b"k" * 32).decode())
    secret_decision = js(cli("decision", "add", "Move to Berlin", "--sensitivity", "high",
                             "--user", "alice", "--json"))["id"]
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    assert "Berlin" not in (view / "decisions.md").read_text()
    assert js(cli("view", "apply", str(view), "--json"))["changes"] == []  # not a deletion
    full = tmp_path / "full"
    js(cli("view", "export", str(full), "--user", "alice", "--include-high"))
    assert f"## Move to Berlin <!-- d:{secret_decision} -->" in (
        full / "decisions.md").read_text()
    key = "sk-proj-" + "A1b2C3d4" * 4
    with (view / "facts.md").open("a") as f:
        f.write(f"- Alice deploys with {key}\n")
    plan = js(cli("view", "apply", str(view), "--dry-run"))
    assert key not in json.dumps(plan)
    out = js(cli("view", "apply", str(view), "--json"))
    new = int(out["changes"][0]["new_id"][2:])
    assert key not in row(db_path, "SELECT content FROM memories WHERE id = ?", new)[0][0]


def test_a_view_needs_its_manifest_and_its_files(cli, seeded, tmp_path):
    missing = cli("view", "apply", str(tmp_path / "nowhere"))
    assert missing.exit_code == 2 and "view.json is missing" in missing.stderr
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    (view / "tasks.md").unlink()
    gone = cli("view", "apply", str(view))
    assert gone.exit_code == 2 and "tasks.md: missing" in gone.stderr
    manifest = json.loads((view / "view.json").read_text())
    manifest["files"]["facts.md"]["items"] = ["m:1"]
    (view / "view.json").write_text(json.dumps(manifest))
    damaged = cli("view", "apply", str(view))
    assert damaged.exit_code == 2 and "view.json: damaged" in damaged.stderr


def test_an_item_that_cannot_be_a_line_is_left_out_not_lost(cli, seeded, tmp_path, db_path):
    odd = js(cli("remember", "Alice wrote <!-- m:1 --> in a note", "--user", "alice",
                 "--json"))["id"]
    view = tmp_path / "view"
    result = cli("view", "export", str(view), "--user", "alice", "--json")
    assert js(result)["left_out"] == [f"m:{odd}"] and f"m:{odd} is left out" in result.stderr
    (view / "facts.md").write_bytes(b"\xef\xbb\xbf" + (view / "facts.md").read_bytes())  # a BOM
    assert js(cli("view", "apply", str(view), "--json"))["changes"] == []
    assert state(db_path, odd) == "active"


ITEM_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60).map(
    lambda t: " ".join(t.split())).filter(lambda t: t and "<!--" not in t and "-->" not in t)


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(KINDS), texts=st.lists(ITEM_TEXT, min_size=1, max_size=4),
       fmt=st.sampled_from(["md", "yaml"]))
def test_every_item_text_reads_back_as_written(kind, texts, fmt):
    """Render then parse is the identity on values, for any one-line text without a marker
    (export checks it too, and leaves out an item that does not read back)."""
    values = {
        "facts": lambda t: {"category": "profile", "text": t},
        "preferences": lambda t: {"text": t},
        "decisions": lambda t: {"decision": t, "rationale": [t], "constraints": [],
                                "alternatives": [], "consequences": [t]},
        "tasks": lambda t: {"status": "doing", "title": t, "details": t},
        "procedures": lambda t: {"title": t, "steps": [t, t]},
    }[kind]
    items = [Item(kind, f"{PREFIX[kind]}:{i}", values(t)) for i, t in enumerate(texts, 1)]
    scope = Scope("default", "alice")
    back = parse(kind, "f", render(kind, items, scope, fmt), fmt)
    assert [(i.ref, i.value) for i in back] == [(i.ref, i.value) for i in items]


def test_a_failure_half_way_leaves_nothing_applied(cli, seeded, tmp_path, db_path):
    """Every write of an apply is one transaction: a write that fails after others (here a
    trigger refuses one insert) rolls back the ones before it."""
    view = tmp_path / "view"
    js(cli("view", "export", str(view), "--user", "alice"))
    edit(view / "facts.md", f"- Alice works on Phoenix <!-- m:{seeded['phoenix']} -->\n", "")
    edit(view / "facts.md", "Alice lives in Porto", "Alice lives in Lisbon")
    with (view / "preferences.md").open("a") as f:
        f.write("- Alice likes the refused text\n")
    refuse_inserts(db_path, "refused text")
    trail = history_count(db_path)
    result = cli("view", "apply", str(view))
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1
    assert history_count(db_path) == trail
    assert state(db_path, seeded["phoenix"]) == "active"
    assert state(db_path, seeded["porto"]) == "active"


def test_decision_and_procedure_blocks_read_and_refuse_as_documented():
    decisions = parse_markdown("decisions", "d.md", "# Decisions\n## Use SQLite\n"
                               "- reason: one file\n- constraint: no server\n- alternative: \n")
    assert [(i.ref, i.value, i.line) for i in decisions] == [(None, {
        "decision": "Use SQLite", "rationale": ["one file"], "constraints": ["no server"],
        "alternatives": [], "consequences": []}, 2)]
    procedures = parse_markdown("procedures", "p.md", "## (untitled)\n1. build\n2. ship\n")
    assert [(i.value, i.line) for i in procedures] == [({"title": None,
                                                          "steps": ["build", "ship"]}, 1)]
    refused = {
        ("decisions", "## <!-- d:3 -->\n- reason: x\n"): "d.md:1: a decision without its text",
        ("decisions", "- reason: x\n"): "d.md:1: cannot read this line",
        ("decisions", "## A\n- mood: calm\n"): "d.md:2: cannot read this line",
        ("decisions", "## A <!-- d:3 -->\n- reason: x <!-- d:3 -->\n"):
            "d.md:2: a marker belongs on the '## decision' line",
        ("procedures", "1. step\n"): "d.md:1: cannot read this line",
        ("procedures", "## T\n1. a <!-- m:3 -->\n"):
            "d.md:2: a marker belongs on the '## title' line",
        ("procedures", "## T\n## U\n1. a\n"): "d.md:1: a procedure without steps",
    }
    for (kind, text), message in refused.items():
        with pytest.raises(UsageError) as caught:
            parse_markdown(kind, "d.md", text)
        assert str(caught.value).split(" (")[0] == message, kind
    with pytest.raises(UsageError) as caught:
        parse_markdown("decisions", "d.md", "## A\nnot a field\n")
    assert str(caught.value).endswith("(a decision is '## text', then lines '- rationale: ...' "
                                      "(or constraint, alternative, consequence))")
