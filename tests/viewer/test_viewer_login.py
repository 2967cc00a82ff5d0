"""`memcli ui` and the pages' privacy rules that need more than one app: the login link asked
over the daemon's Unix socket (a real uvicorn on it), the answer without a daemon or without a
TCP port, and `high` content shown only with the key."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from memcli.config import load_settings
from memcli.service.daemon import paths
from memcli.viewer.access import MAX_SESSIONS
from tests.support.http_api import OPERATOR, serving
from tests.support.viewer import ORIGIN, Browser, build_viewer_app, csrf_of, viewer_app


def _daemon_socket(db: Path) -> Path:
    """Where a daemon of `db` keeps its HTTP socket (its folder made as `serve` makes it)."""
    ep = paths.endpoint(load_settings(db).db)
    paths.ensure_private_dir(str(Path(ep.socket).parent))
    return Path(ep.http_socket)


def test_ui_prints_a_one_time_link_from_the_running_daemon(cli, db_path, tmp_path,
                                                           monkeypatch) -> None:
    app = build_viewer_app(db_path, tmp_path, monkeypatch, ui_url="http://127.0.0.1:8765")
    uds = _daemon_socket(db_path)
    with serving(app, uds=uds):
        r = cli("ui", "--json")
        assert r.exit_code == 0, r.stderr
        link = json.loads(r.stdout)
        assert link["url"].startswith("http://127.0.0.1:8765/ui/login?code=")
        assert link["expires_in"] == 120
        # The code logs a browser in once (here over the same socket).
        path = link["url"].removeprefix("http://127.0.0.1:8765")
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(uds)),
                          base_url="http://localhost") as client:
            first = client.get(path)
            assert first.status_code == 303 and "memcli_ui=" in first.headers["set-cookie"]
            assert client.get(path).status_code == 401


def test_ui_says_to_serve_a_port_when_the_daemon_has_none(cli, db_path, tmp_path,
                                                         monkeypatch) -> None:
    app = build_viewer_app(db_path, tmp_path, monkeypatch, ui_url=None)
    with serving(app, uds=_daemon_socket(db_path)):
        r = cli("ui")
    assert r.exit_code == 1
    assert r.stderr.startswith("memcli: error: the daemon serves no TCP port")
    assert "memcli serve --port" in r.stderr and r.stdout == ""


def test_ui_finds_a_daemon_started_with_socket(cli, db_path, tmp_path, monkeypatch) -> None:
    app = build_viewer_app(db_path, tmp_path, monkeypatch, ui_url="http://127.0.0.1:8766")
    folder = tmp_path / "own"
    folder.mkdir(mode=0o700)
    with serving(app, uds=folder / "d.http.sock"):
        assert cli("ui", "--json").exit_code == 1  # not where the database's daemon would be
        r = cli("ui", "--socket", str(folder / "d.sock"), "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["url"].startswith("http://127.0.0.1:8766/ui/login?code=")


def test_ui_without_a_daemon_says_how_to_start_one(cli) -> None:
    r = cli("ui")
    assert r.exit_code == 1 and r.stdout == ""
    assert "no daemon serves" in r.stderr and "memcli serve --port 8765" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.backends
def test_high_content_shows_only_with_the_key(db_path, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MEMCLI_KEY", base64.b64encode(b"k" * 32).decode())
    with viewer_app(db_path, tmp_path, monkeypatch) as (_app, site):
        r = site.api("POST", "/api/v1/events", json={
            "session_id": "s", "sensitivity": "high",
            "content": {"text": "my diagnosis is confidential"}})
        assert r.status_code == 200, r.text
        (memory_id,) = r.json()["memory_ids"]
        site.login(OPERATOR)
        assert "my diagnosis is confidential" in site.get("/ui/").text
        assert "my diagnosis" in site.get(f"/ui/memories/{memory_id}").text
    monkeypatch.delenv("MEMCLI_KEY")
    monkeypatch.setenv("MEMCLI_KEY_FILE", str(tmp_path / "no-such-key"))
    with viewer_app(db_path, tmp_path, monkeypatch) as (_app, site):
        site.login(OPERATOR)
        assert "my diagnosis" not in site.get("/ui/").text
        assert site.get(f"/ui/memories/{memory_id}").status_code == 404


def test_a_loopback_daemon_without_token_asks_no_login(tmp_path, monkeypatch) -> None:
    from starlette.testclient import TestClient

    from memcli.service.http.auth import load_auth
    from memcli.service.http.fastapi_app import build_app

    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    settings = load_settings(tmp_path / "memory.db")
    auth = load_auth(host="127.0.0.1", port=0, token_file=None, no_token=True,
                     settings=settings)
    with TestClient(build_app(settings, auth), base_url="http://127.0.0.1") as client:
        page = client.get("/ui/", follow_redirects=False)
        assert page.status_code == 200 and "<h1>Timeline</h1>" in page.text
        assert "Log out" not in page.text  # nobody logged in: nothing to log out of
        link = client.post("/ui/login-link").json()
        assert link == {"url": "http://127.0.0.1/ui/", "expires_in": None}


@pytest.mark.backends
@pytest.mark.sqlite_only
def test_the_timeline_reads_the_primary_key_backwards(memory) -> None:
    """A page of the timeline never sorts the tenant's memories: its plan walks the primary
    key from the newest (or the cursor) down and stops at the page's end."""
    from memcli.store.owner import Owner
    from memcli.store.timeline_sql import page_query

    for before, equal in ((None, {}), (500, {}), (None, {"state": "superseded"})):
        sql, params = page_query(Owner("default", user_id="u1"), before=before, limit=51,
                                 equal=equal)
        plan = " ".join(str(row) for row in memory.db.query(f"EXPLAIN QUERY PLAN {sql}",
                                                            params))
        assert "TEMP B-TREE" not in plan and "memories_scope" not in plan, plan


