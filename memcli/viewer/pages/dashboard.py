"""The dashboard: `memcli doctor`'s findings and `memcli stats --requests` over a window, with
the p95 latency over time as a chart (memcli.viewer.chart: inline SVG, no script).

Both read the whole database (every tenant's request metrics, the file's integrity), so only
an unbound caller sees them (the daemon's Unix socket, an operator token, `--no-token` on
loopback); a token bound to a tenant is refused, as `doctor` refuses a tenant role.

`doctor`'s integrity check reads every page of the file (SQLite's quick_check: 320 ms at 10k
memories here, ten times that at 100k) and its index checks count every derived row (116 ms at
10k): too slow for each load of a page meant to open in under 200 ms. The serving process keeps
the report for DOCTOR_KEEP_SECONDS and the page says when it was made; "check again"
(`?fresh=1`, a read like any other: doctor changes nothing) runs it at once.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from pydantic import Field

from memcli.acb.stats import since_timestamp, summarise_requests
from memcli.core.request_base import Request as RequestModel
from memcli.errors import NotAllowedError
from memcli.health.checks import diagnose
from memcli.operations.requests import validated
from memcli.store.acb_sql import requests_since
from memcli.viewer.chart import latency_svg, p95_series

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from memcli.viewer.site import Pages

BUCKETS = 24
DOCTOR_KEEP_SECONDS = 600.0
_kept: dict[str, tuple[float, dict[str, Any]]] = {}
_kept_lock = threading.Lock()


class DashboardRequest(RequestModel):
    """The window the dashboard reads: `24h`, `7d`, `30m`, an ISO time; empty: all time."""

    since: str = Field(default="7d")
    fresh: bool = Field(default=False, description="Run doctor now, not its kept report.")


def dashboard(ctx: Any, scope: Any, params: dict[str, str]) -> dict[str, Any]:
    """`{since, doctor, stats, series, svg}` for the window (`doctor` with `checked_at`)."""

    if any(v is not None for v in (scope.tenant, scope.user_id, scope.agent, scope.app_id,
                                   scope.categories)):
        raise NotAllowedError("the dashboard reads the whole database",
                              "open it with an operator token or on the daemon's socket")
    given = {k: v for k, v in params.items() if k in DashboardRequest.model_fields}
    req = validated(DashboardRequest, given, "dashboard request")
    window = since_timestamp(req.since.strip() or None)
    rows = requests_since(ctx.memory.db, window)
    series = p95_series(rows, BUCKETS)
    return {"since": req.since, "doctor": _doctor(ctx, req.fresh),
            "stats": summarise_requests(rows, window), "series": series,
            "svg": latency_svg(series)}


def _doctor(ctx: Any, fresh: bool) -> dict[str, Any]:
    """doctor's report for this database: the kept one while it is young enough, else a new
    one (one run at a time: a page waiting for another's run gets its report)."""

    key = str(ctx.settings.db)
    with _kept_lock:
        kept = _kept.get(key)
        now = time.time()
        if fresh or kept is None or now - kept[0] > DOCTOR_KEEP_SECONDS:
            sparse = ctx.memory.sparse
            report = diagnose(ctx.memory.db, embedder=ctx.memory.embedder,
                              sparse_model=sparse.model_id if sparse is not None else None)
            kept = _kept[key] = (now, report)
    made, report = kept
    return {**report, "checked_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(made))}


def _pct(value: Any) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def _ms(value: Any) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


def register(site: Pages) -> None:
    async def show(request: Request, scope: Any) -> Response:
        params = dict(request.query_params)
        data = await site.run(dashboard, scope, params)
        return site.render(request, "dashboard.html", scope, title="Dashboard", data=data,
                           pct=_pct, ms=_ms)

    site.get("/dashboard", show, name="dashboard")
