"""The browser tier's own support (tests/support/browser.py): a real daemon on 127.0.0.1, a
headless Chromium that reaches it, and nothing left running afterwards; and a browser logged
in by `memcli ui`'s one-time link."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.browser import session_members, viewer_session
from tests.support.daemon import run_client

pytestmark = pytest.mark.browser


def test_the_browser_reaches_the_daemon_and_leaves_no_process(tmp_path, request):
    with viewer_session(tmp_path, request.node.name) as viewer:
        viewer.open("/healthz")
        assert '"ok"' in viewer.driver.page_source or "ok" in viewer.text()
        shot = viewer.shot("healthz")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        driver_pid = viewer.driver.service.process.pid
        assert len(session_members(driver_pid)) >= 2  # chromedriver and chromium at least
    assert session_members(driver_pid) == []
    assert not os.path.exists(f"/proc/{driver_pid}/stat")


def test_memcli_ui_logs_a_browser_in_once_with_a_strict_cookie(tmp_path, request):
    """A daemon asking a token: the pages send the browser to log in; `memcli ui`'s one-time
    link logs it in (an HttpOnly, SameSite=Strict cookie), works once, and Log out ends it."""
    from selenium.webdriver.common.by import By

    with viewer_session(tmp_path, request.node.name, token=True) as viewer:
        viewer.open("/ui/")
        assert viewer.driver.current_url.endswith("/ui/login")
        done = run_client(["ui", "--json"], viewer.env, routes=tmp_path / "routes.log")
        assert done.returncode == 0, done.stderr
        link = json.loads(done.stdout)["url"]
        assert link.startswith(viewer.url + "/ui/login?code=")
        viewer.driver.get(link)
        assert viewer.driver.current_url == viewer.url + "/ui/"
        assert viewer.driver.find_element(By.TAG_NAME, "h1").text == "Timeline"
        cookie = viewer.driver.get_cookie("memcli_ui")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
        viewer.shot("logged-in")
        viewer.driver.get(link)  # used up
        assert "used up or expired" in viewer.text()
        viewer.open("/ui/")  # the session it made stays
        logout = viewer.driver.find_element(By.CSS_SELECTOR, "form.logout button")
        viewer.click_to_load(logout)
        assert viewer.driver.current_url.endswith("/ui/login")
        viewer.open("/ui/")
        assert viewer.driver.current_url.endswith("/ui/login")
