"""Business-day rules of a union's `monthly` specs: first-business-day, last-business-day and
`nearest-business-day N`, over weekends and a holiday calendar. Hand-worked cases across
month ends, leap years and DST; a property against a brute-force evaluator written here."""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.calendars import Calendar
from jobsched.domain.models import WRITE, Schedule
from jobsched.domain.schedule import count_fires, fires_between, latest_fire_before, resolve, upcoming
from pydantic import ValidationError


def z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def rule(
    monthly: str, at: str, zone: str = "UTC", holidays: list[str] | None = None, **kw: object
) -> Schedule:
    spec: dict[str, object] = {"monthly": monthly, "at": at, "time_zone": zone}
    if holidays is not None:
        spec["holidays"] = "hols"
    schedule = Schedule.model_validate({"kind": "union", "specs": [spec], **kw}, context=WRITE)
    if holidays is None:
        return schedule
    entries = [{"date": day} for day in holidays]
    return resolve(schedule, {"hols": Calendar.model_validate({"name": "hols", "entries": entries})})


@pytest.mark.parametrize(
    ("monthly", "zone", "holidays", "after", "expected"),
    [
        # Weekends alone: 2026-02-15 is a Sunday (Monday the 16th), 2026-08-15 a Saturday
        # (Friday the 14th), 2026-04-15 a Wednesday (itself).
        ("nearest-business-day 15", "UTC", None, "2026-02-01", ["2026-02-16T09:00"]),
        ("nearest-business-day 15", "UTC", None, "2026-08-01", ["2026-08-14T09:00"]),
        ("nearest-business-day 15", "UTC", None, "2026-04-01", ["2026-04-15T09:00"]),
        # Never into another month: 2026-05-31 is a Sunday (Friday the 29th, not June 1st);
        # 2026-08-01 a Saturday (Monday the 3rd, not July 31st).
        ("nearest-business-day 31", "UTC", None, "2026-05-01", ["2026-05-29T09:00"]),
        ("nearest-business-day 1", "UTC", None, "2026-08-01", ["2026-08-03T09:00"]),
        # A day past the month's end is its last day: February 2028 (leap) ends on Tuesday
        # the 29th; February 2027 on Sunday the 28th (Friday the 26th), April 2026 on a Thursday.
        ("nearest-business-day 31", "UTC", None, "2028-02-01", ["2028-02-29T09:00"]),
        ("nearest-business-day 30", "UTC", None, "2027-02-01", ["2027-02-26T09:00"]),
        ("nearest-business-day 31", "UTC", None, "2026-04-01", ["2026-04-30T09:00"]),
        # A holiday on the day: the nearer of the days either side, the earlier when as near.
        ("nearest-business-day 15", "UTC", ["2026-04-15"], "2026-04-01", ["2026-04-14T09:00"]),
        ("nearest-business-day 15", "UTC", ["2026-04-14", "2026-04-15"], "2026-04-01", ["2026-04-16T09:00"]),
        # Friday the 13th a holiday, the 15th a Sunday: Monday the 16th (Friday is now 3 away).
        ("nearest-business-day 15", "UTC", ["2026-02-13"], "2026-02-01", ["2026-02-16T09:00"]),
        # Saturday the 15th, Friday the 14th a holiday: Thursday the 13th (2) ties Monday the 17th (2).
        ("nearest-business-day 15", "UTC", ["2026-08-14"], "2026-08-01", ["2026-08-13T09:00"]),
        ("last-business-day", "UTC", None, "2026-05-01", ["2026-05-29T09:00", "2026-06-30T09:00"]),
        ("last-business-day", "UTC", ["2026-05-29", "2026-05-28"], "2026-05-01", ["2026-05-27T09:00"]),
        # Leap day: February 2028's last business day is Tuesday the 29th.
        ("last-business-day", "UTC", None, "2028-02-01", ["2028-02-29T09:00"]),
        ("first-business-day", "UTC", None, "2026-08-01", ["2026-08-03T09:00", "2026-09-01T09:00"]),
        ("first-business-day", "UTC", ["2027-01-01"], "2026-12-15", ["2027-01-04T09:00"]),
        # New York: 09:00 EST is 14:00Z, EDT 13:00Z (the clocks changed on 2026-03-08).
        ("nearest-business-day 15", "America/New_York", None, "2026-03-01", ["2026-03-16T13:00"]),
        # The holiday is a local date: 2026-07-03 in New York, whatever the UTC date.
        ("first-business-day", "America/New_York", ["2026-07-01"], "2026-07-01", ["2026-07-02T13:00"]),
    ],
)
def test_hand_worked_cases(monthly, zone, holidays, after, expected):
    s = rule(monthly, "09:00", zone, holidays)
    assert upcoming(s, z(after), len(expected)) == [z(t) for t in expected]


