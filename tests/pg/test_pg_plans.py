"""Plans of the store's SQL on a real PostgreSQL (errata 8 of
docs/design/postgresql.md): a NULL-safe `user_id IS NOT DISTINCT FROM ?` reaches the server as
an index condition on `memories_scope` (tenant, user), for a user and for no user alike."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="PostgreSQL tests: psycopg is not installed")

from memcli.store.postgres import connect  # noqa: E402

SQL = ("EXPLAIN SELECT id FROM memories WHERE tenant_id = ? AND user_id IS NOT DISTINCT FROM ?"
       " AND state = 'active'")


@pytest.mark.parametrize("user", ["u1", None])
def test_null_safe_user_filter_is_an_index_condition(pg_memcli_db, user):  # noqa: F811
    db = connect(pg_memcli_db)
    try:
        db.execute("SET enable_seqscan = off")  # small table: make the planner show its index
        plan = "\n".join(r[0] for r in db.execute(SQL, ("t1", user)))
    finally:
        db.close()
    conditions = [line for line in plan.splitlines() if "Index Cond" in line]
    assert conditions and "user_id" in conditions[0], plan
    assert "Filter" not in plan, plan
