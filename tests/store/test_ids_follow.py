"""Ids written explicitly (import keeps a file's ids, rebuild restores recorded ones) are
followed by the ids the database generates next, on both backends: SQLite's rowid does this by
itself, PostgreSQL's identity columns through schema.sql's memcli_follow_identity trigger."""

from __future__ import annotations

import json

import pytest

from tests.support.backend import rows
from tests.support.records import ndjson, turns

pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]


def _ok(result) -> dict:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_writes_after_an_import_get_new_ids(cli, db_path, tmp_path, monkeypatch):
    source = tmp_path / "source.db"
    monkeypatch.setenv("MEMCLI_DB", str(source))
    _ok(cli("ingest", "-", input=ndjson(turns("s1", ["Berlin move", "Rex the dog",
                                                      "Tea in the morning"]))))
    _ok(cli("decision", "add", "Use PostgreSQL for the team"))
    dump = tmp_path / "dump.jsonl"
    _ok(cli("export", "--all-tenants", "--out", str(dump)))

    monkeypatch.setenv("MEMCLI_DB", str(db_path))
    _ok(cli("import", str(dump)))
    imported = {r[0] for r in rows(db_path, "SELECT id FROM memories")}
    fact = _ok(cli("remember", "I prefer green tea", "--user", "u1"))["id"]
    decision = _ok(cli("decision", "add", "Keep SQLite for laptops"))
    event = _ok(cli("ingest", "-", input=ndjson(turns("s2", ["A new turn"]))))
    new = {fact, decision["memory_id"], *event["memory_ids"]}
    assert len(new) == 3 and not new & imported
    assert decision["id"] == 2
