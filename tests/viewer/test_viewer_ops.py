"""The viewer's ledger, proposal and dashboard operations, and its latency chart, on SQLite and
PostgreSQL: the page reads what `memcli decision|task|proposals list` read, a decision on a
proposal writes the history row `memcli proposals accept|reject` writes, and a bound caller
reaches neither another tenant's proposal nor the database-wide dashboard."""

from __future__ import annotations

import pytest

from memcli.config import load_settings
from memcli.errors import NotAllowedError, NotFoundError
from memcli.ledger import entries as ledger
from memcli.lifecycle.proposals import propose
from memcli.operations.binding import Binding
from memcli.operations.requests import QueryRequest
from memcli.service.api import Context, query
from memcli.store.memories import get_memories
from memcli.viewer import chart
from memcli.viewer.pages.dashboard import dashboard
from memcli.viewer.pages.ledger_page import decide
from memcli.viewer.pages.ledger_page import ledger as ledger_page


def _proposal(memory, tenant: str = "acme", value: str = "Porto") -> int:
    with memory.db.transaction():
        out = propose(memory.db, tenant_id=tenant, user_id="priya", field="city", value=value,
                      text=f"Priya lives in {value}", origin="remember")
    return out["proposal_id"]


@pytest.fixture
def ctx(memory, db_path):
    return Context(memory, load_settings(db_path))


@pytest.mark.backends
def test_the_ledger_links_superseded_decisions_and_groups_tasks(ctx, memory):
    old = ledger.add_decision(memory, "Use SQLite", tenant_id="acme", user_id="priya")
    new = ledger.supersede_decision(memory, old["id"], "Use PostgreSQL for teams",
                                    owner=memory.owner("acme"), reason="growth")
    ledger.add_task(memory, "Write the viewer", tenant_id="acme", user_id="priya")
    done = ledger.add_task(memory, "Ship it", tenant_id="acme", user_id="priya", status="done")
    ledger.add_task(memory, "Another tenant's", tenant_id="other", user_id="priya")
    page = ledger_page(ctx, Binding(), {"tenant_id": "acme"})
    assert [d["id"] for d in page["active"]] == [new["id"]]
    assert page["active"][0]["supersedes"] == old["id"]
    assert [(d["id"], d["superseded_by"]) for d in page["superseded"]] == [(old["id"], new["id"])]
    assert [t["title"] for t in page["tasks"]["open"]] == ["Write the viewer"]
    assert [t["id"] for t in page["tasks"]["done"]] == [done["id"]]
    assert page["tasks"]["doing"] == []


@pytest.mark.backends
def test_accepting_a_proposal_writes_the_fact_and_its_history_row(ctx, memory):
    pid = _proposal(memory)
    page = ledger_page(ctx, Binding(), {"tenant_id": "acme"})
    assert [p["id"] for p in page["pending"]] == [pid]
    out = decide(ctx, Binding(), {"proposal_id": str(pid), "action": "accept", "tenant_id": "acme"})
    fact = get_memories(memory.db, [out["memory_id"]])[out["memory_id"]]
    assert (fact["content"], fact["category"]) == ("Priya lives in Porto", "profile")
    rows = memory.history(out["memory_id"], tenant_id="acme")
    assert {(r["op"], r["actor"]) for r in rows} == {("ADD", "ui"), ("UPDATE", "ui")}
    page = ledger_page(ctx, Binding(), {"tenant_id": "acme"})
    assert page["pending"] == []
    assert [(p["id"], p["status"], p["decided_by"]) for p in page["decided"]] == [
        (pid, "accepted", "ui")]


@pytest.mark.backends
def test_a_rejected_proposal_is_recorded_and_changes_nothing(ctx, memory):
    pid = _proposal(memory)
    out = decide(ctx, Binding(), {"proposal_id": str(pid), "action": "reject",
                                  "tenant_id": "acme", "reason": "I moved back"})
    assert out == {"id": pid, "status": "rejected"}
    page = ledger_page(ctx, Binding(), {"tenant_id": "acme"})
    assert [(p["status"], p["reason"]) for p in page["decided"]] == [("rejected", "I moved back")]
    assert memory.history(None, tenant_id="acme")[-1]["meta"]["decision"] == "rejected"


def test_a_bound_caller_reaches_no_other_tenants_proposal(ctx, memory):
    pid = _proposal(memory, tenant="other")
    bound = Binding(tenant="acme")
    assert ledger_page(ctx, bound, {})["pending"] == []
    with pytest.raises(NotFoundError):
        decide(ctx, bound, {"proposal_id": str(pid), "action": "accept"})
    with pytest.raises(NotAllowedError):
        decide(ctx, bound, {"proposal_id": str(pid), "action": "accept", "tenant_id": "other"})