def test_a_business_day_on_a_dst_change_follows_the_dst_policy():
    # Cairo changes on weekdays: 2024-04-26 (Friday) skips 00:00-00:59; 2024-10-31 (Thursday)
    # repeats 23:00-23:59 (UTC+3, then UTC+2).
    gap = rule("nearest-business-day 26", "00:30", "Africa/Cairo")
    assert upcoming(gap, z("2024-04-01"), 1) == [z("2024-04-25T22:00")]  # shifted to the gap's end
    skipped = rule("nearest-business-day 26", "00:30", "Africa/Cairo", dst={"gap": "skip"})
    # April's is skipped; May 26th is a Sunday: Monday the 27th, 00:30 EEST.
    assert upcoming(skipped, z("2024-04-01"), 1) == [z("2024-05-26T21:30")]
    fold = rule("last-business-day", "23:30", "Africa/Cairo", dst={"fold": "both"})
    assert upcoming(fold, z("2024-10-01"), 2) == [z("2024-10-31T20:30"), z("2024-10-31T21:30")]


def test_a_month_with_no_business_day_has_no_occurrence():
    every_day = [str(date(2026, 3, 1) + timedelta(days=n)) for n in range(31)]
    s = rule("nearest-business-day 10", "09:00", "UTC", every_day)
    assert upcoming(s, z("2026-02-01"), 2) == [z("2026-02-10T09:00"), z("2026-04-10T09:00")]


def test_a_rule_is_counted_and_searched_back_as_it_is_walked():
    s = rule("nearest-business-day 15", "09:00", "UTC", ["2026-04-15"])
    first, last = z("2026-01-01T00:00"), z("2026-12-31T23:59:59")
    walked = fires_between(s, first - timedelta(seconds=1), last, 100)
    assert len(walked) == count_fires(s, first, last) == 12
    assert latest_fire_before(s, z("2026-04-30"), not_before=first) == z("2026-04-14T09:00")


@pytest.mark.parametrize(
    ("spec", "field", "text"),
    [
        ({"monthly": "nearest-business-day 32", "at": "09:00"}, ("specs", 0, "monthly"), "must be last-day"),
        ({"monthly": "nearest-business-day 0", "at": "09:00"}, ("specs", 0, "monthly"), "must be last-day"),
        ({"monthly": "nearest-business-day", "at": "09:00"}, ("specs", 0, "monthly"), "must be last-day"),
        ({"monthly": "last FRI", "at": "09:00", "holidays": "h"}, ("specs", 0, "holidays"), "business-day"),
        ({"cron": "0 9 * * *", "holidays": "h"}, ("specs", 0, "holidays"), "business-day"),
        (
            {"monthly": "last-business-day", "at": "09:00", "holidays": "a b"},
            ("specs", 0, "holidays"),
            "letters",
        ),
    ],
)
def test_a_malformed_rule_names_the_field_and_the_rule(spec, field, text):
    with pytest.raises(ValidationError) as caught:
        Schedule.model_validate({"kind": "union", "specs": [{"time_zone": "UTC", **spec}]}, context=WRITE)
    error = caught.value.errors()[0]
    loc = tuple(error["loc"]) + tuple(error.get("ctx", {}).get("loc", ()))
    assert loc == field, caught.value
    assert text in error["msg"], error["msg"]


