"""The dashboard's operation: `memcli doctor`'s findings and `memcli stats --requests` over a
window, with the p95 latency per span of time for the chart (memcli.viewer.chart).

Both read the whole database (every tenant's request metrics, the file's integrity), so only
an unbound caller sees them (the daemon's unix socket, an operator token, `--no-token` on
loopback); a token bound to a tenant is refused, as `doctor` refuses a tenant role.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from memcli.errors import NotAllowedError

if TYPE_CHECKING:
    from memcli.service.api import Context, Scope

BUCKETS = 24


class DashboardPage(BaseModel):
    """The window the dashboard reads: `24h`, `7d`, `30m`, an ISO time; empty: all time."""

    since: str = Field(default="7d")


def dashboard(ctx: Context, scope: Scope, req: DashboardPage) -> dict[str, Any]:
    """`{doctor, stats, series, svg}` for the window."""
    from memcli.acb.stats import since_timestamp, summarise_requests
    from memcli.health.checks import diagnose
    from memcli.store.acb_sql import requests_since
    from memcli.viewer.chart import latency_svg, p95_series

    if any(v is not None for v in (scope.tenant, scope.user_id, scope.agent, scope.app_id,
                                   scope.categories)):
        raise NotAllowedError("the dashboard reads the whole database",
                              "open it with an operator token or on the daemon's socket")
    db = ctx.memory.db
    window = since_timestamp(req.since.strip() or None)
    rows = requests_since(db, window)
    sparse = ctx.memory.sparse
    report = diagnose(db, embedder=ctx.memory.embedder,
                      sparse_model=sparse.model_id if sparse is not None else None)
    series = p95_series(rows, BUCKETS)
    return {"since": req.since, "doctor": report, "stats": summarise_requests(rows, window),
            "series": series, "svg": latency_svg(series)}
