"""The web pages of `memcli serve` (/ui) through Starlette's TestClient against the real app:
logging in (a one-time link, a pasted token, the cookie's flags), the timeline (sessions,
filters, keyset pages), search with its legs and boosts, a memory's page and every action on
it (each writes its history row), CSRF and cross-origin refusals, a bound token's scope, and
`secret` content never shown. On SQLite and PostgreSQL (the backend matrix)."""

from __future__ import annotations

import re

import pytest

from tests.support.http_api import OPERATOR, T1_TOKEN
from tests.support.viewer import NOTES_TOKEN, Browser, csrf_of, viewer_app

pytestmark = pytest.mark.backends


@pytest.fixture
def site(db_path, tmp_path, monkeypatch):
    with viewer_app(db_path, tmp_path, monkeypatch) as (app, browser):
        yield browser


def _ingest(site: Browser, records: list[dict]) -> list[int]:
    r = site.api("POST", "/api/v1/events", json=records)
    assert r.status_code == 200, r.text
    return [i for receipt in r.json() for i in receipt["memory_ids"]]


def _remember(site: Browser, text: str, **extra) -> int:
    r = site.api("POST", "/api/v1/memories", json={"text": text, **extra})
    assert r.status_code == 200, r.text
    return r.json()["id"]


def _history(site: Browser, memory_id: int) -> list[dict]:
    r = site.api("GET", f"/api/v1/memories/{memory_id}/history")
    assert r.status_code == 200, r.text
    return r.json()


def _ids(html: str) -> list[int]:
    """The memory ids a page links to, in page order."""
    return [int(i) for i in re.findall(r'href="/ui/memories/(\d+)[?"]', html)]


# -- logging in ---------------------------------------------------------------------------------
def test_a_page_without_login_goes_to_the_login_page(site) -> None:
    r = site.get("/ui/")
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    login = site.get("/ui/login")
    assert login.status_code == 200 and '<label for="token">' in login.text


def test_a_one_time_link_logs_in_once_with_a_strict_http_only_cookie(site) -> None:
    r = site.api("POST", "/ui/login-link")
    assert r.status_code == 200, r.text
    link = r.json()["url"]
    assert link.startswith("http://127.0.0.1/ui/login?code=") and r.json()["expires_in"] == 120
    path = link.removeprefix("http://127.0.0.1")
    r = site.get(path)
    assert r.status_code == 303 and r.headers["location"] == "/ui/"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
    assert site.get("/ui/").status_code == 200
    again = Browser(site.client.__class__(site.client.app, base_url="http://127.0.0.1"))
    assert again.get(path).status_code == 401  # spent


def test_login_link_needs_a_token_over_tcp(site) -> None:
    assert site.client.post("/ui/login-link").status_code == 401
    assert site.api("POST", "/ui/login-link", token="not-a-token-of-the-file").status_code == 401


def test_a_wrong_pasted_token_is_refused_and_logout_ends_the_session(site) -> None:
    r = site.submit("/ui/login", "/ui/login", token="wrong-token-0123456789abcdef")
    assert r.status_code == 401 and "not in the daemon" in r.text
    site.login(OPERATOR)
    assert site.get("/ui/").status_code == 200
    assert site.submit("/ui/", "/ui/logout").status_code == 303
    assert site.get("/ui/").status_code == 303


def test_pages_load_nothing_from_elsewhere_and_forbid_framing(site) -> None:
    _remember(site, "a memory to show")
    site.login(OPERATOR)
    for path in ("/ui/", "/ui/search?query=memory", "/ui/memories/1", "/ui/login"):
        r = site.get(path)
        assert r.status_code == 200, path
        links = re.findall(r'(?:src|href|action)="([^"]*)"', r.text)
        assert links and all(link.startswith(("/ui/", "#")) for link in links), links
        policy = r.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    css = site.get("/ui/static/viewer.css")
    assert css.status_code == 200 and "url(" not in css.text and "@import" not in css.text


def test_pages_are_not_in_the_openapi_document(site) -> None:
    paths = site.client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith("/ui")]


