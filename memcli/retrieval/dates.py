"""The dates a query names, as the days whose memories the `date` ranking stage prefers.

"What did Nate make on 9 November, 2022?" names a day; "in May 2023" a month. A memory's event
time falls in the span when it is from that day (or month) up to a week after: people tell of
a day in the conversations that follow it, and a day before covers time zones and late nights.
A bare year ("in 2023") names no span: it would cover most memories. The mentions are found
with one pattern (a month name with a day, a year or both, or an ISO date) and read with
`datetime.strptime`, which knows the English month names and their abbreviations.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, datetime, timedelta

# The week after a day (or a month) in which its memories are told.
AFTER = timedelta(days=7)
BEFORE = timedelta(days=1)

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
    r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_DAY = r"(?:[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:1[89]|2\d)\d\d"
_MENTION = re.compile(
    rf"\b(?:(?P<iso>{_YEAR}-[01]\d-[0-3]\d)"
    rf"|(?P<dmy>{_DAY}(?:\s+of)?\s+{_MONTH},?\s+{_YEAR})"
    rf"|(?P<mdy>{_MONTH}\s+{_DAY},?\s+{_YEAR})"
    rf"|(?P<my>{_MONTH},?\s+{_YEAR}))\b",
    re.I,
)


def _read(kind: str, text: str) -> tuple[date, date] | None:
    """The first and last day a mention covers (None: not a real date, e.g. 31 February)."""
    if kind == "iso":
        formats = ["%Y-%m-%d"]
    else:
        # One spelling for strptime: no ordinal suffix, "of", comma or dot; "Sept" as "Sep".
        text = re.sub(r"(?<=\d)(st|nd|rd|th)\b|\bof\b|[,.]", " ", text, flags=re.I)
        text = re.sub(r"\bsept\b", "sep", " ".join(text.split()), flags=re.I)
        order = {"dmy": "%d {m} %Y", "mdy": "{m} %d %Y", "my": "{m} %Y"}[kind]
        formats = [order.format(m=m) for m in ("%B", "%b")]
    for fmt in formats:
        try:
            day = datetime.strptime(text, fmt).date()
        except ValueError:
            continue
        if kind == "my":
            return day, day.replace(day=calendar.monthrange(day.year, day.month)[1])
        return day, day
    return None


def named_spans(text: str) -> list[tuple[date, date]]:
    """The spans of days the dates named in `text` point at (see the module docstring)."""
    spans = []
    for found in _MENTION.finditer(text):
        kind = found.lastgroup
        span = _read(kind, found.group(kind)) if kind else None
        if span is not None:
            spans.append((span[0] - BEFORE, span[1] + AFTER))
    return spans


def day_of(timestamp: str) -> date | None:
    """The day of a stored event time (ISO 8601), None if it does not read as one."""
    try:
        return datetime.fromisoformat(timestamp).date()
    except ValueError:
        return None
