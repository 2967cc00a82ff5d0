"""The web viewer end to end in headless Chromium, against a real `memcli serve --port` on a
scratch database (tests/support/browser.py): each step checks the page and the database, and
saves a screenshot of the page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcli import Memory
from memcli.lifecycle.proposals import list_proposals
from tests.support.browser import Viewer, viewer_session

pytestmark = pytest.mark.browser

EXAMPLE = Path(__file__).resolve().parents[2] / "memcli" / "data" / "example.jsonl"
SCOPE = "tenant_id=demo&user_id=priya"


def seed(db: Path) -> dict[str, int]:
    """The example conversation, a decision superseded, a task, a pending proposal and a fact,
    written through the library (with the daemon's hash embedder) before the daemon starts."""
    from memcli.config import LifecycleSettings
    from memcli.ledger import entries as ledger
    from memcli.lifecycle.remember import remember
    from memcli.providers.embedders import get_embedder

    records = [json.loads(line) for line in EXAMPLE.read_text().splitlines() if line.strip()]
    with Memory.open(db, embedder=get_embedder("hash")) as memory:
        memory.ingest(records)
        old = ledger.add_decision(memory, "Use SQLite for the robot logs", tenant_id="demo",
                                  user_id="priya")
        new = ledger.supersede_decision(memory, old["id"], "Use PostgreSQL for the fleet",
                                        owner=memory.owner("demo"),
                                        reason="the fleet shares one store")
        ledger.add_task(memory, "Present the path planner demo", tenant_id="demo",
                        user_id="priya")
        said = {"tenant_id": "demo", "user_id": "priya"}
        proposal = remember(memory, LifecycleSettings(), text="Priya lives in Porto",
                            field="city", **said)
        fact = remember(memory, LifecycleSettings(),
                        text="Priya works on path planning for warehouse robots", **said)
    return {"old": old["id"], "new": new["id"], "proposal": proposal["proposal_id"],
            "fact": fact["id"]}


def history(db: Path, memory_id: int) -> list[dict]:
    """The memory's history rows, newest first, read beside the running daemon."""
    with Memory.open(db, must_exist=True) as memory:
        return memory.history(memory_id, tenant_id="demo")


def proposals(db: Path) -> list[dict]:
    with Memory.open(db, must_exist=True) as memory:
        return list_proposals(memory.db, status=None, tenant_id="demo")


def test_a_person_reads_and_steers_the_memory_in_a_browser(tmp_path, request):
    from selenium.webdriver.common.by import By

    db = tmp_path / "viewer.db"
    ids = seed(db)
    with viewer_session(tmp_path, request.node.name, db=db, tenant="demo") as viewer:
        _timeline_and_search(viewer, By, ids["fact"])
        _memory_actions(viewer, By, ids["fact"])
        _bundle(viewer, By)
        _ledger(viewer, By, ids)
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
    hit = viewer.driver.find_element(By.CSS_SELECTOR,
                                     f"a[href='/ui/memories/{fact}?tenant_id=demo']")
    assert "warehouse robots" in viewer.text()
    viewer.shot("search")
    viewer.click_to_load(hit)
    assert f"Memory #{fact}" in viewer.text()
    assert "Priya works on path planning" in viewer.driver.find_element(By.TAG_NAME, "pre").text
    viewer.shot("memory")


def _action(viewer: Viewer, By, name: str) -> None:
    form = viewer.driver.find_element(By.CSS_SELECTOR, f"form[action$='/{name}']")
    viewer.click_to_load(form.find_element(By.TAG_NAME, "button"))


def _memory_actions(viewer: Viewer, By, memory_id: int) -> None:
    """Correct the memory (a new one supersedes it), forget the correction, restore it: each
    shown on the page and written as a history row."""
    text = viewer.driver.find_element(By.NAME, "text")
    text.clear()
    text.send_keys("Priya moved to Porto for a job at a robotics startup.")
    _action(viewer, By, "correct")
    new_id = int(viewer.driver.current_url.split("/ui/memories/")[1].split("?")[0])
    assert new_id != memory_id and "Porto" in viewer.text() and "Corrected" in viewer.text()
    superseded = history(viewer.db, memory_id)[0]
    assert (superseded["op"], superseded["meta"]["superseded_by"]) == ("UPDATE", new_id)
    assert [r["op"] for r in history(viewer.db, new_id)] == ["ADD"]
    viewer.shot("memory-corrected")
    _action(viewer, By, "forget")
    assert "Forgotten" in viewer.text() and "soft_deleted" in viewer.text()
    assert history(viewer.db, new_id)[0]["op"] == "DELETE"
    _action(viewer, By, "restore")
    assert "Restored" in viewer.text()
    assert history(viewer.db, new_id)[0]["op"] == "RESTORE"
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
    ref = items[0].find_element(By.CSS_SELECTOR, "a[href^='/ui/memories/']")
    memory_id = ref.text.removeprefix("mem:")
    viewer.click_to_load(ref)
    assert f"Memory #{memory_id}" in viewer.text()


def _ledger(viewer: Viewer, By, ids: dict[str, int]) -> None:
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
    rows = history(viewer.db, memory_id)
    assert {(r["op"], r["actor"]) for r in rows} >= {("ADD", "ui")}
    assert [(p["status"], p["decided_by"]) for p in proposals(viewer.db)] == [("accepted", "ui")]
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


def test_a_person_logs_in_finds_the_pages_and_logs_out_in_a_browser(tmp_path, request):
    """With a token required: the root address leads to the login, the login form (whose CSRF
    token rides on a cookie, no session before the login) lets the person in, the header
    names the tenant, the Bundle page's first button is Build, the icon loads, Log out ends
    the session."""
    from selenium.webdriver.common.by import By

    with viewer_session(tmp_path, request.node.name, tenant="demo", token=True) as viewer:
        driver = viewer.driver
        token = (tmp_path / "tokens").read_text().split()[0]
        viewer.open("/")
        assert driver.current_url == viewer.url + "/ui/login"
        names = {c["name"] for c in driver.get_cookies()}
        assert names == {"memcli_csrf"}  # nothing of a session before logging in
        driver.find_element(By.ID, "token").send_keys(token)
        viewer.click_to_load(driver.find_element(By.XPATH, "//button[text()='Log in']"))
        assert driver.current_url == viewer.url + "/ui/" and "Timeline" in viewer.text()
        scope = driver.find_element(By.CSS_SELECTOR, "[aria-label='Your scope'] code").text
        assert scope == "demo"
        viewer.open("/ui/bundle")
        first = driver.execute_script("return document.querySelector('button').textContent")
        assert first.strip() == "Build"
        icon = driver.execute_script(
            "return fetch('/favicon.ico').then(r => [r.status, r.headers.get('content-type')])")
        assert icon == [200, "image/x-icon"]
        viewer.shot("bundle-logged-in")
        viewer.click_to_load(driver.find_element(By.XPATH, "//button[text()='Log out']"))
        assert driver.current_url == viewer.url + "/ui/login"
        viewer.open("/ui/")
        assert driver.current_url == viewer.url + "/ui/login"  # the session is gone