@pytest.mark.backends
def test_the_dashboard_holds_doctor_stats_and_a_p95_chart(ctx, memory):
    memory.ingest([{"tenant_id": "acme", "user_id": "priya", "kind": "message",
                    "content": {"text": "Priya lives in Lisbon"}}])
    for _ in range(3):
        query(ctx, Binding(), QueryRequest(query="Lisbon", tenant_id="acme"))
    data = dashboard(ctx, Binding(), {"since": "1h"})
    assert data["stats"]["requests"] == 3
    assert {c["check"] for c in data["doctor"]["checks"]} >= {"integrity", "schema"}
    assert sum(s["requests"] for s in data["series"]) == 3
    assert data["svg"].startswith("<svg") and 'class="point"' in data["svg"]
    with pytest.raises(NotAllowedError):
        dashboard(ctx, Binding(tenant="acme"), {})


def test_the_chart_breaks_its_line_at_an_empty_span_and_escapes_its_labels():
    rows = [{"ts": f"2026-01-01T00:{m:02d}:00Z", "latency_ms": ms, "error_stage": None}
            for m, ms in ((0, 10.0), (1, 20.0), (8, 25.0), (9, 30.0), (10, 40.0))]
    rows.append({"ts": "2026-01-01T00:05:00Z", "latency_ms": 9999.0, "error_stage": "store"})
    series = chart.p95_series(sorted(rows, key=lambda r: r["ts"]), buckets=10)
    assert [s["requests"] for s in series] == [1, 1, 0, 0, 0, 0, 0, 0, 1, 2]
    assert series[-1]["p95"] == pytest.approx(39.5)
    svg = chart.latency_svg(series, title="<p95> & more")
    assert svg.count("<polyline") == 2  # one line before the gap, one after
    assert svg.count('class="point"') == 4
    assert "&lt;p95&gt; &amp; more" in svg and "<p95>" not in svg
    assert "no requests" in chart.latency_svg([])


def test_the_dashboard_keeps_doctors_report_until_asked_for_a_fresh_one(ctx, memory):
    first = dashboard(ctx, Binding(), {})["doctor"]
    memory.ingest([{"tenant_id": "acme", "user_id": "priya", "kind": "message",
                    "content": {"text": "Priya lives in Lisbon"}}])
    with memory.db.transaction():  # a derived row without its memory: a problem doctor sees
        memory.db.execute("DELETE FROM memories_fts")
    kept = dashboard(ctx, Binding(), {})["doctor"]
    assert kept["checked_at"] == first["checked_at"] and kept["healthy"] == first["healthy"]
    fresh = dashboard(ctx, Binding(), {"fresh": "true"})["doctor"]
    assert fresh["healthy"] is False and fresh["problems"] >= 1


@pytest.mark.backends
def test_the_bundle_page_reads_the_acb_build_result_in_the_callers_scope(ctx, memory):
    from memcli.viewer.pages.bundle_page import bundle

    memory.ingest([{"tenant_id": "acme", "user_id": "priya", "session_id": "s1",
                    "kind": "message", "content": {"text": text}}
                   for text in ("Priya moved to Lisbon", "She works on robots", "Tea, no sugar")])
    assert bundle(ctx, Binding(), {"tenant_id": "acme"}) == {"bundle": None}  # nothing asked
    asked = {"tenant_id": "acme", "user_id": "priya", "session_id": "s1", "query": "Lisbon",
             "max_tokens": "300"}
    shown = bundle(ctx, Binding(), asked)["bundle"]
    sections = {s["name"]: s for s in shown["sections"]}
    recent = sections["recent_window"]
    assert recent["share"] == pytest.approx(100 * recent["tokens"] / recent["cap"], abs=0.1)
    assert all(link["href"] == f"/ui/memories/{link['ref'][4:]}?tenant_id=acme"
               for s in shown["sections"] for item in s["items"] for link in item["links"]
               if link["ref"].startswith("mem:"))
    assert shown["used"] <= shown["budget"] == 300
    assert {o["section"] for o in shown["omissions"]} <= set(sections)
    with pytest.raises(NotAllowedError):
        bundle(ctx, Binding(tenant="other"), asked)


@pytest.mark.backends
def test_the_timeline_and_a_sessions_events_keep_to_the_owners_categories(memory):
    """A page of memories and a session's events apply the same scope: the owner's user, its
    bound categories only, never a hidden one (an event without category is `event`)."""
    from memcli.store.owner import Owner
    from memcli.store.timeline_sql import memories_page, session_events

    memory.ingest([{"session_id": "s", "event_id": f"ev-{category or 'none'}",
                    "category": category, "content": {"text": f"a note of {category}"}}
                   for category in ("goals", "knowledge", None)])

    def seen(owner: Owner) -> tuple[list[str], list[str]]:
        page = memories_page(memory.db, owner, before=None, limit=10, equal={"session_id": "s"})
        events = session_events(memory.db, owner, "s", 10)
        return sorted(r["event_id"] for r in page), sorted(e["event_id"] for e in events)

    every = ["ev-goals", "ev-knowledge", "ev-none"]
    assert seen(Owner("default")) == (every, every)
    assert seen(Owner("default", hidden=("knowledge",))) == (["ev-goals", "ev-none"],) * 2
    bound = Owner("default", categories=("goals", "knowledge"), hidden=("knowledge",))
    assert seen(bound) == (["ev-goals"], ["ev-goals"])
    assert seen(Owner("default", categories=())) == ([], [])
    assert seen(Owner("default", user_id="nobody")) == ([], [])
