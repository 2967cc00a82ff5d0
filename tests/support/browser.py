"""A real browser on a real `memcli serve --port` daemon, for the `browser` tier.

`viewer_session(tmp_path)` starts `memcli serve --port 0 --no-token` on 127.0.0.1 over a
scratch SQLite file (tests.support.daemon), then headless Chromium driven by Selenium through
chromedriver, and yields a `Viewer`: the daemon's URL, the WebDriver, the database path and
`shot(name)`, which saves a screenshot of the page shown. Both are stopped in a `finally`:
the browser by `quit()`, then every process left in chromedriver's own session (chromium and
its renderer, GPU and zygote children) is killed by pid, then the daemon (SIGTERM, SIGKILL).

The browser is Debian's `chromium` and `chromium-driver` (.ci/run installs them); nothing is
downloaded at test time: the driver and browser are given by path (Selenium Manager, which
would fetch them, runs only when no driver path is given). Without them the tests skip with
one line; with MEMCLI_REQUIRE_BROWSER=1 (.ci/run sets it) they fail instead, as
MEMCLI_REQUIRE_PG does for PostgreSQL.

Screenshots go to $MEMCLI_SCREENSHOTS when set (CI keeps them as artifacts), else to the
test's tmp_path; they are never committed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon, daemon_env, run_client
from tests.support.procs import processes

CHROMIUM = os.environ.get("MEMCLI_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MEMCLI_CHROMEDRIVER", "/usr/bin/chromedriver")
REQUIRE_ENV = "MEMCLI_REQUIRE_BROWSER"
SCREENSHOTS_ENV = "MEMCLI_SCREENSHOTS"
WINDOW = (1280, 1000)


class BrowserUnavailable(Exception):
    """No browser here; the message is the one line a skip or failure shows."""


def require_browser() -> None:
    """Skip the test without Chromium, chromedriver or Selenium (fail under
    MEMCLI_REQUIRE_BROWSER=1)."""
    try:
        _check()
    except BrowserUnavailable as exc:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{exc} ({REQUIRE_ENV}=1: the browser tier must run here)",
                        pytrace=False)
        pytest.skip(str(exc))


def _check() -> None:
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise BrowserUnavailable(f"no {path} (apt-get install chromium chromium-driver; "
                                     f"Debian's {package})")
    try:
        import selenium  # noqa: F401
    except ImportError as exc:
        raise BrowserUnavailable("selenium is not installed (pip install -e '.[dev]')") from exc


@dataclass
class Viewer:
    url: str  # http://127.0.0.1:PORT, the daemon's TCP address
    driver: Any  # selenium.webdriver.Chrome
    db: Path
    env: dict[str, str]  # the daemon's environment (a `memcli` child process may reuse it)
    screenshots: Path
    shots: list[Path] = field(default_factory=list)

    def open(self, path: str) -> None:
        self.driver.get(self.url + path)

    def shot(self, name: str) -> Path:
        """A PNG of the whole window, `<screenshots>/<name>.png`."""
        target = self.screenshots / f"{name}.png"
        assert self.driver.save_screenshot(str(target)), f"no screenshot {target}"
        self.shots.append(target)
        return target

    def click_to_load(self, element: Any, timeout: float = 30) -> None:
        """Click `element` (a link, a submit button) and wait until the next page has loaded
        (the old page's root gone stale, the new one complete)."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        old = self.driver.find_element(By.TAG_NAME, "html")
        element.click()
        wait = WebDriverWait(self.driver, timeout)
        wait.until(lambda d: _gone(old))
        wait.until(lambda d: d.execute_script("return document.readyState") == "complete")

    def text(self) -> str:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.TAG_NAME, "body").text


def _gone(element: Any) -> bool:
    """Whether `element` no longer belongs to the page: stale, or (caught mid-navigation)
    Chromium's "does not belong to the document", which selenium's `staleness_of` lets through."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as error:
        if "does not belong to the document" in str(error):
            return True
        raise
    return False


def screenshot_folder(tmp_path: Path, test_name: str) -> Path:
    given = os.environ.get(SCREENSHOTS_ENV)
    folder = Path(given) / test_name if given else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def viewer_session(tmp_path: Path, test_name: str = "viewer", *,
                   db: Path | None = None, tenant: str | None = None,
                   token: bool = False) -> Iterator[Viewer]:
    """A daemon on 127.0.0.1 over `db` (default a new file in tmp_path; `tenant`: its
    configured tenant; `token`: a bearer token required, so the browser logs in, else
    `--no-token`) and a headless Chromium, both stopped on leaving the block."""
    require_browser()
    db = db or tmp_path / "viewer.db"
    env = daemon_env(tmp_path / "home", db)
    if tenant is not None:
        env["MEMCLI_TENANT"] = tenant
    access = ("--token-file", str(tmp_path / "tokens")) if token else ("--no-token",)
    with Daemon(db, env, "--port", "0", *access) as daemon:
        url = _http_url(daemon, env, tmp_path)
        with chromium() as driver:
            yield Viewer(url=url, driver=driver, db=db, env=env,
                         screenshots=screenshot_folder(tmp_path, test_name))


def _http_url(daemon: Daemon, env: dict[str, str], tmp_path: Path) -> str:
    """The TCP address the daemon bound (`--port 0`: a free port it chose itself)."""
    deadline = time.monotonic() + 60
    while True:
        out = run_client(["serve", "status"], env, routes=tmp_path / "routes.log")
        try:
            url = json.loads(out.stdout).get("http_url")
        except ValueError:
            url = None
        if url:
            return url
        if time.monotonic() > deadline or daemon.proc is None or daemon.proc.poll() is not None:
            raise AssertionError(f"the daemon names no HTTP address: {out.stderr!r}")
        time.sleep(0.1)


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Headless Chromium through chromedriver, which runs in a session of its own so that
    everything it starts can be found and stopped by pid afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    require_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-extensions", "--disable-background-networking",
                "--disable-crash-reporter", "--no-first-run", "--mute-audio",
                f"--window-size={WINDOW[0]},{WINDOW[1]}"):
        options.add_argument(arg)
    service = Service(executable_path=CHROMEDRIVER, popen_kw={"start_new_session": True})
    driver = None
    try:
        driver = webdriver.Chrome(service=service, options=options)
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        process = getattr(service, "process", None)
        try:
            if driver is not None:
                driver.quit()
            else:
                service.stop()
        finally:
            if process is not None:  # chromedriver leads its session: all of it goes
                _kill_all(session_members(process.pid))


def session_members(sid: int) -> list[int]:
    """Pids of the processes of session `sid` (orphans reparented to init included)."""
    return [p.pid for p in processes() if p.session == sid and not p.zombie]


def _kill_all(pids: list[int]) -> None:
    """SIGKILL whatever of `pids` still runs (and reap our own children among them)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)