# -- the timeline -------------------------------------------------------------------------------
def test_timeline_groups_sessions_filters_and_pages_by_keyset(site) -> None:
    ids = _ingest(site, [{"session_id": f"s{i % 2}", "user_id": "u1",
                          "content": {"text": f"note number {i} about deploys"}}
                         for i in range(7)])
    site.login(OPERATOR)
    page = site.get("/ui/?limit=3")
    assert page.status_code == 200
    newest = sorted(ids, reverse=True)
    assert _ids(page.text) == newest[:3]
    assert page.text.count('<section class="session"') == 3  # s0, s1, s0: grouped as they come
    older = re.search(r'href="(/ui/\?[^"]*before=\d+)" rel="next"', page.text)
    assert older, "a full page links to the older one"
    second = site.get(older.group(1).replace("&amp;", "&"))
    assert _ids(second.text) == newest[3:6]
    # Filters: a session; a state no memory is in.
    only = site.get("/ui/?session_id=s1")
    assert sorted(_ids(only.text)) == sorted(ids[1::2])
    assert _ids(site.get("/ui/?state=superseded").text) == []
    assert _ids(site.get("/ui/?kind=episode&channel=private&sensitivity=none").text)


def test_timeline_refuses_a_bad_filter_as_bad_input(site) -> None:
    site.login(OPERATOR)
    r = site.get("/ui/?kind=nonsense")
    assert r.status_code == 422 and "bad timeline request: kind" in r.text
    assert site.get("/ui/?before=abc").status_code == 422


def test_a_bound_token_sees_only_its_tenant_and_categories(site) -> None:
    (mine,) = _ingest(site, [{"tenant_id": "t1", "session_id": "a",
                              "content": {"text": "tenant one's plan"}}])
    (theirs,) = _ingest(site, [{"tenant_id": "t2", "session_id": "b",
                                "content": {"text": "tenant two's plan"}}])
    site.login(T1_TOKEN)
    page = site.get("/ui/")
    assert "tenant one&#39;s plan" in page.text and "tenant two" not in page.text
    assert site.get(f"/ui/memories/{theirs}").status_code == 404
    assert site.get(f"/ui/memories/{mine}").status_code == 200
    assert site.get("/ui/?tenant_id=t2").status_code == 403
    # A token bound to the `goals` category: the other categories are not there.
    note = _remember(site, "ship the viewer this week", category="goals")
    other = _remember(site, "the office opens at nine", category="knowledge")
    notes = Browser(site.client.__class__(site.client.app, base_url="http://127.0.0.1"))
    notes.login(NOTES_TOKEN)
    assert _ids(notes.get("/ui/").text) == [note]
    # A session's events: only those with a memory the token may see.
    _ingest(site, [{"session_id": "mixed", "category": "goals", "content": {"text": "goal A"}},
                   {"session_id": "mixed", "category": "knowledge",
                    "content": {"text": "fact B"}}])
    mixed = notes.get("/ui/?session_id=mixed").text
    assert "goal A" in mixed and "fact B" not in mixed
    operator = Browser(site.client.__class__(site.client.app, base_url="http://127.0.0.1"))
    operator.login(OPERATOR)
    assert "fact B" in operator.get("/ui/?session_id=mixed").text
    assert notes.get(f"/ui/memories/{other}").status_code == 404


def test_the_operator_reads_and_acts_in_another_tenant_through_its_links(site) -> None:
    (memory_id,) = _ingest(site, [{"tenant_id": "t2", "session_id": "b",
                                   "content": {"text": "tenant two's roadmap"}}])
    site.login(OPERATOR)
    assert _ids(site.get("/ui/").text) == []  # the configured tenant holds nothing
    timeline = site.get("/ui/?tenant_id=t2").text
    link = f"/ui/memories/{memory_id}?tenant_id=t2"
    assert f'href="{link}"' in timeline
    assert "tenant two&#39;s roadmap" in site.get(link).text
    r = site.submit(link, f"/ui/memories/{memory_id}/pin")
    assert r.status_code == 303 and r.headers["location"] == f"{link}&done=pinned"
    rows = site.api("GET", f"/api/v1/memories/{memory_id}/history?tenant_id=t2").json()
    assert rows[0]["op"] == "UPDATE" and rows[0]["actor"] == "ui"


