"""Each SQL fragment of memcli/store/dialect.py (SQLite) and of its PostgreSQL twin
(memcli/store/postgres/dialect.py) evaluated on both engines gives the same value."""

from __future__ import annotations

import pytest

from memcli.store.sqlite.dialect import DIALECT as lite

pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not installed")

from memcli.store.postgres import connect  # noqa: E402
from memcli.store.postgres.dialect import DIALECT as pg  # noqa: E402


@pytest.fixture
def engines(pg_memcli_db, tmp_path):  # noqa: F811
    from memcli.store.sqlite.connection import Database

    sqlite, postgres = Database(tmp_path / "d.db"), connect(pg_memcli_db)
    try:
        yield sqlite, postgres
    finally:
        sqlite.close()
        postgres.close()


def both(engines, build, params=None):
    """The value of `SELECT <fragment>` on SQLite and on PostgreSQL."""
    sqlite, postgres = engines
    return (sqlite.scalar(f"SELECT {build(lite)}", params),
            postgres.scalar(f"SELECT {build(pg)}", params))


@pytest.mark.parametrize(("a", "b"), [(1, 2), (2.5, -1.0), ("2026-01-02", "2026-01-01")])
def test_greatest_and_least(engines, a, b):
    params = {"a": a, "b": b}
    on_sqlite, on_pg = both(engines, lambda d: d.greatest(":a", ":b"), params)
    assert on_sqlite == on_pg == max(a, b)
    on_sqlite, on_pg = both(engines, lambda d: d.least(":a", ":b"), params)
    assert on_sqlite == on_pg == min(a, b)


@pytest.mark.parametrize(("later", "earlier", "days"), [
    ("2026-11-24T12:00:00+00:00", "2026-11-20T00:00:00+00:00", 4.5),
    ("2026-11-24T00:00:00.250000Z", "2026-11-24T00:00:00Z", 0.25 / 86400),
    ("2026-01-01T00:00:00+00:00", "2026-03-01T06:00:00+00:00", -59.25),
])
def test_days_between(engines, later, earlier, days):
    on_sqlite, on_pg = both(engines, lambda d: d.days_between(":later", ":earlier"),
                            {"later": later, "earlier": earlier})
    assert on_sqlite == pytest.approx(days, abs=1e-6)
    assert on_pg == pytest.approx(days, abs=1e-6)


@pytest.mark.parametrize(("value", "digits", "rounded"), [
    (0.123456, 4, 0.1235), (2.5, 0, 3.0), (-2.5, 0, -3.0), (1234.56789, 1, 1234.6), (7, 2, 7.0),
])
def test_round_to(engines, value, digits, rounded):
    on_sqlite, on_pg = both(engines, lambda d: d.round_to(":x", digits), {"x": value})
    assert on_sqlite == pytest.approx(rounded) and on_pg == pytest.approx(rounded)
    assert isinstance(on_pg, float)


@pytest.mark.parametrize("reason", ["decayed", 'says "hi" \\ and ünïcode', "line\nbreak"])
def test_json_object_is_byte_identical(engines, reason):
    def build(d):
        return d.json_object("'reason'", "CAST(:r AS TEXT)", "'confidence'",
                             d.round_to(":c", 4), "'purge_at'", "CAST(NULL AS TEXT)",
                             "'n'", "CAST(:n AS INTEGER)")

    on_sqlite, on_pg = both(engines, build, {"r": reason, "c": 0.123456, "n": 3})
    assert on_sqlite == on_pg
    assert on_pg.startswith('{"reason":')


@pytest.mark.parametrize(("text", "valid"), [
    ('{"a": 1}', True), ("[1, 2]", True), ("12", True), ("nope", False), ("", False),
    ('{"a": ', False),
])
def test_is_json(engines, text, valid):
    on_sqlite, on_pg = both(engines, lambda d: d.is_json(":t"), {"t": text})
    assert bool(on_sqlite) == bool(on_pg) == valid


@pytest.mark.parametrize(("text", "field"), [
    ('{"profile_field": "city", "x": 1}', "city"), ('{"x": 1}', None),
    ('{"profile_field": "Zürich"}', "Zürich"), ('{"profile_field": null}', None),
])
def test_json_text(engines, text, field):
    # over a column, as the store uses it (PostgreSQL folds a cast of a constant at planning
    # time, even inside CASE: the fragment's guard is for column values)
    def column(expr):
        return (f"(SELECT {expr} FROM (WITH s AS MATERIALIZED (SELECT CAST(:t AS TEXT) AS t)"
                " SELECT t FROM s) AS c)")

    on_sqlite, on_pg = both(engines, lambda d: column(d.json_text("t", "profile_field")),
                            {"t": text})
    assert on_sqlite == on_pg == field
    # guarded by is_json, as the store uses it, on a text that is no JSON at all
    assert both(engines, lambda d: column(f"CASE WHEN {d.is_json('t')} THEN "
                f"{d.json_text('t', 'profile_field')} END"), {"t": "nope"}) == (None, None)


def test_distinct_list(engines):
    def build(d):
        return (f"(SELECT {d.distinct_list('v')} FROM (SELECT 'a' AS v UNION ALL SELECT 'b'"
                " UNION ALL SELECT 'a' UNION ALL SELECT NULL) AS t)")

    on_sqlite, on_pg = both(engines, build)
    assert sorted(on_sqlite.split(",")) == sorted(on_pg.split(",")) == ["a", "b"]


def test_ordered_join(engines):
    sqlite, postgres = engines
    query = ("WITH a(x) AS (VALUES (1), (2)), b(y) AS (VALUES (1)) "
             "SELECT count(*) FROM a {} b ON a.x = b.y")
    assert sqlite.scalar(query.format(lite.ORDERED_JOIN)) == 1
    assert postgres.scalar(query.format(pg.ORDERED_JOIN)) == 1


def test_every_sqlite_fragment_has_its_twin():
    import inspect

    names = {n for n, f in vars(type(lite)).items()
             if inspect.isfunction(f) and not n.startswith("_")}
    assert names >= {"greatest", "least", "days_between", "json_object", "round_to"}
    for name in names:
        assert inspect.signature(getattr(pg, name)).parameters.keys() == \
            inspect.signature(getattr(lite, name)).parameters.keys(), name



@pytest.mark.parametrize("position", [0, 1, 5])
def test_binary_orders_text_by_its_bytes(engines, position):
    names = ["b", "a", "B", "é", "_x", "a-b"]
    values = " UNION ALL ".join(f"SELECT '{n}' AS v" for n in names)

    def build(d):
        return f"(SELECT v FROM ({values}) AS t ORDER BY {d.binary('v')} LIMIT 1 OFFSET {position})"

    # the name at that place in byte order (as Python sorts str) on both engines
    assert both(engines, build) == (sorted(names)[position],) * 2