# -- no session before a login; failed logins limited --------------------------------------------
LIMIT = 10  # failed logins a client may make in a minute (docs/guides/viewer.md)


def _stranger(site: Browser) -> Browser:
    """Another browser (no cookies) on the same app."""
    return Browser(TestClient(site.client.app, base_url=ORIGIN))


def test_the_login_page_keeps_nothing_for_an_anonymous_browser(db_path, tmp_path,
                                                              monkeypatch) -> None:
    with viewer_app(db_path, tmp_path, monkeypatch) as (_app, site):
        page = site.get("/ui/login")
        assert page.status_code == 200
        assert "memcli_ui" not in page.cookies and "memcli_csrf" in page.cookies
        # An anonymous page that needs a login sends the browser there, again keeping nothing.
        assert "memcli_ui" not in site.get("/ui/").cookies


def test_a_flood_of_anonymous_requests_never_logs_the_operator_out(db_path, tmp_path,
                                                                  monkeypatch) -> None:
    """Before, each anonymous `GET /ui/login` made a session and the 1,001st pushed the
    operator's out. bench/trust_attacks.py floods 10,000."""
    with viewer_app(db_path, tmp_path, monkeypatch) as (_app, site):
        site.login(OPERATOR)
        flood = _stranger(site)
        for _ in range(MAX_SESSIONS + 1):
            flood.client.cookies.clear()
            assert flood.get("/ui/login").status_code == 200
        page = site.get("/ui/")
        assert page.status_code == 200 and "Log out" in page.text


def test_failed_logins_are_limited_and_the_operator_stays_in(db_path, tmp_path,
                                                           monkeypatch) -> None:
    with viewer_app(db_path, tmp_path, monkeypatch) as (_app, site):
        site.login(OPERATOR)
        guesser = _stranger(site)
        answers = [guesser.submit("/ui/login", "/ui/login", token=f"guess-{i}").status_code
                   for i in range(LIMIT)]
        assert answers == [401] * LIMIT
        # Past the limit every attempt is refused unchecked, the right token too, and links.
        refused = guesser.submit("/ui/login", "/ui/login", token=OPERATOR)
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        assert "too many failed logins" in refused.text
        assert guesser.get("/ui/login?code=made-up").status_code == 429
        assert "memcli_ui" not in refused.cookies
        assert site.get("/ui/").status_code == 200  # a logged-in session never notices


def test_a_made_up_code_counts_as_a_failed_login(db_path, tmp_path, monkeypatch) -> None:
    with viewer_app(db_path, tmp_path, monkeypatch) as (_app, site):
        codes = [site.get(f"/ui/login?code=made-up-{i}").status_code
                 for i in range(LIMIT + 1)]
        assert codes == [401] * LIMIT + [429]


def test_a_csrf_cookie_planted_without_the_secret_is_refused(db_path, tmp_path,
                                                            monkeypatch) -> None:
    """A naive double-submit (cookie == field) would let whoever can plant a cookie post; the
    field must be this process's signature over the cookie and the session."""
    with viewer_app(db_path, tmp_path, monkeypatch) as (_app, site):
        site.login(OPERATOR)
        site.client.cookies.set("memcli_csrf", "planted-value", path="/ui")
        r = site.post("/ui/logout", {"csrf": "planted-value"})
        assert r.status_code == 403
        # The login form's token is for no session: after logging in it no longer passes.
        before = csrf_of(_stranger(site).get("/ui/login").text)
        assert site.post("/ui/logout", {"csrf": before}).status_code == 403
        assert site.get("/ui/").status_code == 200
        assert site.submit("/ui/", "/ui/logout").status_code == 303
