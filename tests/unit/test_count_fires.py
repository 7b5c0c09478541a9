"""Counting a schedule's occurrences without walking them must give exactly the number that
walking them gives: skipped records carry this count (`skippedCount`) and the job's `missed`
counter adds it up, so an approximation would be wrong data, not a slow sweep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.models import DstPolicy, Schedule
from jobsched.domain.schedule import count_fires, fires_between

from .test_cron_vixie import expressions

ZONES = ["UTC", "Europe/London", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu", "Pacific/Apia"]
SECONDS = ["", "0 ", "*/20 ", "15,45 ", "* "]
WALK_LIMIT = 60_000


def walked(schedule: Schedule, first: datetime, last: datetime) -> int | None:
    found = fires_between(schedule, first - timedelta(seconds=1), last, WALK_LIMIT)
    return None if len(found) >= WALK_LIMIT else len(found)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    expressions(),
    st.sampled_from(SECONDS),
    st.sampled_from(ZONES),
    st.datetimes(min_value=datetime(2011, 1, 1), max_value=datetime(2030, 12, 31)),
    st.integers(min_value=0, max_value=90 * 86_400),
    st.sampled_from(["shift", "skip"]),
    st.sampled_from(["first", "last", "both", "none"]),
)
def test_counting_a_cron_agrees_with_walking_it(
    expression: str, seconds: str, zone_name: str, start: datetime, length: int, gap: str, fold: str
) -> None:
    schedule = Schedule(
        kind="cron",
        cron=seconds + expression,
        time_zone=zone_name,
        dst=DstPolicy.model_validate({"gap": gap, "fold": fold}),
    )
    first = start.replace(microsecond=0, tzinfo=UTC)
    last = first + timedelta(seconds=length)
    expected = walked(schedule, first, last)
    if expected is None:
        return  # too many to walk in a test; the DST cases below cover dense crons
    assert count_fires(schedule, first, last) == expected, (schedule.cron, zone_name, first, last)


@pytest.mark.parametrize(
    ("zone_name", "first", "last"),
    [
        ("Europe/London", "2026-03-28T22:00:00", "2026-03-29T04:00:00"),  # spring forward
        ("Europe/London", "2026-10-24T22:00:00", "2026-10-25T04:00:00"),  # fall back
        ("Australia/Lord_Howe", "2026-04-04T13:00:00", "2026-04-04T17:00:00"),  # 30-minute fold
        ("Pacific/Apia", "2011-12-30T08:30:00", "2011-12-30T11:30:00"),  # a whole day skipped
    ],
)
@pytest.mark.parametrize("gap", ["shift", "skip"])
@pytest.mark.parametrize("fold", ["first", "last", "both", "none"])
@pytest.mark.parametrize("cron", ["* * * * * *", "*/7 * * * * *", "0 30 * * * *", "@hourly"])
def test_dense_crons_across_a_transition(
    zone_name: str, first: str, last: str, gap: str, fold: str, cron: str
) -> None:
    schedule = Schedule(
        kind="cron", cron=cron, time_zone=zone_name, dst=DstPolicy.model_validate({"gap": gap, "fold": fold})
    )
    lo = datetime.fromisoformat(first).replace(tzinfo=UTC)
    hi = datetime.fromisoformat(last).replace(tzinfo=UTC)
    assert count_fires(schedule, lo, hi) == len(fires_between(schedule, lo - timedelta(seconds=1), hi, 10**6))


def test_a_per_second_cron_over_a_month_is_counted_exactly() -> None:
    """2,678,400 seconds in January, none in a DST change for New York: every one counts."""
    schedule = Schedule(kind="cron", cron="* * * * * *", time_zone="America/New_York")
    first = datetime(2027, 1, 1, 5, 0, 0, tzinfo=UTC)
    assert count_fires(schedule, first, first + timedelta(days=31) - timedelta(seconds=1)) == 31 * 86_400
    # Across spring forward no second is lost: the gap is wall time, and every instant has one.
    skip = Schedule(kind="cron", cron="* * * * * *", time_zone="America/New_York", dst={"gap": "skip"})
    march = datetime(2027, 3, 1, 5, 0, 0, tzinfo=UTC)
    assert count_fires(skip, march, march + timedelta(days=31) - timedelta(seconds=1)) == 31 * 86_400


@pytest.mark.parametrize(
    "schedule",
    [
        Schedule(kind="rate", every_seconds=7, anchor=datetime(2026, 1, 1, tzinfo=UTC)),
        Schedule(kind="once", at=datetime(2026, 1, 5, tzinfo=UTC)),
        Schedule(
            kind="cron",
            cron="*/5 9-17 * * MON-FRI",
            time_zone="Europe/London",
            start_at=datetime(2026, 1, 3, tzinfo=UTC),
            end_at=datetime(2026, 2, 1, tzinfo=UTC),
        ),
    ],
)
def test_bounds_and_other_kinds(schedule: Schedule) -> None:
    lo, hi = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)
    assert count_fires(schedule, lo, hi) == len(fires_between(schedule, lo - timedelta(seconds=1), hi, 10**6))


@pytest.mark.parametrize(
    ("cron", "zone_name", "first", "last", "dst"),
    [
        # The range starts on the shifted gap occurrence itself, or inside a fold, or ends in
        # the hour before a fold: the transition lies just outside the range.
        ("30 2 * * *", "America/New_York", "2026-03-08T07:00:00", "2026-03-20T07:00:00", {}),
        ("30 1 * * *", "Europe/London", "2026-03-29T01:00:00", "2026-04-05T00:30:00", {}),
        ("0 0 30 12 *", "Pacific/Apia", "2011-12-30T10:00:00", "2012-01-05T00:00:00", {}),
        ("* * * * *", "Europe/London", "2026-10-25T01:00:00", "2026-10-25T01:59:59", {"fold": "first"}),
        ("* * * * *", "Europe/London", "2026-10-25T00:00:00", "2026-10-25T00:59:59", {"fold": "last"}),
        # `*` inside a list is every value.
        ("*,5 * * * * *", "UTC", "2026-01-01T00:00:00", "2026-01-01T00:10:00", {}),
        ("0 *,5 * * * *", "UTC", "2026-01-01T00:00:00", "2026-01-01T03:00:00", {}),
        ("0 0 *,5 * * *", "UTC", "2026-01-01T00:00:00", "2026-01-03T00:00:00", {}),
    ],
)
def test_ranges_that_begin_or_end_at_a_transition_and_stars_in_lists(cron, zone_name, first, last, dst):
    schedule = Schedule(kind="cron", cron=cron, time_zone=zone_name, dst=DstPolicy.model_validate(dst))
    lo = datetime.fromisoformat(first).replace(tzinfo=UTC)
    hi = datetime.fromisoformat(last).replace(tzinfo=UTC)
    assert count_fires(schedule, lo, hi) == len(fires_between(schedule, lo - timedelta(seconds=1), hi, 10**6))
