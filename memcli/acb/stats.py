"""`memcli stats --requests`: full-text hit rate, per-leg hit rates, retrieval paths, fallback and
truncation shares, latency percentiles.

Reads the `request_metrics` rows that every `query` and `acb build` appends, over a window.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memcli.core.records import format_ts, parse_ts
from memcli.errors import UsageError
from memcli.store.acb_sql import requests_since

if TYPE_CHECKING:
    from memcli.store.connection import Database

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def since_timestamp(value: str | None, now: datetime | None = None) -> str | None:
    """`24h`, `7d`, `30m`, `2w`, `90s` before now, or an ISO 8601 time; None for all time."""
    if value is None:
        return None
    match = _DURATION.match(value)
    if match:
        delta = timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})
        return format_ts((now or datetime.now(UTC)) - delta)
    try:
        return parse_ts(value)
    except ValueError as exc:
        raise UsageError(f"bad --since {value!r}", "use e.g. 24h, 7d, 30m or an ISO time") from exc


def request_stats(db: Database, since: str | None) -> dict[str, Any]:
    return summarise_requests(requests_since(db, since), since)


def percentile(values: list[float], p: float) -> float | None:
    """Linear-interpolated percentile (p in 0..100); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return round(s[lo] + (s[hi] - s[lo]) * (k - lo), 3)


# The evolution plan's full-text hit: a request whose full-text legs (lexical and CJK trigram)
# found at least this many distinct memories; its upgrade trigger is `fts_hits < 3` in more
# than 30 % of requests. `stats --requests` reports the hit rate and `doctor` its complement,
# both from `fulltext_hit_rate`, so the two never disagree.
FULLTEXT_HIT_MIN = 3
# Per-leg columns of a request-metrics row (`lexical_hits` holds the full-text legs' count).
LEG_COLUMNS = {"fulltext": "lexical_hits", "sparse": "sparse_hits", "dense": "vector_hits",
               "entity": "entity_hits"}


def retrieving(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests that ran retrieval (an `acb build` without a query does not)."""
    return [r for r in rows if r["retrieval_path"] not in ("", "none")]


def fulltext_hit_rate(rows: list[dict[str, Any]]) -> float | None:
    """Share of the retrieving requests with at least FULLTEXT_HIT_MIN full-text hits; None
    when none retrieved."""
    ran = retrieving(rows)
    if not ran:
        return None
    return round(sum(1 for r in ran if r["lexical_hits"] >= FULLTEXT_HIT_MIN) / len(ran), 4)


def summarise_requests(rows: list[dict[str, Any]], since: str | None) -> dict[str, Any]:
    """`stats --requests`: per command and overall, over the rows of a time window.

    hit rate: the evolution plan's full-text hit rate, the share of retrieving requests whose
    full-text legs found at least FULLTEXT_HIT_MIN memories (`doctor`'s full-text trigger is
    its complement); leg hit rates: the share in which each leg found anything (`any`: some
    leg did); paths: how many requests answered by each retrieval path (`session>user`
    widened, `...>recent` fell back to the newest memories); fallback share: requests whose
    path widened or fell back; truncation share: requests that cut items.
    """

    def block(sub: list[dict[str, Any]]) -> dict[str, Any]:
        retrieved = retrieving(sub)
        legs = {name: round(sum(1 for r in retrieved if r[column] > 0) / len(retrieved), 4)
                if retrieved else None for name, column in LEG_COLUMNS.items()}
        legs["any"] = (round(sum(1 for r in retrieved if any(r[c] > 0 for c in
                                                            LEG_COLUMNS.values()))
                             / len(retrieved), 4) if retrieved else None)
        paths: dict[str, int] = {}
        for r in retrieved:
            paths[r["retrieval_path"]] = paths.get(r["retrieval_path"], 0) + 1
        ok = [r for r in sub if not r["error_stage"]]
        lat = [float(r["latency_ms"]) for r in ok]
        errors: dict[str, int] = {}
        for r in sub:
            if r["error_stage"]:
                errors[r["error_stage"]] = errors.get(r["error_stage"], 0) + 1
        n = len(sub)
        return {
            "requests": n,
            "errors": dict(sorted(errors.items())),
            "retrieval_requests": len(retrieved),
            "hit_rate": fulltext_hit_rate(sub),
            "hit_min": FULLTEXT_HIT_MIN,
            "leg_hit_rates": legs,
            "paths": dict(sorted(paths.items())),
            "fallback_share": round(sum(1 for r in sub if r["fallbacks"] > 0) / n, 4)
            if n
            else None,
            "truncation_share": round(sum(1 for r in sub if r["truncated"]) / n, 4) if n else None,
            "latency_ms": {"p50": percentile(lat, 50), "p95": percentile(lat, 95)},
            "mean_items": round(sum(r["items"] for r in ok) / len(ok), 2) if ok else None,
            "mean_tokens": round(sum(r["tokens_used"] for r in ok) / len(ok), 1) if ok else None,
        }

    commands = sorted({r["command"] for r in rows})
    return {
        "since": since,
        "first": rows[0]["ts"] if rows else None,
        "last": rows[-1]["ts"] if rows else None,
        **block(rows),
        "by_command": {c: block([r for r in rows if r["command"] == c]) for c in commands},
    }
