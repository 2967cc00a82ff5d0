"""The browser tier's own support (tests/support/browser.py): a real daemon on 127.0.0.1, a
headless Chromium that reaches it, and nothing left running afterwards."""

from __future__ import annotations

import os

import pytest

from tests.support.browser import session_members, viewer_session

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
