"""The dashboard's latency chart: p95 per time bucket as server-rendered inline SVG.

No JavaScript library: the page is readable without scripts, and the chart is a handful of
SVG elements built here from numbers (every label is escaped). A bucket with no request is a
gap in the line, not a zero.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Any

from memcli.acb.stats import percentile

WIDTH, HEIGHT = 640, 200
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 12, 12, 28


def _when(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def p95_series(rows: list[dict[str, Any]], buckets: int = 24) -> list[dict[str, Any]]:
    """`rows` (request_metrics, oldest first) cut into `buckets` equal spans of time between
    the first and the last: each `{start, end, requests, p95}` (p95 None for an empty span).
    Failed requests are left out, as `stats --requests` leaves them out of its latency."""
    ok = [r for r in rows if not r.get("error_stage")]
    if not ok:
        return []
    times = [_when(r["ts"]) for r in ok]
    first, last = min(times), max(times)
    span = (last - first) / buckets if last > first else 1.0
    groups: list[list[float]] = [[] for _ in range(buckets)]
    for at, row in zip(times, ok, strict=True):
        groups[min(int((at - first) / span), buckets - 1)].append(float(row["latency_ms"]))
    if last == first:
        groups = [groups[0]]
    return [{"start": _iso(first + i * span), "end": _iso(first + (i + 1) * span),
             "requests": len(g), "p95": percentile(g, 95)} for i, g in enumerate(groups)]


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M")


def latency_svg(series: list[dict[str, Any]], title: str = "p95 latency (ms) over time") -> str:
    """An accessible SVG line chart of `series` (p95_series): axis, gridlines, one point per
    bucket that had requests, each with a <title> giving its span, count and p95."""
    values = [s["p95"] for s in series if s["p95"] is not None]
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" class="chart" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
            f'aria-labelledby="chart-title"><title id="chart-title">{escape(title)}</title>')
    if not values:
        return (head + f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">'
                "no requests in this window</text></svg>")
    top = max(values) * 1.1 or 1.0
    plot_w = WIDTH - PAD_LEFT - PAD_RIGHT
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    step = plot_w / max(len(series) - 1, 1)

    def x(i: int) -> float:
        return round(PAD_LEFT + (i * step if len(series) > 1 else plot_w / 2), 1)

    def y(v: float) -> float:
        return round(PAD_TOP + plot_h * (1 - v / top), 1)

    parts = [head]
    for frac in (0.0, 0.5, 1.0):  # gridlines with their values
        gy = y(top * frac)
        parts.append(f'<line x1="{PAD_LEFT}" y1="{gy}" x2="{WIDTH - PAD_RIGHT}" y2="{gy}" '
                     'stroke="#ccc" stroke-width="1"/>')
        parts.append(f'<text x="{PAD_LEFT - 6}" y="{gy + 4}" text-anchor="end" '
                     f'font-size="11">{top * frac:.0f}</text>')
    runs: list[list[str]] = [[]]  # a gap (a bucket with no request) breaks the line
    for i, s in enumerate(series):
        if s["p95"] is None:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(f"{x(i)},{y(s['p95'])}")
    for run in runs:
        if len(run) > 1:
            parts.append(f'<polyline fill="none" stroke="#1f6feb" stroke-width="2" '
                         f'points="{" ".join(run)}"/>')
    for i, s in enumerate(series):
        if s["p95"] is None:
            continue
        label = f"{s['start']} to {s['end']}: {s['requests']} requests, p95 {s['p95']} ms"
        parts.append(f'<circle class="point" cx="{x(i)}" cy="{y(s["p95"])}" r="3" '
                     f'fill="#1f6feb"><title>{escape(label)}</title></circle>')
    parts.append(f'<text x="{PAD_LEFT}" y="{HEIGHT - 8}" font-size="11">'
                 f'{escape(series[0]["start"])}</text>')
    parts.append(f'<text x="{WIDTH - PAD_RIGHT}" y="{HEIGHT - 8}" text-anchor="end" '
                 f'font-size="11">{escape(series[-1]["end"])}</text>')
    parts.append("</svg>")
    return "".join(parts)
