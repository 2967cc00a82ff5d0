"""The dates a query names, read as the days the `date` ranking stage prefers."""

from __future__ import annotations

from datetime import date

import pytest

from memcli.retrieval.dates import day_of, named_spans


@pytest.mark.parametrize(
    ("text", "first", "last"),
    [
        (
            "What is Nate creating for YouTube on 9 November, 2022?",
            date(2022, 11, 8),
            date(2022, 11, 16),
        ),
        (
            "What did John organize with his friends on May 8, 2022?",
            date(2022, 5, 7),
            date(2022, 5, 15),
        ),
        (
            "Which book did Tim recommend on 8th December, 2023?",
            date(2023, 12, 7),
            date(2023, 12, 15),
        ),
        ("the 3rd of Sept 2023", date(2023, 9, 2), date(2023, 9, 10)),
        ("notes from 2024-02-29", date(2024, 2, 28), date(2024, 3, 7)),
        # A month: all of it, and the week after.
        ("What did John host for the veterans in May 2023?", date(2023, 4, 30), date(2023, 6, 7)),
        ("Dec. 2021 budget", date(2021, 11, 30), date(2022, 1, 7)),
    ],
)
def test_a_named_day_or_month_reads_as_that_span_and_the_week_after(text, first, last):
    assert named_spans(text) == [(first, last)]


@pytest.mark.parametrize(
    "text",
    [
        "How many times has Melanie gone to the beach in 2023?",  # a bare year: most memories
        "When did Caroline go to the LGBTQ support group?",
        "may I ask about 2 dogs",
        "on 31 February, 2023",  # no such day
        "c16xdeploy status",
        "",
    ],
)
def test_text_naming_no_day_or_month_has_no_span(text):
    assert named_spans(text) == []


def test_two_dates_give_two_spans():
    spans = named_spans("between August 11, 2023 and 15 August 2023")
    assert [first for first, _ in spans] == [date(2023, 8, 10), date(2023, 8, 14)]


def test_a_stored_event_time_reads_as_its_day():
    assert day_of("2023-05-08T23:56:00.000000Z") == date(2023, 5, 8)
    assert day_of("not a time") is None
