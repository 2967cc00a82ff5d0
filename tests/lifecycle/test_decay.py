"""`memcli decay`: Ebbinghaus confidence, TTL, pinned and protected memories, purge, restore."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import pytest

from memcli.core.records import format_ts
from memcli.derived.writer import write_memory
from memcli.errors import NotFoundError
from memcli.lifecycle.decay import run_decay
from memcli.lifecycle.remember import confirm
from tests.support.backend import lexical_hits
from tests.support.lifecycle import memory_rows, rows, settings, snapshot

# `@backends`: SQLite and PostgreSQL (tests/support/backend.py), for each test reaching the
# store's SQL. Tests of logic that another test already walks on both engines stay
# SQLite-only: a PostgreSQL case costs ~2.5x a SQLite one.
backends = pytest.mark.backends


def fact(memory, text: str, **kw) -> int:
    kw.setdefault("decay_rate", 0.1)
    return write_memory(
        memory,
        content=text,
        kind=kw.pop("kind", "fact"),
        source_ids=[],
        user_id="priya",
        link=False,
        **kw,
    )


def later(days: float) -> datetime:
    return datetime.now(UTC) + timedelta(days=days)


def backdate(db_path, sql: str, days: int = 100) -> None:
    rows(db_path, sql, (format_ts(later(-days)),))


def conf(db_path, memory_id: int) -> tuple[float, str]:
    (row,) = memory_rows(db_path, "id = ?", (memory_id,))
    return row["confidence"], row["state"]


@backends
def test_confidence_decays_exponentially_without_compounding(memory, db_path):
    a = fact(memory, "Priya likes jazz.")
    slow = fact(memory, "Priya owns a bike.", decay_rate=0.01)
    report = run_decay(memory.db, settings(), now=later(10))
    assert report["decayed"] == 2 and report["soft_deleted"] == {"decay": 0, "ttl": 0}
    assert conf(db_path, a)[0] == pytest.approx(math.exp(-1.0), rel=1e-4)
    assert conf(db_path, slow)[0] == pytest.approx(math.exp(-0.1), rel=1e-4)
    # Nightly runs follow the same curve as one run: the clock starts at the previous run.
    run_decay(memory.db, settings(), now=later(15))
    assert conf(db_path, a)[0] == pytest.approx(math.exp(-1.5), rel=1e-4)
    run_decay(memory.db, settings(), now=later(15))
    assert conf(db_path, a)[0] == pytest.approx(math.exp(-1.5), rel=1e-4)


def test_an_access_restarts_the_clock(memory, db_path):
    a = fact(memory, "Priya likes jazz.")
    memory.db.execute(
        "UPDATE memories SET last_accessed = ? WHERE id = ?", (format_ts(later(8)), a)
    )
    run_decay(memory.db, settings(), now=later(10))
    assert conf(db_path, a)[0] == pytest.approx(math.exp(-0.2), rel=1e-4)


@backends
def test_pinned_and_protected_memories_never_change(memory, db_path):
    pinned = fact(memory, "Priya is allergic to penicillin.", pinned=True, importance=0.1)
    protected = fact(memory, "Priya's passport number ends in 42.", importance=0.1)
    plain = fact(memory, "Priya tried sushi once.", importance=0.1)
    confirm(memory, protected)
    report = run_decay(memory.db, settings(), now=later(400))
    assert conf(db_path, pinned) == (1.0, "active")
    assert conf(db_path, protected) == (1.0, "active")
    assert conf(db_path, plain)[1] == "soft_deleted"
    assert report["ids"]["decay"] == [plain]
    assert [h["op"] for h in memory.history(pinned)] == ["ADD"]  # not even a history row


@backends
def test_below_the_threshold_a_fact_is_soft_deleted_with_a_grace_period(memory, db_path):
    a = fact(memory, "Priya tried sushi once.")
    b = fact(memory, "Priya likes jazz.", decay_rate=0.01)
    when = later(31)  # exp(-3.1) = 0.045 < 0.05
    report = run_decay(memory.db, settings(), now=when)
    assert report["soft_deleted"] == {"decay": 1, "ttl": 0} and report["ids"]["decay"] == [a]
    (row,) = memory_rows(db_path, "id = ?", (a,))
    assert row["state"] == "soft_deleted"
    assert row["purge_at"] == report["purge_at"] == format_ts(when + timedelta(days=30))
    assert conf(db_path, b)[1] == "active"
    (last, *_) = memory.history(a)
    assert last["op"] == "DELETE" and last["meta"]["reason"] == "decay"
    assert last["meta"]["confidence"] < 0.05


@backends
def test_ttl_rule_applies_to_unused_unimportant_memories(memory, db_path):
    memory.ingest(
        [
            {"text": "ok", "user_id": "priya", "session_id": "s1", "importance": 0.1},
            {
                "text": "Priya's sister is Anika",
                "user_id": "priya",
                "session_id": "s1",
                "importance": 0.8,
            },
        ]
    )
    small, big = (r["id"] for r in memory_rows(db_path, "kind = 'episode'"))
    unused = fact(memory, "Priya tried sushi once.", decay_rate=0.0001, importance=0.1)
    assert run_decay(memory.db, settings(), now=later(59))["soft_deleted"]["ttl"] == 0
    report = run_decay(memory.db, settings(), now=later(61))
    assert sorted(report["ids"]["ttl"]) == sorted([small, unused])
    assert conf(db_path, small)[1] == "soft_deleted" and conf(db_path, big)[1] == "active"
    assert memory.history(small)[0]["op"] == "TTL"
    # Episodes do not decay by default: only the TTL rule removes them.
    assert conf(db_path, big)[0] == 1.0


@backends
def test_restore_works_until_purge_and_restarts_the_clock(memory, db_path):
    a = fact(memory, "Priya tried sushi once.")
    b = fact(memory, "Priya visited Kyoto.")
    run_decay(memory.db, settings(), now=later(40))
    assert conf(db_path, a)[1] == conf(db_path, b)[1] == "soft_deleted"
    memory.restore(a)
    dry = run_decay(memory.db, settings(), now=later(41), dry_run=True)
    assert dry["restored_reset"] == [a] and dry["soft_deleted"]["decay"] == 0
    run_decay(memory.db, settings(), now=later(41))
    assert conf(db_path, a) == (1.0, "active")  # a person brought it back: start again
    assert memory.history(a)[0]["meta"]["reason"].startswith("restored by a person")
    # b's purge_at (day 70) has not passed on day 60; it has on day 71.
    assert run_decay(memory.db, settings(), now=later(60), purge_expired=True)["purged"] == 0
    report = run_decay(memory.db, settings(), now=later(71), purge_expired=True)
    assert report["purge_ids"] == [b]
    assert memory_rows(db_path, "id = ?", (b,)) == []
    assert lexical_hits(db_path, "memories_fts", "Kyoto") == 0
    assert memory.history(b)[0]["op"] == "PURGE"  # the audit trail outlives the memory
    with pytest.raises(NotFoundError):
        memory.restore(b)


@backends
def test_dry_run_plans_without_writing(memory, db_path):
    a = fact(memory, "Priya tried sushi once.")
    fact(memory, "Priya likes jazz.", decay_rate=0.001)
    before = snapshot(db_path)
    plan = run_decay(memory.db, settings(), now=later(40), dry_run=True)
    assert plan["dry_run"] is True and plan["ids"]["decay"] == [a]
    assert plan["decayed"] == 2 and plan["soft_deleted"] == {"decay": 1, "ttl": 0}
    assert snapshot(db_path) == before
    assert memory.db.get_meta("decay_last_run") is None


@backends
def test_decay_cli_confirm_pin_unpin(cli, db_path, monkeypatch, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "retrieval: {leg_weights: {lexical: 1, sparse: 0, dense: 1}}\n"
        "lifecycle: {decay_threshold: 0.5}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    ids = [
        json.loads(cli("remember", text, "--user", "priya", "--json").stdout)["id"]
        for text in ("Priya likes jazz.", "Priya owns a bike.", "Priya visited Kyoto.")
    ]
    assert json.loads(cli("pin", str(ids[1]), "--json").stdout)["pinned"] is True
    backdate(db_path, "UPDATE memories SET created_at = ?")  # as if created 100 days ago
    out = cli("confirm", str(ids[2]), "--json")
    assert json.loads(out.stdout) == {
        "id": ids[2],
        "protected": True,
        "decay_rate": 0.0,
        "confidence": 1.0,
    }
    dry = cli("decay", "--dry-run", "--json")
    assert dry.exit_code == 0 and json.loads(dry.stdout)["ids"]["decay"] == [ids[0]]
    out = cli("decay", "--json")
    assert out.exit_code == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ids"]["decay"] == [ids[0]] and report["dry_run"] is False
    states = {r["id"]: r["state"] for r in memory_rows(db_path)}
    assert states == {ids[0]: "soft_deleted", ids[1]: "active", ids[2]: "active"}
    assert json.loads(cli("unpin", str(ids[1]), "--json").stdout)["pinned"] is False
    # Pinned time does not count; from the last run on, it decays like any other memory.
    assert json.loads(cli("decay", "--json").stdout)["ids"]["decay"] == []
    backdate(db_path, "UPDATE meta SET value = ? WHERE key = 'decay_last_run'")
    assert json.loads(cli("decay", "--json").stdout)["ids"]["decay"] == [ids[1]]
    ops = [h["op"] for h in json.loads(cli("history", str(ids[1]), "--json").stdout)]
    assert ops == ["DELETE", "UPDATE", "UPDATE", "ADD"]  # decay, unpin, pin, remember
    assert cli("confirm", "999").exit_code == 1
    assert rows(db_path, "SELECT command, status FROM lifecycle_runs") == [("decay", "ok")] * 3


@backends
def test_history_spells_a_whole_confidence_as_a_float_on_both_engines(memory, db_path):
    """The decay history's meta is JSON text built in SQL: SQLite writes 1.0 and 0.0,
    PostgreSQL's to_json wrote 1 and 0, so `history` and exports differed per engine."""
    memory.ingest([{"text": "ok", "user_id": "priya", "session_id": "s1", "importance": 0.1}])
    (episode,) = (r["id"] for r in memory_rows(db_path, "kind = 'episode'"))
    gone = fact(memory, "Priya tried sushi once.")
    report = run_decay(memory.db, settings(), now=later(400))
    assert report["ids"] == {"decay": [gone], "ttl": [episode]}
    metas = dict(rows(db_path, "SELECT memory_id, meta FROM history"
                               " WHERE op IN ('DELETE', 'TTL')"))
    assert '"confidence":1.0,' in metas[episode]  # episodes do not decay: TTL at 1.0
    assert '"confidence":0.0,' in metas[gone]  # exp(-40) rounded to 4 places
    assert isinstance(memory.history(episode)[0]["meta"]["confidence"], float)
