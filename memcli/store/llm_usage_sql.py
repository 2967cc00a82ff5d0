"""SQL for model spend: one row per reply, daily totals per tenant, reports per command and day."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memcli.store.connection import Database
    from memcli.store.dialect import Dialect


def record_usage(db: Database, row: dict[str, Any]) -> None:
    db.execute(
        "INSERT INTO llm_usage (ts, day, tenant_id, command, task, model, tokens_in, tokens_out,"
        " cost_usd, latency_ms, estimated) VALUES (:ts, :day, :tenant_id, :command, :task,"
        " :model, :tokens_in, :tokens_out, :cost_usd, :latency_ms, :estimated)",
        row,
    )


def tokens_on_day(db: Database, tenant_id: str, day: str) -> int:
    """Tokens in + out a tenant used on one UTC day (what the daily cap counts)."""
    return int(
        db.scalar(
            "SELECT coalesce(sum(tokens_in + tokens_out), 0) FROM llm_usage"
            " WHERE tenant_id = ? AND day = ?",
            (tenant_id, day),
        )
    )


@functools.cache
def _totals(dialect: Dialect) -> str:
    """The aggregate columns of every report, in `dialect`'s SQL (built once per dialect)."""
    return (
        "count(*) AS calls, sum(tokens_in) AS tokens_in, sum(tokens_out) AS tokens_out,"
        f" {dialect.round_to('sum(cost_usd)', 6)} AS cost_usd, sum(estimated) AS estimated_calls,"
        f" {dialect.round_to('sum(latency_ms)', 1)} AS latency_ms"
    )


def usage_report(
    db: Database, since_day: str | None = None, tenant_id: str | None = None
) -> dict[str, Any]:
    where, params = ["day >= ?"], [since_day or ""]
    if tenant_id is not None:
        where.append("tenant_id = ?")
        params.append(tenant_id)
    cond = " AND ".join(where)
    totals = _totals(db.dialect)
    b = db.dialect.binary
    by_day_command = db.query(
        f"SELECT day, command, tenant_id, {db.dialect.distinct_list('model')} AS models, {totals}"
        f" FROM llm_usage WHERE {cond} GROUP BY day, command, tenant_id"
        f" ORDER BY {b('day')} DESC, {b('command')}, {b('tenant_id')}",
        params,
    )
    for row in by_day_command:  # the aggregate's order differs per engine: name order on both
        row["models"] = ",".join(sorted(row["models"].split(",")))
    by_command = db.query(
        f"SELECT command, {totals} FROM llm_usage WHERE {cond} GROUP BY command"
        f" ORDER BY {b('command')}",
        params,
    )
    by_day = db.query(
        f"SELECT day, {totals} FROM llm_usage WHERE {cond} GROUP BY day"
        f" ORDER BY {b('day')} DESC", params
    )
    total = db.query(f"SELECT {totals} FROM llm_usage WHERE {cond}", params)[0]
    total = {k: (v or 0) for k, v in total.items()}
    return {
        "by_day_command": by_day_command,
        "by_command": by_command,
        "by_day": by_day,
        "total": total,
    }
