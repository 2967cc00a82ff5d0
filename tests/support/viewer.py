"""The web pages (/ui) under Starlette's TestClient: `memcli serve`'s app over a scratch
database, a token file, a browser-like client that logs in and reads the CSRF token of a page's
forms."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from memcli.config import load_settings
from memcli.service.http.auth import load_auth
from memcli.service.http.fastapi_app import build_app
from tests.support.http_api import NO_SPARSE, OPERATOR, T1_TOKEN, T2_TOKEN, write_token_file

# A token bound to one category (goals): it may not see the others.
NOTES_TOKEN = "notes-only-token-0123456789abcd"
ORIGIN = "http://127.0.0.1"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


class Browser:
    """A TestClient as a browser: cookies kept, the Origin of the page on its posts."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def get(self, path: str, **kw: Any) -> Any:
        return self.client.get(path, follow_redirects=False, **kw)

    def post(self, path: str, data: dict[str, str], origin: str | None = ORIGIN) -> Any:
        headers = {"Origin": origin} if origin else {}
        return self.client.post(path, data=data, headers=headers, follow_redirects=False)

    def submit(self, page: str, action: str, **fields: str) -> Any:
        """Post the form of `page` whose action is `action`, its hidden fields (the CSRF
        token among them) and `fields`, as a person filling it in and clicking it."""
        html = self.get(page).text
        form = re.search(rf'<form method="post" action="{re.escape(action)}"[^>]*>(.*?)</form>',
                         html, re.S)
        assert form, f"{page} has no form posting to {action}"
        hidden = dict(_HIDDEN.findall(form.group(1)))
        return self.post(action, {**hidden, **fields})

    def login(self, token: str) -> None:
        r = self.submit("/ui/login", "/ui/login", token=token)
        assert r.status_code == 303 and r.headers["location"] == "/ui/", r.text

    def api(self, method: str, path: str, token: str = OPERATOR, **kw: Any) -> Any:
        return self.client.request(method, path,
                                   headers={"Authorization": f"Bearer {token}"}, **kw)


def build_viewer_app(db: Path | str, tmp_path: Path, monkeypatch, *,
                     ui_url: str | None = None) -> Any:
    """`memcli serve`'s app (hash embedder, no SPLADE leg) with a token file of OPERATOR,
    T1_TOKEN (tenant t1), T2_TOKEN (tenant t2) and NOTES_TOKEN (category goals)."""
    config = tmp_path / "config.yaml"
    config.write_text(NO_SPARSE, encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    settings = load_settings(db)
    tokens = write_token_file(tmp_path / "tokens", [
        OPERATOR, f"{T1_TOKEN} tenant=t1", f"{T2_TOKEN} tenant=t2",
        f"{NOTES_TOKEN} categories=goals"])
    auth = load_auth(host="127.0.0.1", port=0, token_file=tokens, no_token=False,
                     settings=settings)
    return build_app(settings, auth, ui_url=ui_url)


@contextlib.contextmanager
def viewer_app(db: Path | str, tmp_path: Path, monkeypatch, *, ui_url: str | None = None
               ) -> Iterator[tuple[Any, Browser]]:
    """The app of `build_viewer_app`, and a Browser on it (the app started and stopped)."""
    app = build_viewer_app(db, tmp_path, monkeypatch, ui_url=ui_url)
    with TestClient(app, base_url=ORIGIN) as client:
        yield app, Browser(client)
