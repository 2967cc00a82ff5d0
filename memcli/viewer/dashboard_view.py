"""The dashboard's operation: `memcli doctor`'s findings and `memcli stats --requests` over a
window, with the p95 latency per span of time for the chart (memcli.viewer.chart).

Both read the whole database (every tenant's request metrics, the file's integrity), so only
an unbound caller sees them (the daemon's unix socket, an operator token, `--no-token` on
loopback); a token bound to a tenant is refused, as `doctor` refuses a tenant role.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from memcli.errors import NotAllowedError

if TYPE_CHECKING:
    from memcli.service.api import Context, Scope

BUCKETS = 24
# `doctor`'s integrity check reads every page of the file (SQLite's quick_check: 320 ms at 10k
# memories here, ten times that at 100k) and its index checks count every derived row (116 ms
# at 10k): too slow for each load of a page meant to open in under 200 ms. The report is kept
# this long by the daemon's HTTP process, and the page says when it was made and offers a
# fresh check (`?fresh=1`, a read like any other: doctor changes nothing).
DOCTOR_KEEP_SECONDS = 600.0
_doctor_cache: dict[str, tuple[float, dict[str, Any]]] = {}
_doctor_lock = threading.Lock()


class DashboardPage(BaseModel):
    """The window the dashboard reads: `24h`, `7d`, `30m`, an ISO time; empty: all time."""

    since: str = Field(default="7d")
    fresh: bool = Field(default=False, description="Run doctor now, not its kept report.")


def dashboard(ctx: Context, scope: Scope, req: DashboardPage) -> dict[str, Any]:
    """`{doctor, stats, series, svg}` for the window (`doctor` with its `checked_at` and
    `age_seconds`)."""
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
    report = _doctor(ctx, diagnose, req.fresh)
    series = p95_series(rows, BUCKETS)
    return {"since": req.since, "doctor": report, "stats": summarise_requests(rows, window),
            "series": series, "svg": latency_svg(series)}


def _doctor(ctx: Context, diagnose: Any, fresh: bool) -> dict[str, Any]:
    """doctor's report for this database: the kept one while it is young enough, else a new
    one (one run at a time: a second page waiting for the first gets its report)."""
    key = str(ctx.settings.db)
    with _doctor_lock:
        kept = _doctor_cache.get(key)
        now = time.time()
        if fresh or kept is None or now - kept[0] > DOCTOR_KEEP_SECONDS:
            sparse = ctx.memory.sparse
            report = diagnose(ctx.memory.db, embedder=ctx.memory.embedder,
                              sparse_model=sparse.model_id if sparse is not None else None)
            kept = _doctor_cache[key] = (now, report)
    made, report = kept
    return {**report, "checked_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(made)),
            "age_seconds": round(time.time() - made)}