def test_a_rule_is_stored_normalised():
    s = Schedule.model_validate(
        {
            "kind": "union",
            "specs": [{"monthly": " Nearest-Business-Day  07 ", "at": "09:00", "time_zone": "UTC"}],
        }
    )
    assert s.specs is not None and s.specs[0].monthly == "nearest-business-day 7"


# --- property: against a brute-force evaluator ---


def brute_force_day(monthly: str, year: int, month: int, holidays: set[date]) -> int | None:
    """The rule's day read off every day of the month: the business days (Monday to Friday,
    not a holiday), then the first, the last, or the one nearest the target (clipped to the
    month), the earlier of two as near."""
    days = calendar.monthrange(year, month)[1]
    business = [
        d
        for d in range(1, days + 1)
        if date(year, month, d).weekday() < 5 and date(year, month, d) not in holidays
    ]
    if not business:
        return None
    if monthly == "first-business-day":
        return business[0]
    if monthly == "last-business-day":
        return business[-1]
    target = min(int(monthly.split()[1]), days)
    return min(business, key=lambda d: (abs(d - target), d))


RULES = ["first-business-day", "last-business-day", *[f"nearest-business-day {n}" for n in range(1, 32)]]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    st.sampled_from(RULES),
    st.integers(min_value=1990, max_value=2060),
    st.sets(st.integers(min_value=0, max_value=365), max_size=80),
    st.integers(min_value=0, max_value=23),
)
def test_property_the_rule_picks_the_day_a_brute_force_reading_picks(monthly, year, offsets, hour):
    start = date(year, 1, 1)
    holidays = {start + timedelta(days=n) for n in offsets if (start + timedelta(days=n)).year == year}
    s = rule(monthly, f"{hour:02d}:00", "UTC", sorted(str(d) for d in holidays))
    found = fires_between(
        s,
        datetime(year, 1, 1, tzinfo=UTC) - timedelta(seconds=1),
        datetime(year, 12, 31, 23, 59, tzinfo=UTC),
        20,
    )
    expected = [
        datetime(year, month, day, hour, tzinfo=UTC)
        for month in range(1, 13)
        if (day := brute_force_day(monthly, year, month, holidays)) is not None
    ]
    assert found == expected


def _resolved(monthly: str, ranges: list[dict[str, str]]) -> Schedule:
    schedule = Schedule.model_validate(
        {
            "kind": "union",
            "specs": [{"monthly": monthly, "at": "09:00", "time_zone": "UTC", "holidays": "h"}],
        },
        context=WRITE,
    )
    return resolve(schedule, {"h": Calendar.model_validate({"name": "h", "entries": ranges})})


def test_holidays_covering_every_day_end_the_search_after_a_year_not_at_year_9999():
    """The walk gives up past MAX_RULE_DAY_GAP without a rule day, having looked at about a
    year of daily candidates (a walk to year 9999 is ~2.9 million of them)."""
    import jobsched.domain.schedule as module

    walked = [0]
    real = module._cron_times

    def counted(*args: Any, **kwargs: Any) -> Iterator[datetime]:
        for instant in real(*args, **kwargs):
            walked[0] += 1
            if walked[0] > 5_000:
                raise AssertionError("the rule-day search walked on past its bound")
            yield instant

    everything = _resolved("last-business-day", [{"startDate": "1970-01-01", "endDate": "9998-12-31"}])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "_cron_times", counted)
        assert upcoming(everything, z("2026-12-07T00:00:00"), 5) == []
    assert 0 < walked[0] <= module.MAX_RULE_DAY_GAP.days + 2
