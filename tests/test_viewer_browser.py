"""The web viewer end to end in headless Chromium, against a real `memcli serve --port` on a
scratch database (tests/support/browser.py): each step checks the page and the database, and
saves a screenshot of the page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcli import Memory
from tests.support.browser import Viewer, viewer_session
from tests.support.cli import run_entry_point
from tests.support.daemon import daemon_env

pytestmark = pytest.mark.browser

EXAMPLE = Path(__file__).resolve().parents[1] / "memcli" / "data" / "example.jsonl"
SCOPE = "tenant_id=demo&user_id=priya"


def memcli(env: dict[str, str], *args: str, stdin: str | None = None) -> dict | list:
    done = run_entry_point([*args, "--json"], {**env, "MEMCLI_NO_DAEMON": "1"}, stdin)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def seed(db: Path, env: dict[str, str]) -> dict[str, int]:
    """The example conversation, a decision superseded, two tasks and a pending proposal,
    written through the CLI before the daemon starts."""
    memcli(env, "ingest", str(EXAMPLE))
    old = memcli(env, "decision", "add", "Use SQLite for the robot logs", "--tenant", "demo",
                 "--user", "priya")
    new = memcli(env, "decision", "supersede", str(old["id"]), "Use PostgreSQL for the fleet",
                 "--reason", "the fleet shares one store", "--tenant", "demo")
    memcli(env, "task", "add", "Present the path planner demo", "--tenant", "demo", "--user",
           "priya")
    proposal = memcli(env, "remember", "Priya lives in Porto", "--field", "city", "--tenant",
                      "demo", "--user", "priya")
    fact = memcli(env, "remember", "Priya works on path planning for warehouse robots",
                  "--tenant", "demo", "--user", "priya")
    return {"old": old["id"], "new": new["id"], "proposal": proposal["proposal_id"],
            "fact": fact["id"]}


def history(db: Path, env: dict[str, str], memory_id: int) -> list[dict]:
    return memcli(env, "history", str(memory_id), "--tenant", "demo")


def test_a_person_reads_and_steers_the_memory_in_a_browser(tmp_path, request):
    from selenium.webdriver.common.by import By

    db = tmp_path / "viewer.db"
    env = daemon_env(tmp_path / "home", db)
    ids = seed(db, env)
    with viewer_session(tmp_path, request.node.name, db=db, tenant="demo") as viewer:
        _timeline_and_search(viewer, By, ids["fact"])
        _memory_actions(viewer, By, ids["fact"], env)
        _bundle(viewer, By)
        _ledger(viewer, By, ids, env)
        _dashboard(viewer, By)


def _timeline_and_search(viewer: Viewer, By, fact: int) -> None:
    """The timeline shows the sessions; a search finds the fact, whose page opens."""
    viewer.open("/ui/")
    sessions = viewer.driver.find_elements(By.CSS_SELECTOR, "section.session")
    assert len(sessions) >= 2 and "Lisbon" in viewer.text()
    viewer.shot("timeline")
    viewer.open("/ui/search")
    box = viewer.driver.find_element(By.NAME, "query")
    box.send_keys("path planning warehouse robots")
    viewer.click_to_load(viewer.driver.find_element(By.XPATH, "//button[text()='Search']"))
    hit = viewer.driver.find_element(By.CSS_SELECTOR, f"a[href='/ui/memories/{fact}']")
    assert "warehouse robots" in viewer.text()
    viewer.shot("search")
    viewer.click_to_load(hit)
    assert f"Memory #{fact}" in viewer.text()
    assert "Priya works on path planning" in viewer.driver.find_element(By.TAG_NAME, "pre").text
    viewer.shot("memory")


def _action(viewer: Viewer, By, name: str) -> None:
    form = viewer.driver.find_element(By.CSS_SELECTOR, f"form[action$='/{name}']")
    viewer.click_to_load(form.find_element(By.TAG_NAME, "button"))


def _memory_actions(viewer: Viewer, By, memory_id: int, env: dict[str, str]) -> None:
    """Correct the memory (a new one supersedes it), forget the correction, restore it: each
    shown on the page and written as a history row."""
    text = viewer.driver.find_element(By.NAME, "text")
    text.clear()
    text.send_keys("Priya moved to Porto for a job at a robotics startup.")
    _action(viewer, By, "correct")
    new_id = int(viewer.driver.current_url.split("/ui/memories/")[1].split("?")[0])
    assert new_id != memory_id and "Porto" in viewer.text() and "Corrected" in viewer.text()
    superseded = history(viewer.db, env, memory_id)[0]
    assert (superseded["op"], superseded["meta"]["superseded_by"]) == ("UPDATE", new_id)
    assert [r["op"] for r in history(viewer.db, env, new_id)] == ["ADD"]
    viewer.shot("memory-corrected")
    _action(viewer, By, "forget")
    assert "Forgotten" in viewer.text() and "soft_deleted" in viewer.text()
    assert history(viewer.db, env, new_id)[0]["op"] == "DELETE"
    _action(viewer, By, "restore")
    assert "Restored" in viewer.text()
    assert history(viewer.db, env, new_id)[0]["op"] == "RESTORE"
    viewer.shot("memory-restored")


def _bundle(viewer: Viewer, By) -> None:
    viewer.open("/ui/bundle")
    driver = viewer.driver
    for name, value in (("tenant_id", "demo"), ("user_id", "priya"), ("session_id", "s1"),
                        ("query", "where does Priya live")):
        field = driver.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)
    viewer.click_to_load(driver.find_element(By.ID, "build-bundle"))
    sections = driver.find_elements(By.CSS_SELECTOR, "section.bundle-section")
    names = [s.get_attribute("id") for s in sections]
    assert "section-identity" in names and "section-retrieved_evidence" in names
    evidence = driver.find_element(By.ID, "section-retrieved_evidence")
    items = evidence.find_elements(By.CSS_SELECTOR, "li.item")
    assert items and all("score" in i.text and "refs mem:" in i.text for i in items)
    assert "Lisbon" in driver.find_element(By.ID, "section-recent_window").text
    assert "/ 25200 tokens" in evidence.find_element(By.CLASS_NAME, "section-tokens").text
    ledger = driver.find_element(By.ID, "section-decision_ledger")
    assert "Use PostgreSQL for the fleet" in ledger.text
    assert "Memory delta header" in viewer.text()
    viewer.shot("bundle")


def _ledger(viewer: Viewer, By, ids: dict[str, int], env: dict[str, str]) -> None:
    viewer.open(f"/ui/ledger?{SCOPE}")
    driver = viewer.driver
    active = driver.find_element(By.ID, f"decision-{ids['new']}")
    assert "Use PostgreSQL for the fleet" in active.text and f"D{ids['old']}" in active.text
    old = driver.find_element(By.ID, f"decision-{ids['old']}")
    assert "superseded" in old.get_attribute("class")
    assert "Present the path planner demo" in viewer.text()
    proposal = driver.find_element(By.ID, f"proposal-{ids['proposal']}")
    assert "Porto" in proposal.text
    viewer.shot("ledger")
    viewer.click_to_load(driver.find_element(By.ID, f"accept-{ids['proposal']}"))
    status = driver.find_element(By.CSS_SELECTOR, "[role=status]").text
    assert f"proposal {ids['proposal']} accepted" in status
    assert not driver.find_elements(By.ID, f"proposal-{ids['proposal']}")
    memory_id = int(status.rsplit(" ", 1)[1])
    rows = history(viewer.db, env, memory_id)
    assert {(r["op"], r["actor"]) for r in rows} >= {("ADD", "ui")}
    proposals = memcli(env, "proposals", "list", "--status", "all", "--tenant", "demo")
    assert [(p["status"], p["decided_by"]) for p in proposals] == [("accepted", "ui")]
    viewer.shot("ledger-accepted")


def _dashboard(viewer: Viewer, By) -> None:
    viewer.open("/ui/dashboard")
    driver = viewer.driver
    assert int(driver.find_element(By.ID, "stat-requests").text) >= 1  # the bundle built above
    chart = driver.find_element(By.CSS_SELECTOR, "svg.chart")
    assert chart.find_elements(By.CSS_SELECTOR, "circle.point")
    assert driver.find_elements(By.CSS_SELECTOR, "tr.check")
    with Memory.open(viewer.db, must_exist=True) as memory:
        stored = memory.db.scalar("SELECT count(*) FROM request_metrics")
    assert int(driver.find_element(By.ID, "stat-requests").text) == stored
    viewer.shot("dashboard")
