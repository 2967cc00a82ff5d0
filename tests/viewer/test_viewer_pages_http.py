"""The bundle, ledger and dashboard pages over real HTTP (memcli.service.http.fastapi_app's app on
127.0.0.1): what they show, that looking at a bundle never moves the agent's delta base, that a
proposal is decided only by a CSRF-checked form post of its own scope, and that bad input is a
4xx page, never a 500."""

from __future__ import annotations

import re

import pytest

from memcli import Memory
from memcli.lifecycle.proposals import list_proposals, propose
from memcli.providers.embedders import HashEmbedder
from tests.support.http_api import OPERATOR, T1_TOKEN, T2_TOKEN, running_api


@pytest.fixture
def api(tmp_path, monkeypatch):
    with running_api(tmp_path, monkeypatch) as served:
        yield served


def _record(client, text: str, session: str = "s1") -> None:
    answer = client.post("/api/v1/events", json={
        "tenant_id": "t1", "user_id": "priya", "session_id": session, "kind": "message",
        "actor": {"type": "human", "id": "priya"}, "content": {"text": text}})
    assert answer.status_code in (200, 201), answer.text


def _acb(client) -> dict:
    answer = client.post("/api/v1/acb/build", json={"tenant_id": "t1", "user_id": "priya",
                                                    "session_id": "s1"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _csrf(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def _proposal(db, tenant: str) -> int:
    with Memory.open(db, embedder=HashEmbedder(64)) as memory, memory.db.transaction():
        return propose(memory.db, tenant_id=tenant, user_id="priya", field="city",
                       value="Porto", text="Priya lives in Porto")["proposal_id"]


def test_the_bundle_page_shows_sections_against_their_caps_and_keeps_the_delta_base(api):
    with api.client(T1_TOKEN) as client:
        _record(client, "I moved to Lisbon for a robotics job")
        _acb(client)  # the agent sees revision N
        remembered = client.post("/api/v1/memories", json={
            "text": "Priya's sister Anika visits on 21 March", "tenant_id": "t1",
            "user_id": "priya"})
        assert remembered.status_code in (200, 201), remembered.text
        for _ in range(2):  # a person looks, twice
            page = client.get("/ui/bundle", params={"user_id": "priya", "session_id": "s1",
                                                    "query": "Lisbon", "max_tokens": "400"})
            assert page.status_code == 200, page.text
            assert 'id="section-recent_window"' in page.text
            assert re.search(r'class="section-tokens">\d+ / \d+ tokens', page.text)
            assert "Anika" in page.text and "<q>" not in page.text
            linked = re.findall(r'href="(/ui/memories/\d+\?tenant_id=t1)">mem:', page.text)
            assert linked and client.get(linked[0]).status_code == 200
        delta = _acb(client)["delta"]  # the agent still gets what changed since N
    assert delta is not None and delta["changes"] >= 1
    assert any("Anika" in b for b in delta["bullets"])


def test_a_bad_bundle_form_is_a_4xx_page(api):
    with api.client(OPERATOR) as client:
        page = client.get("/ui/bundle", params={"user_id": "priya", "max_tokens": "lots"})
        assert page.status_code == 422 and "max_tokens" in page.text
        page = client.get("/ui/bundle", params={"user_id": "priya", "channel": "everyone"})
        assert page.status_code == 422


def test_a_proposal_is_decided_only_by_a_csrf_checked_post_of_its_scope(api):
    pid = _proposal(api.db, "t1")
    theirs = _proposal(api.db, "t2")
    with api.client(T2_TOKEN) as other:  # another tenant's token: not found
        page = other.get("/ui/ledger")
        assert f'id="proposal-{theirs}"' in page.text and f'id="proposal-{pid}"' not in page.text
        token = _csrf(page.text)
        assert other.post(f"/ui/proposals/{pid}", data={"csrf": token, "action": "accept"}
                          ).status_code == 404
    with api.client(T1_TOKEN) as client:
        page = client.get("/ui/ledger")
        assert f'id="proposal-{pid}"' in page.text
        refused = client.post(f"/ui/proposals/{pid}", data={"action": "accept"})
        assert refused.status_code == 403
        with Memory.open(api.db, embedder=HashEmbedder(64)) as memory:
            assert [p["status"] for p in list_proposals(memory.db, status=None,
                                                        tenant_id="t1")] == ["pending"]
        done = client.post(f"/ui/proposals/{pid}", data={"csrf": _csrf(page.text),
                                                         "action": "accept"},
                           follow_redirects=False)
        assert done.status_code == 303 and done.headers["location"].startswith("/ui/ledger?")
        shown = client.get(done.headers["location"])
        assert f"proposal {pid} accepted" in shown.text
    with Memory.open(api.db, embedder=HashEmbedder(64)) as memory:
        [row] = list_proposals(memory.db, status=None, tenant_id="t1")
        rows = memory.history(row["memory_id"], tenant_id="t1")
    assert (row["status"], row["decided_by"]) == ("accepted", "ui")
    assert ("ADD", "ui") in {(r["op"], r["actor"]) for r in rows}


def test_the_dashboard_is_the_operators(api):
    with api.client(OPERATOR) as client:
        page = client.get("/ui/dashboard", params={"since": "24h"})
        assert page.status_code == 200
        assert '<svg' in page.text and 'id="doctor-verdict"' in page.text
        assert client.get("/ui/dashboard", params={"since": "yesterday"}).status_code == 422
    with api.client(T1_TOKEN) as client:
        assert client.get("/ui/dashboard").status_code == 403


def test_check_again_runs_doctor_now(api):
    with api.client(OPERATOR) as client:
        first = client.get("/ui/dashboard").text
        made = re.search(r"checked ([^;]+);", first).group(1)
        assert re.search(r"checked ([^;]+);", client.get("/ui/dashboard").text).group(1) == made
        again = re.search(r'href="(/ui/dashboard\?[^"]*fresh=1)"', first).group(1)
        fresh = client.get(again.replace("&amp;", "&"))
        assert fresh.status_code == 200 and 'id="doctor-verdict"' in fresh.text