def test_secret_content_is_never_shown(site) -> None:
    _ingest(site, [{"session_id": "s", "sensitivity": "secret",
                    "content": {"text": "the vault code is 7719-ALPHA"}},
                   {"session_id": "s", "content": {"text": "an ordinary turn"}}])
    site.login(OPERATOR)
    page = site.get("/ui/")
    assert "an ordinary turn" in page.text and "7719" not in page.text
    for memory_id in _ids(page.text):
        assert "7719" not in site.get(f"/ui/memories/{memory_id}").text
    # The session's events: the secret one is there, its content is not.
    session = site.get("/ui/?session_id=s").text
    assert "Events of session s" in session and "an ordinary turn" in session
    assert "[secret: never shown]" in session and "7719" not in session
    found = site.get("/ui/search?query=vault+code+7719")
    assert found.status_code == 200 and "7719-ALPHA" not in found.text.replace(
        'value="vault code 7719"', "")


# -- search -------------------------------------------------------------------------------------
def test_search_shows_each_hits_legs_and_boosts(site) -> None:
    (target,) = _ingest(site, [{"session_id": "s", "user_id": "u1",
                                "content": {"text": "we deploy blue-green on Fridays"}}])
    _ingest(site, [{"session_id": "s", "user_id": "u1",
                    "content": {"text": "lunch is at noon"}}])
    site.login(OPERATOR)
    r = site.get("/ui/search?query=blue-green+deploy&user_id=u1&top_k=5")
    assert r.status_code == 200, r.text
    assert _ids(r.text)[0] == target
    assert re.search(r"<li>lexical #1 = [\d.e-]+</li>", r.text)
    assert re.search(r"<ul class=\"boosts\"><li>\w+ = ", r.text)
    assert "Scope that answered: <strong>" in r.text
    assert site.get("/ui/search?query=x&top_k=0").status_code == 422
    blank = site.get("/ui/search")
    assert blank.status_code == 200 and "<table>" not in blank.text


# -- a memory and its actions -------------------------------------------------------------------
def test_memory_page_shows_text_metadata_history_edges_and_source_event(site) -> None:
    (memory_id,) = _ingest(site, [{"event_id": "ev-1", "session_id": "s", "user_id": "u1",
                                   "content": {"text": "the build runs on Tuesdays"}}])
    site.login(OPERATOR)
    page = site.get(f"/ui/memories/{memory_id}")
    assert page.status_code == 200
    text = page.text
    assert "the build runs on Tuesdays" in text and "<dt>session_id</dt>" in text
    assert "<code>ev-1</code>" in text  # the source event
    assert "<td>ADD</td>" in text  # its history
    assert site.get("/ui/memories/999999").status_code == 404
    assert site.get("/ui/memories/abc").status_code == 422


def test_every_action_writes_its_history_row_and_shows_the_result(site) -> None:
    memory_id = _remember(site, "the standup is at 9:30")
    site.login(OPERATOR)
    page = f"/ui/memories/{memory_id}"
    steps = [("pin", "pinned", "UPDATE", "Pinned."), ("unpin", "unpinned", "UPDATE", "Unpinned."),
             ("confirm", "confirmed", "UPDATE", "Confirmed"),
             ("forget", "forgotten", "DELETE", "Forgotten"),
             ("restore", "restored", "RESTORE", "Restored.")]
    for action, done, op, shown in steps:
        before = len(_history(site, memory_id))
        r = site.submit(page, f"{page}/{action}")
        assert r.status_code == 303, (action, r.text)
        assert r.headers["location"] == f"{page}?tenant_id=default&done={done}"
        rows = _history(site, memory_id)
        assert len(rows) == before + 1 and rows[0]["op"] == op and rows[0]["actor"] == "ui"
        assert shown in site.get(r.headers["location"]).text
    r = site.submit(page, f"{page}/correct", text="the standup is at 10:00", reason="moved")
    assert r.status_code == 303
    new_id = int(re.search(r"/ui/memories/(\d+)", r.headers["location"]).group(1))
    assert new_id != memory_id
    shown = site.get(r.headers["location"]).text
    assert "the standup is at 10:00" in shown and "Corrected" in shown
    assert f'href="/ui/memories/{memory_id}?tenant_id=default"' in shown  # the supersedes edge
    old = site.get(page).text
    assert "superseded" in old
    assert any(row["op"] in ("UPDATE", "LINK") for row in _history(site, memory_id)[:2])
    # The correction's rows name the page, as every other action's do.
    assert [(row["op"], row["actor"]) for row in _history(site, new_id)] == [("ADD", "ui")]
    superseded = [row for row in _history(site, memory_id) if row["new_ref"] == str(new_id)]
    assert superseded and all(row["actor"] == "ui" for row in superseded)


