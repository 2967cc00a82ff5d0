"""The placeholder rewrite of the PostgreSQL connection (no server needed): SQLite's `?`,
`?N` and `:name` become psycopg's `%s` / `%(name)s`, every literal `%` is doubled, and nothing
inside a string, identifier, comment, dollar-quoted body or `::` cast is taken for a parameter."""

from __future__ import annotations

import pytest

from memcli.store.postgres.placeholders import PlaceholderError, rewrite


@pytest.mark.parametrize(("sql", "expected", "style"), [
    ("SELECT * FROM t WHERE a = ? AND b = ?", "SELECT * FROM t WHERE a = %s AND b = %s",
     "positional"),
    ("SELECT :a, :b_2 WHERE x = :a", "SELECT %(a)s, %(b_2)s WHERE x = %(a)s", "named"),
    # a literal that looks like parameters, with '' inside, and a LIKE pattern with %
    ("SELECT 'it''s ? :x %', ? WHERE c LIKE 'a%'",
     "SELECT 'it''s ? :x %%', %s WHERE c LIKE 'a%%'", "positional"),
    # modulo operator outside any literal
    ("SELECT id % ? FROM t", "SELECT id %% %s FROM t", "positional"),
    # casts are not named parameters; a named parameter may be cast
    ("SELECT x::text, :v::int, CAST(:w AS text)",
     "SELECT x::text, %(v)s::int, CAST(%(w)s AS text)", "named"),
    # quoted identifiers, line and nested block comments
    ('SELECT "a?b", "c:d" -- ? :e %\nFROM t /* ? /* :f */ % */ WHERE g = ?',
     'SELECT "a?b", "c:d" -- ? :e %%\nFROM t /* ? /* :f */ %% */ WHERE g = %s', "positional"),
    # dollar-quoted bodies, with and without a tag, and an escape string with \'
    ("SELECT $$ ? :x % $$, $fn$ ? $fn$, E'\\' ? %', ?",
     "SELECT $$ ? :x %% $$, $fn$ ? $fn$, E'\\' ? %%', %s", "positional"),
    # array slices and time literals are left alone
    ("SELECT a[1:2], b[lo:hi], '10:30' FROM t", "SELECT a[1:2], b[lo:hi], '10:30' FROM t",
     "none"),
    # JSON operators of PostgreSQL with a `?`-free text
    ("SELECT attributes::jsonb ->> 'k' FROM memories",
     "SELECT attributes::jsonb ->> 'k' FROM memories", "none"),
])
def test_rewrite(sql, expected, style):
    done = rewrite(sql)
    assert done.sql == expected
    assert done.style == style


def test_no_parameters_keeps_the_text_and_sends_no_params():
    # psycopg formats `%` only when params are given: a text without parameters goes as is
    # (a multi-statement script through the simple protocol included)
    done = rewrite("SELECT 5 % 2; SELECT 'a%'")
    assert done.sql == "SELECT 5 % 2; SELECT 'a%'"
    assert done.bind(()) is None and done.bind(None) is None


def test_numbered_parameters_become_names_and_values_a_dict():
    done = rewrite("SELECT ?2, ?1, ?2")
    assert done.sql == "SELECT %(_p2)s, %(_p1)s, %(_p2)s"
    assert done.bind(("a", "b")) == {"_p1": "a", "_p2": "b"}


def test_bare_question_mark_after_numbered_is_one_more_than_the_largest():
    # SQLite: `?` takes one more than the largest number assigned so far
    done = rewrite("SELECT ?3, ?, ?1, ?")
    assert done.sql == "SELECT %(_p3)s, %(_p4)s, %(_p1)s, %(_p5)s"
    assert done.count == 5


def test_mixed_named_and_positional_is_refused():
    with pytest.raises(PlaceholderError):
        rewrite("SELECT :a, ?")


def test_rewrite_is_cached_per_text():
    assert rewrite("SELECT ? + 1") is rewrite("SELECT ? + 1")


def test_every_store_statement_round_trips_its_parameter_count():
    """Each `?` of the store's SQL literals becomes exactly one %s (a token the scanner
    swallowed or invented would shift every later parameter)."""
    import re
    from pathlib import Path

    import memcli.store

    literal = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
    checked = 0
    for path in Path(memcli.store.__file__).parent.glob("*.py"):
        for text in literal.findall(path.read_text()):
            if "SELECT" not in text and "INSERT" not in text and "UPDATE" not in text:
                continue
            if "'" in text or '"' in text or "--" in text:
                continue  # literals with quotes: covered by the cases above
            done = rewrite(text)
            assert done.sql.count("%s") == text.count("?"), text
            checked += 1
    assert checked > 50


@pytest.mark.parametrize(("params", "expected", "sent"), [
    (("t", None, 5), "WHERE m.tenant_id = %s AND (m.user_id IS NULL) AND n < %s", ["t", 5]),
    (("t", "u", 5), "WHERE m.tenant_id = %s AND (m.user_id = %s AND m.user_id IS NOT NULL)"
     " AND n < %s", ["t", "u", 5]),
])
def test_null_safe_equality_is_rendered_indexable_for_the_value(params, expected, sent):
    """errata 8: `IS NOT DISTINCT FROM ?` is no index condition on PostgreSQL; the value
    decides between `IS NULL` and `=` (the same truth value, under NOT too)."""
    plan = rewrite("WHERE m.tenant_id = ? AND m.user_id IS NOT DISTINCT FROM ? AND n < ?")
    assert plan.render(params) == (expected, sent)
    # executemany keeps the portable form (its rows may differ in NULLs)
    assert "IS NOT DISTINCT FROM %s" in plan.sql


@pytest.mark.parametrize("sql", [
    "SELECT a + b IS NOT DISTINCT FROM ?",  # the left operand is not a plain column
    "SELECT x::text IS NOT DISTINCT FROM ?",
    "SELECT 'c IS NOT DISTINCT FROM ?'",  # inside a literal
])
def test_null_safe_equality_left_alone_where_the_column_is_not_plain(sql):
    plan = rewrite(sql)
    assert plan.render((None,) if "?'" not in sql else None)[0] == plan.sql
