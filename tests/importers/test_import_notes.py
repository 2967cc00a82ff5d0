"""`memcli import --from mem0|basic-memory`: other memory tools' stores as events, from which
memcli derives its memories (the log stays the ground truth). The files in
tests/fixtures/imports/ are written from the formats' public descriptions (no real data): a
mem0 `get_all` answer with an empty memory, a basic-memory folder with observations,
relations, a note in Latin-1, broken frontmatter and a hidden folder."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.support.backend import rows
from tests.support.cli import imported

pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]

FIXTURES = Path(__file__).parents[1] / "fixtures" / "imports"
MEM0 = FIXTURES / "mem0" / "memories.json"
NOTES = FIXTURES / "basic-memory"


def _events(db_path):
    found = rows(db_path, "SELECT ts, session_id, user_id, agent_id, tags, content "
                          "FROM events ORDER BY ts, seq")
    return [(*e[:4], json.loads(e[4]), json.loads(e[5])) for e in found]


def test_mem0_memories_become_events_with_their_scope_and_times(cli, db_path):
    report, stderr = imported(cli, "mem0", str(MEM0))
    assert (report["added"], report["conversations"]) == (3, 2)
    assert "memory 4 has no text" in stderr
    events = _events(db_path)
    assert [(e[0], e[1], e[2], e[3], e[5]["text"]) for e in events] == [
        ("2025-01-10T08:00:00.000000Z", "mem0:onboarding-1", "bob", None, "Allergic to peanuts"),
        ("2025-02-26T06:57:00.108367Z", "mem0:ann", "ann", None,
         "Is travelling to Lisbon in May"),
        ("2025-04-02T09:30:00.000000Z", "mem0:ann", "ann", "tea-bot",
         "Prefers oolong over green tea, no sugar"),  # at updated_at: when it was last said
    ]
    oolong = events[2]
    assert oolong[4] == ["import:mem0", "category:food", "category:preferences"]
    assert oolong[5]["metadata"] == {"source": "chat"}
    assert oolong[5]["mem0_id"] == "0b7c2f8e-1d3a-4e5b-9c6d-7e8f9a0b1c2d"
    # the derived memories cite their events
    cited = rows(db_path, "SELECT count(*) FROM memories m JOIN events e "
                          "ON e.event_id = m.event_id WHERE e.tags LIKE '%import:mem0%'")
    assert cited[0][0] >= 3


def test_mem0_user_flag_wins_and_a_rewritten_memory_is_a_new_event(cli, db_path, tmp_path):
    imported(cli, "mem0", str(MEM0), "--user-id", "carol")
    assert {e[2] for e in _events(db_path)} == {"carol"}
    export = json.loads(MEM0.read_text())
    export["results"][0].update(memory="Is travelling to Porto in June", hash="ffff",
                                updated_at="2025-05-01T00:00:00Z")
    changed = tmp_path / "memories.json"
    changed.write_text(json.dumps(export["results"]))  # get_all's older shape: a bare list
    report, _ = imported(cli, "mem0", str(changed), "--user-id", "carol")
    assert (report["added"], report["skipped"]) == (1, 2)


def test_basic_memory_notes_observations_and_relations(cli, db_path):
    report, stderr = imported(cli, "basic-memory", str(NOTES))
    assert (report["added"], report["conversations"]) == (9, 4)
    events = _events(db_path)
    assert Counter(e[1] for e in events) == {
        "basic-memory:coffee/coffee-brewing-methods": 5, "basic-memory:coffee/bean-origins": 2,
        "basic-memory:journal": 1, "basic-memory:broken": 1}
    by_text = {e[5]["text"]: e for e in events}
    pour = by_text["Pour over gives more flavor clarity than a French press #brewing"]
    assert pour[5]["category"] == "method" and pour[5]["context"] == "from a side-by-side tasting"
    assert pour[4] == ["import:basic-memory", "tag:coffee", "tag:brewing", "category:method"]
    relation = by_text["Coffee Brewing Methods requires Grinder Settings"][5]
    assert (relation["relation"], relation["target"]) == ("requires", "Grinder Settings")
    prose = [t for t in by_text if t.startswith("# Coffee Brewing Methods")]
    assert prose and "## Observations" not in prose[0] and "[method]" not in prose[0]
    assert "Visited the roastery in Porto; bought a caf\ufffd blend." in by_text
    assert "not a note" not in json.dumps(list(by_text))  # .obsidian left out
    assert "journal.md: bytes that are not UTF-8" in stderr
    assert "broken.md: its frontmatter is not YAML" in stderr


def test_an_edited_note_adds_its_new_parts_only(cli, db_path, tmp_path):
    folder = tmp_path / "notes"
    shutil.copytree(NOTES, folder)
    imported(cli, "basic-memory", str(folder))
    note = folder / "coffee" / "brewing-methods.md"
    note.write_text(note.read_text().replace(
        "## Relations", "- [tip] Rinse the paper filter first\n\n## Relations"))
    report, _ = imported(cli, "basic-memory", str(note))
    assert (report["added"], report["skipped"]) == (1, 5)  # prose, 2 observations, 2 relations


@pytest.mark.parametrize("fmt, path, count, words", [
    ("mem0", MEM0, 3, "peanut allergy"),
    ("basic-memory", NOTES, 9, "Yirgacheffe bergamot"),
])
def test_importing_twice_adds_nothing_and_a_query_finds_it(cli, db_path, fmt, path, count,
                                                           words):
    first, _ = imported(cli, fmt, str(path))
    again, _ = imported(cli, fmt, str(path))
    assert (first["added"], again["added"], again["skipped"]) == (count, 0, count)
    hits = json.loads(cli("query", words, "--json").stdout)
    assert hits and words.split()[-1][:6].lower() in hits[0]["text"].lower()


@pytest.mark.parametrize("body, says", [
    (b'{"memories": "none"}', "the memories is not a list"),
    (b'{"count": 0}', "neither a list nor 'results'"),
    (b'[{"memory": "no id"}]', "memory 1 has no id"),
])
def test_a_bad_mem0_file_is_one_line_exit_2(cli, tmp_path, body, says):
    path = tmp_path / "memories.json"
    path.write_bytes(body)
    result = cli("import", "--from", "mem0", str(path))
    assert result.exit_code == 2 and says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