def test_an_action_on_a_memory_in_the_wrong_state_is_bad_input(site) -> None:
    memory_id = _remember(site, "the wiki moved")
    site.login(OPERATOR)
    page = f"/ui/memories/{memory_id}"
    # The page offers no Restore for an active memory; a post for it anyway is bad input.
    r = site.post(f"{page}/restore", {"csrf": csrf_of(site.get(page).text)})
    assert r.status_code == 422 and "not soft-deleted" in r.text


# -- CSRF and origins ---------------------------------------------------------------------------
def test_a_post_without_the_csrf_token_is_refused(site) -> None:
    memory_id = _remember(site, "keep me")
    site.login(OPERATOR)
    before = _history(site, memory_id)
    page = f"/ui/memories/{memory_id}"
    site.get(page)
    assert site.post(f"{page}/forget", {}).status_code == 403
    assert site.post(f"{page}/forget", {"csrf": "made-up"}).status_code == 403
    stranger = Browser(site.client.__class__(site.client.app, base_url="http://127.0.0.1"))
    token = csrf_of(stranger.get("/ui/login").text)  # another browser's session
    assert site.post(f"{page}/forget", {"csrf": token}).status_code == 403
    assert _history(site, memory_id) == before


def test_a_cross_origin_post_is_refused_even_with_the_token(site) -> None:
    memory_id = _remember(site, "keep me too")
    site.login(OPERATOR)
    page = f"/ui/memories/{memory_id}"
    csrf = csrf_of(site.get(page).text)
    for origin in ("http://evil.example", "http://127.0.0.1:9999", "null"):
        r = site.post(f"{page}/forget", {"csrf": csrf}, origin=origin)
        assert r.status_code == 403, origin
    assert [row["op"] for row in _history(site, memory_id)] == ["ADD"]
    assert site.post(f"{page}/forget", {"csrf": csrf}).status_code == 303


# -- what a person meets first ------------------------------------------------------------------
def _header_tenant(html: str) -> str:
    found = re.search(r'aria-label="Your scope">\s*tenant <code>([^<]*)</code>', html)
    assert found, "the header names no tenant"
    return found.group(1)


def test_the_root_leads_to_the_pages_and_the_icon_is_there(site) -> None:
    root = site.get("/")
    assert root.status_code == 307 and root.headers["location"] == "/ui/"
    icon = site.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO file
    page = site.get("/ui/login").text
    linked = re.search(r'<link rel="icon" href="([^"]+)"', page)
    assert linked and site.get(linked.group(1)).status_code == 200


def test_the_header_names_the_tenant_shown(site) -> None:
    site.login(OPERATOR)
    for page in ("/ui/", "/ui/search", "/ui/bundle", "/ui/ledger", "/ui/dashboard"):
        assert _header_tenant(site.get(page).text) == "default", page  # the configured one
    assert _header_tenant(site.get("/ui/?tenant_id=t2").text) == "t2"
    bound = Browser(site.client.__class__(site.client.app, base_url="http://127.0.0.1"))
    bound.login(T1_TOKEN)
    assert _header_tenant(bound.get("/ui/bundle").text) == "t1"


def test_a_pages_first_button_is_its_own(site) -> None:
    """Log out comes after the page's forms: on the Bundle page the first button is Build."""
    site.login(OPERATOR)
    for page, first in (("/ui/bundle", "Build"), ("/ui/search", "Search")):
        html = site.get(page).text
        buttons = re.findall(r"<button[^>]*>([^<]*)</button>", html)
        assert buttons[0] == first and buttons[-1] == "Log out", (page, buttons)
